"""What ``db`` names: a SQLite file (the default), or a PostgreSQL database by libpq URL.

Shared by the configuration (which checks it and picks the token's default place), the
storage package (which opens it) and the CLIs (which print it): a URL is recognised one
way everywhere, and shown only through :func:`redacted`, so its password is never printed.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit, urlunsplit

URL_RE: Final = re.compile(r"^postgres(?:ql)?://", re.IGNORECASE)


def is_postgres_url(target: object) -> bool:
    """Whether ``db`` names a PostgreSQL database (a libpq URL) rather than a file."""
    return isinstance(target, str) and URL_RE.match(target) is not None


def redacted(target: str) -> str:
    """``target`` as it may be shown: a URL's password (in its authority, or a
    ``password=`` parameter) hidden; a file path as it is."""
    if not is_postgres_url(target):
        return target
    try:
        parts = urlsplit(target)
    except ValueError:  # not a URL Python can split (a bad [host]): hide what may be one
        hidden = re.sub(r"(://[^:/@]*:)[^/]*@", r"\1***@", target)
        return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", hidden)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = re.sub(r"(?i)(password=)[^&]*", r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
