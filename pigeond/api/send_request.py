"""Turning a ``POST /swarm/send`` body into a :class:`NewMessage`, or a 400 that names the field."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pigeond.model import (
    CHANNEL_RE,
    DEFAULT_KIND,
    DEFAULT_PRIORITY,
    KINDS,
    MSG_ID_RE,
    NAME_MARK,
    NAME_RE,
    PRIORITIES,
    SENDER_RE,
    SESSION_ID_RE,
    STEER_PRIORITY,
    THREAD_RE,
    VIA_TERMINAL,
    NewMessage,
    is_reserved_sender,
)
from pigeond.owed_replies import REPLY_EXPECTED_KINDS

MAX_TTL_S = 30 * 24 * 3600


class InvalidRequest(ValueError):
    """The request is malformed; the message is safe to show to the client."""


@dataclass(frozen=True, slots=True)
class SendRequest:
    message: NewMessage
    ttl_s: int | None  # None: the daemon's default
    # whether the target owes a reply (the kind's default unless the send says), and
    # within how long of the hand-off (None: the daemon's ``reply_within_s``)
    expects_reply: bool = False
    reply_within_s: int | None = None
    # ``to: "@reviewer"``: the name, with message.to_session None until the route resolves
    # it (pigeond/api/names.py resolve_target)
    to_name: str | None = None
    # the thread the sender names (None: its reply_to's, else a new one; see api/threads.py)
    thread: str | None = None
    # ``"via": "terminal"``: sent from a person's shell, as pigeon-send says at a terminal
    # outside an agent (checked against the Unix peer: api/sender_claims.py)
    via_terminal: bool = False


def _reply_expectation(body: dict[str, Any], kind: str, direct: bool) -> tuple[bool, int | None]:
    """``expects_reply`` (default: the kind is one of REPLY_EXPECTED_KINDS, for a direct
    send) and ``reply_within_s``; a channel message owes nobody a reply."""
    asked = body.get("expects_reply")
    if asked is not None and not isinstance(asked, bool):
        raise InvalidRequest("field 'expects_reply' must be true or false")
    within = body.get("reply_within_s")
    if within is not None and (
        isinstance(within, bool) or not isinstance(within, int) or not 1 <= within <= MAX_TTL_S
    ):
        raise InvalidRequest(f"field 'reply_within_s' must be an integer from 1 to {MAX_TTL_S}")
    if not direct:
        if asked or within is not None:
            raise InvalidRequest("fields 'expects_reply' and 'reply_within_s' need field 'to'")
        return False, None
    expects = asked if asked is not None else (within is not None or kind in REPLY_EXPECTED_KINDS)
    return expects, within


def _steer(body: dict[str, Any], priority: str) -> bool:
    """``steer`` (default false): the sender asks that the message go into the target's
    running turn; only an urgent message may ask."""
    asked = body.get("steer")
    if asked is None:
        return False
    if not isinstance(asked, bool):
        raise InvalidRequest("field 'steer' must be true or false")
    if asked and priority != STEER_PRIORITY:
        raise InvalidRequest(f"field 'steer' needs field 'priority' to be {STEER_PRIORITY!r}")
    return asked


def _optional_ttl(body: dict[str, Any]) -> int | None:
    value = body.get("ttl_s")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TTL_S:
        raise InvalidRequest(f"field 'ttl_s' must be an integer from 1 to {MAX_TTL_S}")
    return value


class OversizedNumber:
    """Stands for a JSON integer with more digits than any field takes: ``int()`` of more
    than 4300 digits raises ValueError, and converting fewer still costs time for nothing.
    It is no ``int``, so the field holding it is refused by name ("field 'ttl_s' must be
    an integer from 1 to ...")."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


# more than any field's range needs, far fewer than int()'s limit
MAX_INTEGER_DIGITS = 64


def _parse_int(text: str) -> int | OversizedNumber:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        return OversizedNumber(len(text))
    return int(text)


# One decoder for every body: json.loads with an argument builds a new one each call.
BODY_JSON = json.JSONDecoder(parse_int=_parse_int)


def decode_json_object(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
        if text.startswith("\ufeff"):  # as json.loads says it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        body = BODY_JSON.decode(text)
    except UnicodeDecodeError as e:
        raise InvalidRequest("body is not valid UTF-8") from e
    except (json.JSONDecodeError, RecursionError) as e:
        raise InvalidRequest(f"body is not valid JSON: {e}") from e
    except ValueError as e:  # json itself converting a number; not expected, never a 500
        raise InvalidRequest(f"body is not acceptable JSON: {e}") from e
    if not isinstance(body, dict):
        raise InvalidRequest("body must be a JSON object")
    return body


def _optional_string(body: dict[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"field '{field}' must be a string")
    return value


def _required_string(body: dict[str, Any], field: str) -> str:
    value = _optional_string(body, field)
    if value is None or value == "":
        raise InvalidRequest(f"field '{field}' is required and must be a non-empty string")
    return value


def _check(value: str | None, field: str, pattern: re.Pattern[str]) -> None:
    if value is not None and not pattern.fullmatch(value):
        raise InvalidRequest(f"field '{field}' must match {pattern.pattern}")


def check_name(name: str, field: str) -> None:
    """Refuse, naming ``field``, a name no session may hold."""
    if not NAME_RE.fullmatch(name):
        raise InvalidRequest(f"field '{field}' must be a name matching {NAME_RE.pattern}")
    if is_reserved_sender(name):
        raise InvalidRequest(f"field '{field}' must not be {name!r}: that name is pigeond's own")


def _target(to: str | None) -> tuple[str | None, str | None]:
    """Field 'to' as (session, name): a session id, or ``@name`` (resolved at accept)."""
    if to is None or not to.startswith(NAME_MARK):
        _check(to, "to", SESSION_ID_RE)
        return to, None
    name = to[len(NAME_MARK) :]
    if not NAME_RE.fullmatch(name):
        raise InvalidRequest(
            f"field 'to' must be a session id matching {SESSION_ID_RE.pattern}"
            f" or @name with a name matching {NAME_RE.pattern}"
        )
    check_name(name, "to")
    return None, name


def _one_of(value: str | None, field: str, allowed: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if value not in allowed:
        raise InvalidRequest(f"field '{field}' must be one of: {', '.join(allowed)}")
    return value


def _no_surrogates(value: str, field: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidRequest(f"field '{field}' holds an unpaired surrogate") from e


def parse_send_body(raw: bytes, make_msg_id: Callable[[], str]) -> SendRequest:
    """Validate a send request and apply the defaults; unknown fields are ignored."""
    body = decode_json_object(raw)
    from_session = _required_string(body, "from")
    payload = _required_string(body, "payload")
    to_session = _optional_string(body, "to")
    channel = _optional_string(body, "channel")
    kind = _optional_string(body, "kind")
    priority = _optional_string(body, "priority")
    reply_to = _optional_string(body, "reply_to")
    msg_id = _optional_string(body, "msg_id")
    thread = _optional_string(body, "thread")

    if (to_session is None) == (channel is None):
        raise InvalidRequest("exactly one of fields 'to' and 'channel' is required")
    to_session, to_name = _target(to_session)
    _check(channel, "channel", CHANNEL_RE)
    _check(from_session, "from", SENDER_RE)
    if is_reserved_sender(from_session):
        raise InvalidRequest(
            f"field 'from' must not be {from_session!r}:"
            " that name is pigeond's own, for its notices"
        )
    _check(msg_id, "msg_id", MSG_ID_RE)
    _check(reply_to, "reply_to", MSG_ID_RE)
    _check(thread, "thread", THREAD_RE)
    _no_surrogates(payload, "payload")
    ttl_s = _optional_ttl(body)
    rank = _one_of(priority, "priority", PRIORITIES, DEFAULT_PRIORITY)
    message = NewMessage(
        msg_id=msg_id if msg_id is not None else make_msg_id(),
        from_session=from_session,
        to_session=to_session,
        channel=channel,
        kind=_one_of(kind, "kind", KINDS, DEFAULT_KIND),
        priority=rank,
        reply_to=reply_to,
        payload=payload,
        steer=_steer(body, rank),
    )
    direct = channel is None
    expects_reply, reply_within_s = _reply_expectation(body, message.kind, direct)
    via = _optional_string(body, "via")
    if via is not None and via != VIA_TERMINAL:
        raise InvalidRequest(f"field 'via' must be {VIA_TERMINAL!r} when given")
    return SendRequest(
        message, ttl_s, expects_reply, reply_within_s, to_name, thread, via == VIA_TERMINAL
    )
