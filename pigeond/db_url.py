"""What ``db`` names: a SQLite file (the default), or a PostgreSQL database by libpq URL.

Shared by the configuration (which checks it and picks the token's default place), the
storage package (which opens it) and the CLIs (which print it): a URL is recognised one
way everywhere, and shown only through :func:`redacted`, so its password is never printed.

A password is never taken from a command line, which every local user may read in
``/proc/<pid>/cmdline`` (:func:`password_on_command_line`): it comes from libpq's own
password file (``~/.pgpass``, ``PGPASSFILE``), its service file (``service=``), or the
file ``db_password_file`` names, added to the URL only in memory (:func:`with_password`).
"""

from __future__ import annotations

import re
from os import PathLike
from typing import Final
from urllib.parse import quote, unquote, urlsplit, urlunsplit

URL_RE: Final = re.compile(r"^postgres(?:ql)?://", re.IGNORECASE)
# A URL's password: after the user's name, up to the last "@" before the path, query or
# fragment; or a ``password=`` parameter.
_USERINFO_PASSWORD: Final = re.compile(r"^([^:/?#]+://[^:@/?#]*:)([^/?#]*)@")
_PASSWORD_PARAM: Final = re.compile(r"(?i)([?&]password=)([^&#]*)")
# A libpq keyword/value string's password (``host=h password=secret``).
_PASSWORD_KEYWORD: Final = re.compile(r"(?i)(?:^|\s)password\s*=")
# Where a password belongs instead, for the refusal's one line.
PASSWORD_PLACES: Final = (
    "put it in a file only you can read and name it with db_password_file"
    " (--db-password-file, PIGEOND_DB_PASSWORD_FILE), or in libpq's ~/.pgpass (PGPASSFILE),"
    " or use a libpq service file (postgresql:///?service=NAME, PGSERVICEFILE)"
)


class PasswordOnCommandLine(ValueError):
    """A ``--db`` with a password in it; the text is one line saying where it goes."""


def is_postgres_url(target: object) -> bool:
    """Whether ``db`` names a PostgreSQL database (a libpq URL) rather than a file."""
    return isinstance(target, str) and URL_RE.match(target) is not None


def redacted(db: str | PathLike[str]) -> str:
    """``db`` as it may be shown: a URL's password (in its authority, or a ``password=``
    parameter) hidden; a file path as it is."""
    target = str(db)
    if not is_postgres_url(target) or not has_password(target):
        return target  # as written (urlunsplit would drop an empty host's "//")
    try:
        parts = urlsplit(target)
    except ValueError:  # not a URL Python can split (a bad [host]): hide what may be one
        hidden = _USERINFO_PASSWORD.sub(r"\1***@", target, count=1)
        return _PASSWORD_PARAM.sub(r"\1***", hidden)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = re.sub(r"(?i)(password=)[^&]*", r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def without_password(text: str, db: str | PathLike[str]) -> str:
    """``text`` with ``db``'s password taken out: a copy of the whole URL (libpq quotes a
    URL it cannot parse) as :func:`redacted` shows it, then any other copy of the
    password, as written or percent-decoded, as ``***``."""
    url = str(db)
    if not is_postgres_url(url):
        return text
    text = text.replace(url, redacted(url))
    found = [value for _, value in _PASSWORD_PARAM.findall(url)]
    userinfo = _USERINFO_PASSWORD.match(url)
    if userinfo is not None:
        found.append(userinfo.group(2))
    secrets = {form for secret in found for form in (secret, unquote(secret)) if form}
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def error_line(error: BaseException, db: str | PathLike[str]) -> str:
    """A driver's error on one line (libpq writes hints on lines of their own), with no
    copy of ``db``'s password in it."""
    return without_password(" ".join(str(error).split()), db)


def has_password(db: str | PathLike[str]) -> bool:
    """Whether ``db`` carries a password in any form libpq reads: a URL's
    ``user:password@``, a ``password=`` parameter, or a keyword string's ``password=``."""
    target = str(db)
    if not is_postgres_url(target):
        return _PASSWORD_KEYWORD.search(target) is not None
    userinfo = _USERINFO_PASSWORD.match(target)
    if userinfo is not None and userinfo.group(2):
        return True
    return any(value for _, value in _PASSWORD_PARAM.findall(target))


def password_on_command_line(db: str | None, flag: str = "--db") -> None:
    """:class:`PasswordOnCommandLine` when ``db``, given as ``flag`` on a command line,
    carries a password: any local user can read a command line."""
    if db is not None and has_password(db):
        raise PasswordOnCommandLine(
            f"{flag} must not carry a password (every local user can read a command line"
            f" in /proc): {PASSWORD_PLACES}"
        )


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` as its ``password=`` parameter (percent-encoded), for
    the connection only: never shown (see :func:`redacted`), never on a command line."""
    parts = urlsplit(url)
    param = "password=" + quote(password, safe="")
    query = f"{parts.query}&{param}" if parts.query else param
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))
