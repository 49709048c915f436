"""The ``<swarm_message>`` wrapper that lets an agent tell swarm traffic from its user.

Attribute values escape ``& " < >`` and the payload escapes ``& < >``, so no
payload can close the envelope early or forge a second one: after escaping,
the only ``<`` characters in the text are the envelope's own tags.
"""

from __future__ import annotations

from pigeond.model import StoredMessage

ENVELOPE_VERSION = "1"


def escape_attribute(value: str) -> str:
    return (
        value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
    )


def escape_text(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def opening_tag(message: StoredMessage) -> str:
    attributes: list[tuple[str, str]] = [
        ("v", ENVELOPE_VERSION),
        ("kind", message.kind),
        ("from", message.from_session),
    ]
    if message.channel is not None:
        attributes.append(("channel", message.channel))
    else:
        attributes.append(("to", message.to_session or ""))
    attributes += [("msg_id", message.msg_id), ("priority", message.priority)]
    if message.reply_to is not None:
        attributes.append(("reply_to", message.reply_to))
    rendered = " ".join(f'{name}="{escape_attribute(value)}"' for name, value in attributes)
    return f"<swarm_message {rendered}>"


def render_envelope(message: StoredMessage) -> str:
    """The exact text the target session receives as its prompt."""
    return f"{opening_tag(message)}\n{escape_text(message.payload)}\n</swarm_message>"
