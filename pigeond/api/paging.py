"""The query parameters of a paged read (``GET /swarm/inbox``, ``GET /swarm/channel/<c>``):
``limit`` and the ``cur_N`` cursor, checked alike wherever a page is read."""

from __future__ import annotations

import re

from pigeond.api.web import HttpError

DEFAULT_INBOX_LIMIT = 100
MAX_INBOX_LIMIT = 1000
CURSOR_RE = re.compile(r"^cur_([0-9]{1,18})$")


def encode_cursor(seq: int) -> str:
    return f"cur_{seq}"


def cursor_number(since: str) -> int | None:
    """The N of a ``cur_N`` cursor; None for anything else."""
    match = CURSOR_RE.fullmatch(since)
    return None if match is None else int(match.group(1))


def page_limit(raw: str | None) -> int:
    """Query parameter ``limit``: 1 to :data:`MAX_INBOX_LIMIT`, :data:`DEFAULT_INBOX_LIMIT`
    when absent; anything else is a 400."""
    if raw is None:
        return DEFAULT_INBOX_LIMIT
    # digits counted before int(): it refuses more than 4300 of them with a ValueError
    digits = raw.lstrip("0")
    if (
        raw.isascii()
        and raw.isdigit()
        and len(digits) <= len(str(MAX_INBOX_LIMIT))
        and 1 <= int(raw) <= MAX_INBOX_LIMIT
    ):
        return int(raw)
    raise HttpError(400, f"query parameter 'limit' must be an integer from 1 to {MAX_INBOX_LIMIT}")
