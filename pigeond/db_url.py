"""What ``db`` names: a SQLite file (the default), or a PostgreSQL database by libpq URL.

Shared by the configuration (which checks it and picks the token's default place), the
storage package (which opens it) and the CLIs (which print it): a URL is recognised one
way everywhere, and shown only through :func:`redacted`, so its password is never printed.
"""

from __future__ import annotations

import re
from os import PathLike
from typing import Final
from urllib.parse import unquote, urlsplit, urlunsplit

URL_RE: Final = re.compile(r"^postgres(?:ql)?://", re.IGNORECASE)
# A URL's password: after the user's name, up to the last "@" before the path, query or
# fragment; or a ``password=`` parameter.
_USERINFO_PASSWORD: Final = re.compile(r"^([^:/?#]+://[^:@/?#]*:)([^/?#]*)@")
_PASSWORD_PARAM: Final = re.compile(r"(?i)([?&]password=)([^&#]*)")


def is_postgres_url(target: object) -> bool:
    """Whether ``db`` names a PostgreSQL database (a libpq URL) rather than a file."""
    return isinstance(target, str) and URL_RE.match(target) is not None


def redacted(db: str | PathLike[str]) -> str:
    """``db`` as it may be shown: a URL's password (in its authority, or a ``password=``
    parameter) hidden; a file path as it is."""
    target = str(db)
    if not is_postgres_url(target):
        return target
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
