"""A search's text: its words, and FTS5's query of them (pigeond/storage/search.py).

Kept apart from the repository so that each engine (pigeond/storage/engines/) can build
its search query from a user's text without importing the repository.
"""

from __future__ import annotations

import re
from typing import Final

# Bounds on what one search may ask: its text, its words, the page.
MAX_QUERY_CHARS: Final = 256
MAX_QUERY_WORDS: Final = 16
DEFAULT_SEARCH_LIMIT: Final = 50
MAX_SEARCH_LIMIT: Final = 500

# The columns a session's id is looked for in (sent or received).
SESSION_COLUMNS: Final = "{from_session to_session}"


class SearchQueryError(ValueError):
    """Search text that cannot be searched for (empty, too long, no word in it)."""


# What neither engine takes in a query: NUL and the surrogates, which no UTF-8 encodes.
_UNSEARCHABLE: Final = re.compile("[\x00\ud800-\udfff]")


def check_searchable(text: str, what: str = "the search text") -> None:
    """:class:`SearchQueryError` naming the first character of ``text`` that no search
    engine takes (a NUL, a lone surrogate), before it reaches one."""
    found = _UNSEARCHABLE.search(text)
    if found is not None:
        raise SearchQueryError(
            f"{what} has a character that cannot be searched for (U+{ord(found.group()):04X})"
        )


def _phrase(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _has_word(text: str) -> bool:
    """Whether FTS5's unicode61 tokenizer finds a token in ``text``: a letter or a number
    (the underscore, like all punctuation, separates tokens)."""
    return any(ch.isalnum() for ch in text)


def search_words(text: str) -> list[str]:
    """The words of ``text`` to search for; :class:`SearchQueryError` for text with
    nothing to search, or too much."""
    if len(text) > MAX_QUERY_CHARS:
        raise SearchQueryError(f"the search text is over {MAX_QUERY_CHARS} characters")
    check_searchable(text)
    words = [w for w in text.split() if _has_word(w)]
    if not words:
        raise SearchQueryError("the search text has no word to search for")
    if len(words) > MAX_QUERY_WORDS:
        raise SearchQueryError(f"the search text has over {MAX_QUERY_WORDS} words")
    return words


def match_expression(text: str, session: str | None = None) -> str:
    """The FTS5 query for ``text`` (and, narrowing it, ``session``): every word a quoted
    phrase, ANDed.  Raises :class:`SearchQueryError` for text with nothing to search."""
    terms = [_phrase(w) for w in search_words(text)]
    if session is not None:
        check_searchable(session, "the session")
        terms.append(f"{SESSION_COLUMNS} : {_phrase(session)}")
    return " AND ".join(terms)
