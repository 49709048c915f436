"""The ``<swarm_message>`` wrapper that lets an agent tell swarm traffic from its user.

``from_verified`` says who really sent it: ``verified`` (the call that made it is in the
sender's own transcript), ``person`` (a person's shell) or ``unverified`` (``from`` is only
what the request claimed).

Attribute values escape ``& " < >`` and the payload escapes ``& < >``, so no
payload can close the envelope early or forge a second one: after escaping,
the only ``<`` characters in the text are the envelope's own tags.

A model reads brackets by their looks, not their code points: every character
that reads as an angle bracket, by Unicode's own data (the rule and its reasons:
:mod:`pigeond.angles`; its table: :mod:`pigeond.angle_table`), is escaped too:
``&lt;`` or ``&gt;`` when its NFKC form is that bracket (fullwidth U+FF1C/U+FF1E,
small U+FE64/U+FE65), else its numeric character reference (U+00AB is ``&#xAB;``),
which keeps what it means and drops how it looks.
"""

from __future__ import annotations

from pigeond.angle_table import GREATER_THAN, LESS_THAN, LOOKALIKES
from pigeond.model import StoredMessage

ENVELOPE_VERSION = "1"

_TEXT_ESCAPES = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;"}
_TEXT_ESCAPES |= {ord(c): "&lt;" for c in LESS_THAN}
_TEXT_ESCAPES |= {ord(c): "&gt;" for c in GREATER_THAN}
_TEXT_ESCAPES |= {ord(c): f"&#x{ord(c):X};" for c in LOOKALIKES}
_ATTRIBUTE_ESCAPES = _TEXT_ESCAPES | {ord('"'): "&quot;"}


# Every lookalike escaped is outside ASCII: an ASCII value without ``& < >`` (and ``"``, in
# an attribute) has nothing to escape.  Most values are (ids, kinds, names, many
# payloads), and str.translate with a mapping looks each character up in it, at several
# times the cost of these checks; every envelope is rendered when its batch is cut.


def _plain(value: str) -> bool:
    return value.isascii() and "&" not in value and "<" not in value and ">" not in value


def escape_attribute(value: str) -> str:
    if _plain(value) and '"' not in value:
        return value
    return value.translate(_ATTRIBUTE_ESCAPES)


def escape_text(value: str) -> str:
    return value if _plain(value) else value.translate(_TEXT_ESCAPES)


def opening_tag(message: StoredMessage) -> str:
    attributes: list[tuple[str, str]] = [
        ("v", ENVELOPE_VERSION),
        ("kind", message.kind),
        ("from", message.from_session),
    ]
    # a channel member's copy carries both: the channel, and which member it is for
    if message.channel is not None:
        attributes.append(("channel", message.channel))
    if message.to_session is not None or message.channel is None:
        attributes.append(("to", message.to_session or ""))
    attributes += [("msg_id", message.msg_id), ("priority", message.priority)]
    if message.reply_to is not None:
        attributes.append(("reply_to", message.reply_to))
    # the names held at accept (storage/names.py), after the seed's attributes
    if message.from_name is not None:
        attributes.append(("from_name", message.from_name))
    if message.to_name is not None:
        attributes.append(("to_name", message.to_name))
    # who really sent it (model.SenderProof): "verified" only when the call that made it was
    # found in the sender's own transcript; "from" alone is what the sender claimed
    attributes.append(("from_verified", message.from_proof))
    rendered = " ".join(f'{name}="{escape_attribute(value)}"' for name, value in attributes)
    return f"<swarm_message {rendered}>"


def render_envelope(message: StoredMessage) -> str:
    """The exact text the target session receives as its prompt."""
    return f"{opening_tag(message)}\n{escape_text(message.payload)}\n</swarm_message>"
