"""The checks an option's value must pass; each raises :class:`ConfigError` naming the
option, so a bad value is one line fit for the terminal whatever its source."""

from __future__ import annotations

import grp
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from pigeond.db_url import is_postgres_url, redacted

# A check gets the option's name (for its message) and the value.
Check = Callable[[str, Any], None]


class ConfigError(ValueError):
    """A setting is wrong; the text is one line fit for the terminal."""


def nonempty(name: str, value: Any) -> None:
    if value == "":
        raise ConfigError(f"{name} must not be empty")


# A daemon's name in the routing table: a host name's letters.
DAEMON_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def daemon_name(name: str, value: Any) -> None:
    """Empty (the host's name), or a name like a host's."""
    if value != "" and not DAEMON_NAME_RE.fullmatch(str(value)):
        raise ConfigError(f"{name} must match {DAEMON_NAME_RE.pattern}")


def database(name: str, value: Any) -> None:
    """A file path, or a ``postgresql://`` URL with a database name or a libpq service
    (shown redacted)."""
    nonempty(name, value)
    if "://" not in str(value):
        return
    if not is_postgres_url(value):
        raise ConfigError(f"{name} must be a file path or a postgresql:// URL")
    try:
        parts = urlsplit(str(value))
    except ValueError:
        raise ConfigError(f"{name} {redacted(str(value))} is not a valid URL") from None
    if not parts.path.strip("/") and not re.search(r"(?:^|&)(?:dbname|service)=", parts.query):
        raise ConfigError(
            f"{name} {redacted(str(value))} names no database (…/DBNAME, or ?service=NAME)"
        )


def between(low: float, high: float) -> Check:
    def check(name: str, value: Any) -> None:
        if not low <= value <= high:
            raise ConfigError(f"{name} must be between {low:g} and {high:g}, not {value}")

    return check


def one_of(allowed: tuple[str, ...]) -> Check:
    def check(name: str, value: Any) -> None:
        if value not in allowed:
            raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")

    return check


def http_url(name: str, value: Any) -> None:
    """An http(s) URL with a host and no query or fragment, or empty (delivery off).  No
    ``user:password@`` in it: the URL is logged and shown, a password never is."""
    if value == "":
        return
    parts = urlsplit(value)
    if "@" in parts.netloc:  # said without the URL, which would show the password
        raise ConfigError(
            f"{name} must not hold a user or password (user:password@): set the password"
            " in opencode_password_file, OPENCODE_SERVER_PASSWORD or OPENCODE_PASSWORD,"
            " and the user (when not opencode) in OPENCODE_SERVER_USERNAME"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an http:// or https:// URL or empty, not {value!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"{name} must not have a query or fragment")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as e:
        raise ConfigError(f"{name} has a bad port: {value!r}") from e


def uids(name: str, value: Any) -> None:
    for item in value:
        if not item.isascii() or not item.isdigit() or int(item) > 4_294_967_294:
            raise ConfigError(f"{name} must list numeric user ids, not {item!r}")


def words(name: str, value: Any) -> None:
    for item in value:
        if not item or any(c.isspace() or c == "," for c in item):
            raise ConfigError(f"{name} entries must be non-empty words, not {item!r}")


def group(name: str, value: Any) -> None:
    if value == "":
        return
    try:
        grp.getgrnam(value)
    except KeyError as e:
        raise ConfigError(f"{name}: there is no group named {value!r}") from e
