"""Message ids: ``msg_<base36 millisecond timestamp>_<8 hex>``.

Ids are names, not order; accept order is kept by ``accept_seq``.
"""

from __future__ import annotations

import functools
import os
import threading

_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def base36(n: int) -> str:
    if n < 0:
        raise ValueError("base36 takes a non-negative integer")
    if n == 0:
        return "0"
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(_DIGITS[r])
    return "".join(reversed(out))


class _RandomHex:
    """8 hex digits of the operating system's randomness at a time, as
    ``secrets.token_hex(4)`` gives them, drawn 4 KiB at once: one ``getrandom`` call per
    1,024 ids rather than one per id (it cost an accept about 15 µs, two per send)."""

    _CHUNK = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hex = ""
        self._at = 0

    def __call__(self) -> str:
        with self._lock:
            if self._at >= len(self._hex):
                self._hex, self._at = os.urandom(self._CHUNK).hex(), 0
            at = self._at
            self._at = at + 8
            return self._hex[at : at + 8]


_random_hex = _RandomHex()


@functools.lru_cache(maxsize=1)
def _stamp(now_ms: int) -> str:
    """``base36(now_ms)``, kept for the sends that come in the same millisecond."""
    return base36(now_ms)


def make_msg_id(now_ms: int) -> str:
    return f"msg_{_stamp(now_ms)}_{_random_hex()}"


def make_thread_id(now_ms: int) -> str:
    """A new thread's id, ``thr_<base36 ms>_<8 hex>``: unique as a msg_id is, and within
    ``model.THREAD_RE``."""
    return f"thr_{_stamp(now_ms)}_{_random_hex()}"
