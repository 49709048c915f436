"""Full-text search over the messages: the FTS5 index ``swarm_search`` (migration 13).

The index is kept in step with ``swarm_messages`` by triggers (see
:data:`pigeond.storage.migrations._V13_SEARCH`), so nothing here writes it.  What is
here is the one way it is queried, shared by ``GET /swarm/search``, ``pigeon search``
and the TUI's ``/`` filter.

User text never reaches FTS5's query language: it is split on white space and every
word becomes a quoted phrase (a ``"`` doubled), all of them ANDed, so ``NEAR(``,
``*``, ``payload:`` or an unbalanced parenthesis are searched for as the words they
contain, never parsed.  A word with nothing FTS5 would index (``*``, ``--``) is
dropped; text with no word left is a :class:`SearchQueryError`, and so is text neither
engine can take: a NUL (PostgreSQL refuses it in text, SQLite's FTS5 ends the query at
it) or a lone surrogate (no UTF-8 encodes it: what an invalid byte of a command line
becomes in Python).

A session's search is narrowed inside the index (its id as a phrase in the sender and
target columns, an intersection of posting lists, not a walk of every match) and then
checked exactly against the row: FTS5 splits ``ses_ab_c`` into words, so the phrase
alone would also match ``ses_ab``'s longer neighbours.  Results are newest first (the
index's rowid is the accept sequence), found on the index and joined to the table by
``idx_swarm_accept_seq``: a page costs about ``limit`` row lookups whatever the size
of the history (bench/search_table.py).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from pigeond.model import StoredMessage
from pigeond.storage.base import COLUMNS, RepositoryBase, reads, row_to_message

# Bounds on what one search may ask: its text, its words, the page.
MAX_QUERY_CHARS: Final = 256
MAX_QUERY_WORDS: Final = 16
DEFAULT_SEARCH_LIMIT: Final = 50
MAX_SEARCH_LIMIT: Final = 500

# The columns a session's id is looked for in (sent or received).
_SESSION_COLUMNS: Final = "{from_session to_session}"

_MESSAGE_COLUMNS: Final = ", ".join("m." + c.strip() for c in COLUMNS.split(","))

# Matches newest first, joined to their rows by the accept sequence; ``state`` and
# ``session`` (None: any) are checked on the row itself.  A sender finds its channel
# message once, not once more per member's copy; a member finds its own copy.
SEARCH_SQL: Final = (
    f"SELECT {_MESSAGE_COLUMNS} FROM swarm_search"
    " JOIN swarm_messages AS m ON m.accept_seq = swarm_search.rowid"
    " WHERE swarm_search MATCH :match"
    " AND (:state IS NULL OR m.state = :state)"
    " AND (:session IS NULL OR m.to_session = :session"
    " OR (m.from_session = :session AND m.channel_msg_id IS NULL))"
    " ORDER BY swarm_search.rowid DESC LIMIT :limit OFFSET :offset"
)


def postgres_search_sql(words: int) -> str:
    """The same search on PostgreSQL: its generated ``search_doc`` (schema version 13
    there) matched by every word as a phrase (``:w0`` ...), punctuation splitting words
    as it does in the document; newest first by accept order."""
    phrases = " && ".join(
        f"phraseto_tsquery('simple', regexp_replace(:w{i}, '[[:punct:]]', ' ', 'g'))"
        for i in range(words)
    )
    return (
        f"SELECT {COLUMNS} FROM swarm_messages AS m WHERE m.search_doc @@ ({phrases})"
        " AND (:state IS NULL OR m.state = :state)"
        " AND (:session IS NULL OR m.to_session = :session"
        " OR (m.from_session = :session AND m.channel_msg_id IS NULL))"
        " ORDER BY m.accept_seq DESC LIMIT :limit OFFSET :offset"
    )


@dataclass(frozen=True, slots=True)
class SearchPage:
    """What one ``GET /swarm/search`` answers: ``has_more`` when the count or the byte
    budget left out a match."""

    messages: list[StoredMessage]
    has_more: bool


def view_bytes(message: StoredMessage) -> int:
    """The message's inbox view as the API encodes it (UTF-8 JSON, escapes included)."""
    return len(json.dumps(message.inbox_view(), ensure_ascii=False).encode("utf-8"))


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
        terms.append(f"{_SESSION_COLUMNS} : {_phrase(session)}")
    return " AND ".join(terms)


class Search(RepositoryBase):
    @reads
    def search(
        self,
        text: str,
        *,
        session: str | None = None,
        state: str | None = None,
        limit: int = DEFAULT_SEARCH_LIMIT,
        offset: int = 0,
    ) -> list[StoredMessage]:
        """Messages with every word of ``text`` in their payload, kind, sender, target,
        channel or names, newest first: only those ``session`` sent or received when it is
        given, only in ``state`` when it is given.  Bad text is a SearchQueryError."""
        return list(self._matches(text, session, state, limit, offset))

    @reads
    def search_page(self, text: str, session: str | None, limit: int, max_bytes: int) -> SearchPage:
        """:meth:`search`, at most ``limit`` messages and ``max_bytes`` of their views
        (the first always comes, as an inbox page's does): rows are stepped one at a time,
        so a page of large payloads is never read whole."""
        messages: list[StoredMessage] = []
        used = 0
        for message in self._matches(text, session, None, limit + 1, 0):
            size = view_bytes(message)
            if len(messages) == limit or (messages and used + size > max_bytes):
                return SearchPage(messages, has_more=True)
            messages.append(message)
            used += size
        return SearchPage(messages, has_more=False)

    def _matches(
        self, text: str, session: str | None, state: str | None, limit: int, offset: int
    ) -> Iterator[StoredMessage]:
        if state is not None:
            check_searchable(state, "the state")
        params: dict[str, object] = {
            "state": state,
            "session": session,
            "limit": limit,
            "offset": offset,
        }
        if self.postgres:
            words = search_words(text)
            if session is not None:
                check_searchable(session, "the session")
            params |= {f"w{i}": word for i, word in enumerate(words)}
            sql = postgres_search_sql(len(words))
        else:
            params["match"] = match_expression(text, session)
            sql = SEARCH_SQL
        try:
            cursor = self._conn.execute(sql, params)
        except sqlite3.OperationalError as e:
            # Quoting leaves FTS5 nothing to parse; should it still refuse, say so as a
            # bad query rather than as the database failing.
            if "fts5" in str(e):
                raise SearchQueryError(f"the search text cannot be searched for ({e})") from e
            raise
        try:
            for row in cursor:
                yield row_to_message(row)
        finally:
            cursor.close()
