"""Message ids: ``msg_<base36 millisecond timestamp>_<8 hex>``.

Ids are names, not order; accept order is kept by ``accept_seq``.
"""

from __future__ import annotations

import functools
import secrets

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


@functools.lru_cache(maxsize=1)
def _stamp(now_ms: int) -> str:
    """``base36(now_ms)``, kept for the sends that come in the same millisecond."""
    return base36(now_ms)


def make_msg_id(now_ms: int) -> str:
    return f"msg_{_stamp(now_ms)}_{secrets.token_hex(4)}"


def make_thread_id(now_ms: int) -> str:
    """A new thread's id, ``thr_<base36 ms>_<8 hex>``: unique as a msg_id is, and within
    ``model.THREAD_RE``."""
    return f"thr_{_stamp(now_ms)}_{secrets.token_hex(4)}"
