"""What a tool shows of text that came from a sender or the daemon: never a line or a tag
of pigeond's own.

A port of the opencode plugin's ``showChar``/``field``: ``& < >`` and every character that
reads as a bracket become the envelope's escapes (:func:`pigeond.envelope.escape_text`,
over the one table of :mod:`pigeond.angle_table`);
controls, invisible format characters and separators become visible escapes (the
categories of :data:`pigeond.terminal.ESCAPED_CATEGORIES`); tab stays a tab.  So no
payload can show a ``<swarm_message`` tag, a line break or a terminal command.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import Final

from pigeond.envelope import escape_text
from pigeond.terminal import ESCAPED_CATEGORIES, escape_char

QUOTE: Final = "> "  # starts every payload line a tool shows
# every line break a reader's renderer might honour; CRLF is one break
LINE_BREAKS: Final = frozenset({"\r\n", "\n", "\r", "\v", "\f", "\x85", "\u2028", "\u2029"})


@lru_cache(maxsize=4096)
def show_char(char: str) -> str:
    """One character as a tool shows it."""
    entity = escape_text(char)
    if entity != char:
        return entity
    code = ord(char)
    if code < 0xA0:
        if char == "\t" or 0x20 <= code < 0x7F:
            return char
        return f"\\x{code:02x}"
    if unicodedata.category(char) in ESCAPED_CATEGORIES:
        return escape_char(char)
    return char


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def cut_to_bytes(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` within ``max_bytes`` UTF-8 bytes, whole characters."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", "ignore")


def field(value: object, max_bytes: int = 256) -> str:
    """One value from the daemon on one line, escaped (line breaks included), cut."""
    text = "-" if value is None else str(value)
    return cut_to_bytes("".join(map(show_char, text)), max_bytes)


class QuotedPayload:
    """A payload as a tool shows it after the QUOTE of its first line: each character
    escaped, each line break starting a new quoted line.  Measured up to ``max_bytes``
    only (``size`` is None past that: such a payload is cut anyway)."""

    def __init__(self, payload: str, max_bytes: int) -> None:
        self.units: list[str] = []
        self.ends: list[int] = []
        total = 0
        i = 0
        while i < len(payload) and total <= max_bytes:
            char = "\r\n" if payload.startswith("\r\n", i) else payload[i]
            shown = "\n" + QUOTE if char in LINE_BREAKS else show_char(char)
            total += utf8_len(shown)
            self.units.append(shown)
            self.ends.append(total)
            i += len(char)
        self.size: int | None = total if i >= len(payload) else None

    def whole(self) -> str:
        return "".join(self.units)

    def cut(self, cap: int) -> str:
        """The longest prefix shown in at most ``cap`` bytes, never splitting an escape."""
        low, high = 0, len(self.units)
        while low < high:
            mid = (low + high + 1) // 2
            if self.ends[mid - 1] <= cap:
                low = mid
            else:
                high = mid - 1
        return "".join(self.units[:low])
