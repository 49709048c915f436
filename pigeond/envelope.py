"""The ``<swarm_message>`` wrapper that lets an agent tell swarm traffic from its user.

``from_verified`` says who really sent it: ``verified`` (the call that made it is in the
sender's own transcript), ``person`` (a person's shell) or ``unverified`` (``from`` is only
what the request claimed).

Attribute values escape ``& " < >`` and the payload escapes ``& < >``, so no
payload can close the envelope early or forge a second one: after escaping,
the only ``<`` characters in the text are the envelope's own tags.

A model reads brackets by their looks, not their code points: every character
whose NFKC form is ``<`` or ``>`` (fullwidth U+FF1C/U+FF1E, small
U+FE64/U+FE65), and the common look-alikes Unicode's confusables list gives for
them (U+2039, U+3008, U+27E8, U+02C2, U+1438, U+276E ... and their right-hand
twins), is escaped as ``&lt;`` or ``&gt;`` too.
"""

from __future__ import annotations

from pigeond.model import StoredMessage

ENVELOPE_VERSION = "1"

# Characters other than "<" and ">" whose NFKC form is that bracket (checked
# against unicodedata by the tests), then look-alikes that NFKC keeps apart.
NFKC_LESS_THAN = "\ufe64\uff1c"
NFKC_GREATER_THAN = "\ufe65\uff1e"
LOOKALIKE_LESS_THAN = "\u02c2\u1438\u2039\u2329\u276c\u276e\u2770\u27e8\u3008"
LOOKALIKE_GREATER_THAN = "\u02c3\u1433\u203a\u232a\u276d\u276f\u2771\u27e9\u3009"

_TEXT_ESCAPES = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;"}
_TEXT_ESCAPES |= {ord(c): "&lt;" for c in NFKC_LESS_THAN + LOOKALIKE_LESS_THAN}
_TEXT_ESCAPES |= {ord(c): "&gt;" for c in NFKC_GREATER_THAN + LOOKALIKE_GREATER_THAN}
_ATTRIBUTE_ESCAPES = _TEXT_ESCAPES | {ord('"'): "&quot;"}


def escape_attribute(value: str) -> str:
    return value.translate(_ATTRIBUTE_ESCAPES)


def escape_text(value: str) -> str:
    return value.translate(_TEXT_ESCAPES)


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
