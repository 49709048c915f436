r"""Message fields as terminal-safe text: operators see data, never terminal commands.

Payloads, sender names, errors and ids come from other programs (and the
database may be written by other tools), so ``pigeon`` and ``pigeon-tui``
pass every such field through :func:`visible` before drawing it.  Otherwise
``ESC [2J`` clears the operator's screen, an OSC 52 sequence overwrites the
clipboard, and a bidi override (U+202E) shows text in another order than
it has.

What is escaped is declared once, as Unicode categories
(:data:`ESCAPED_CATEGORIES`): controls ``Cc`` (C0, DEL, C1, so every escape
sequence loses its ESC/CSI/OSC introducer), invisible formatting ``Cf`` (bidi
embeddings, overrides, isolates and marks, zero-width spaces and joiners,
word joiner, BOM, tag characters), line and paragraph separators ``Zl`` and
``Zp``, and lone surrogates ``Cs`` (which stdout cannot even encode).

The escapes are Python's string-literal escapes: ``\t`` ``\n`` ``\r``,
``\xNN`` below U+0100, ``\uNNNN`` in the BMP, ``\UNNNNNNNN`` above.  A
literal backslash is always doubled (``\\``), so output never leaves a
doubt: ``\x1b`` in it is an ESC, ``\\x1b`` the four characters a payload
really contained (the text reads like the inside of a Python string).
Everything else, non-ASCII letters, CJK and emoji included, is left as it
is.  An emoji sequence joined by ZWJ (U+200D) shows its joiners escaped: a
zero-width character is exactly what can make two names look the same.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Final

ESCAPED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
SHORT_ESCAPES: Final = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}

# Candidates only: runs of anything but printable ASCII other than the backslash.
# A run that str.isprintable() passes (no Cc, Cf, Cs, Zl, Zp among others) and
# holds no backslash is kept whole; only other runs go character by character
# through escape_char, which decides from the category.  So ASCII, accented
# and CJK text all stay fast.
_SINGLE_LINE: Final = re.compile(r"[^\x20-\x5b\x5d-\x7e]+")
_MULTI_LINE: Final = re.compile(r"[^\x20-\x5b\x5d-\x7e\n\t]+")


def visible(text: str, *, multiline: bool = False) -> str:
    """``text`` with every control, format and separator character escaped.

    ``multiline=True`` keeps newlines and tabs as they are, for blocks such
    as a payload or an envelope printed over several lines (a tab only moves
    the cursor forward over cells not yet written, so it hides nothing).  Carriage
    returns are always escaped: one would let a line overwrite itself.
    """
    pattern = _MULTI_LINE if multiline else _SINGLE_LINE
    return pattern.sub(_escape_run, text)


def _escape_run(match: re.Match[str]) -> str:
    run = match.group()
    if "\\" not in run and run.isprintable():
        return run
    return "".join(map(escape_char, run))


@lru_cache(maxsize=4096)
def escape_char(char: str) -> str:
    """One character as it is shown: itself, or its escape."""
    if char in SHORT_ESCAPES:
        return SHORT_ESCAPES[char]
    if unicodedata.category(char) not in ESCAPED_CATEGORIES:
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


_JSON_CANDIDATES: Final = re.compile(r"[^\x20-\x7e\n]+")


def json_visible(text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with every character
    :func:`visible` would escape written as a JSON ``\\uNNNN`` escape instead: the same
    data when decoded, nothing a terminal acts on when printed.  Such characters can
    only stand inside JSON strings, so the escape is always valid there."""

    def escape_run(match: re.Match[str]) -> str:
        run = match.group()
        if run.isprintable():
            return run
        out = []
        for char in run:
            if unicodedata.category(char) not in ESCAPED_CATEGORIES:
                out.append(char)
                continue
            for unit in _utf16_units(char):
                out.append(f"\\u{unit:04x}")
        return "".join(out)

    return _JSON_CANDIDATES.sub(escape_run, text)


def _utf16_units(char: str) -> list[int]:
    code = ord(char)
    if code < 0x10000:
        return [code]
    code -= 0x10000
    return [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]
