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
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

from pigeond.model import StoredMessage
from pigeond.storage.base import RepositoryBase, reads, row_to_message
from pigeond.storage.engines.sqlite import SEARCH_SQL
from pigeond.storage.search_text import (
    DEFAULT_SEARCH_LIMIT,
    MAX_QUERY_CHARS,
    MAX_QUERY_WORDS,
    MAX_SEARCH_LIMIT,
    SearchQueryError,
    check_searchable,
    match_expression,
    search_words,
)

__all__ = [
    "DEFAULT_SEARCH_LIMIT",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_WORDS",
    "MAX_SEARCH_LIMIT",
    "SEARCH_SQL",
    "Search",
    "SearchPage",
    "SearchQueryError",
    "match_expression",
    "search_words",
]


@dataclass(frozen=True, slots=True)
class SearchPage:
    """What one ``GET /swarm/search`` answers: ``has_more`` when the count or the byte
    budget left out a match."""

    messages: list[StoredMessage]
    has_more: bool


def view_bytes(message: StoredMessage) -> int:
    """The message's inbox view as the API encodes it (UTF-8 JSON, escapes included)."""
    return len(json.dumps(message.inbox_view(), ensure_ascii=False).encode("utf-8"))


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
        sql, matching = self.engine.search(text, session)
        params = {**matching, "state": state, "limit": limit, "offset": offset}
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
