"""Each session's consent: its inbound policy, declared once.

A session's policy is ``accept`` (the default: every message goes through), ``hold``
(messages are stored and wait, expiring as usual, until the session or an operator
releases them) or ``refuse`` (senders get 403 at send, naming the policy).  An
allow-list names senders that always get through, whatever the policy.  The allow-list
holds strings matched exactly against a message's sender (``from``: session ids and
other senders), or a name with its ``@`` (``@reviewer``), matched against the name the
sender holds when its message is accepted (the message's ``from_name``).  Only a policy
that would hold or refuse, and lists a name, needs the sender's name: a send to anyone
else reads nothing more than before.

``steer`` (off unless the session turns it on) says whether an urgent message whose
sender asks to steer may go into the session's running turn (opencode 2.x ``steer``)
rather than after it: it decides how a message goes, never whether.

:data:`POLICIES` is the one list of the policies: validation, the CLI's choices, the
OpenAPI enum and the schema's CHECK (migration 12, held to it by a test) all follow it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Policy(StrEnum):
    ACCEPT = "accept"
    HOLD = "hold"
    REFUSE = "refuse"


POLICIES: Final = tuple(p.value for p in Policy)
DEFAULT_POLICY: Final = Policy.ACCEPT
# One allow-list entry: a sender as ``from`` is written (session ids and other senders),
# or a name with its ``@``.
ALLOW_ENTRY_RE: Final = re.compile(r"^@?[A-Za-z0-9_.-]{1,128}$")
MAX_ALLOW: Final = 64


class Verdict(StrEnum):
    """What a session's policy does with one message from one sender."""

    DELIVER = "deliver"
    HOLD = "hold"
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True)
class InboundPolicy:
    """One session's policy as stored (``swarm_policies``); ``updated_by`` says who set it
    (the session itself, ``operator``, or an HTTP client); ``steer``: whether an urgent
    message asked to steer may go into its running turn."""

    session: str
    policy: Policy
    allow: tuple[str, ...] = ()
    updated_at: int = 0
    updated_by: str | None = None
    steer: bool = False

    @property
    def is_default(self) -> bool:
        """Whether it says no more than a session that set none (no row needed)."""
        return self.policy is DEFAULT_POLICY and not self.allow and not self.steer

    def verdict(self, sender: str, sender_name: str | None = None, proven: bool = True) -> Verdict:
        """Whether a message from ``sender`` (holding the name ``sender_name``, if any) is
        delivered, held or refused under this policy.  The allow-list admits only a sender
        whose proof may admit it (``proven``: verified, or pending until it settles): an
        unverified sender named on it is treated as not on it."""
        if self.policy is Policy.ACCEPT or (proven and self.allows(sender, sender_name)):
            return Verdict.DELIVER
        return Verdict.HOLD if self.policy is Policy.HOLD else Verdict.REFUSE

    def allows(self, sender: str, sender_name: str | None = None) -> bool:
        return sender in self.allow or (
            sender_name is not None and f"@{sender_name.lstrip('@')}" in self.allow
        )

    @property
    def allows_names(self) -> bool:
        """Whether the allow-list names anyone by name (``@reviewer``): only then does a
        verdict need the sender's name, which costs the send path a read."""
        return any(entry.startswith("@") for entry in self.allow)

    def view(self) -> dict[str, object]:
        return {
            "session": self.session,
            "policy": self.policy.value,
            "allow": list(self.allow),
            "steer": self.steer,
            "updated_at": self.updated_at,
            "updated_by": self.updated_by,
        }


def parse_policy(raw: object) -> Policy:
    """``raw`` as a policy; ValueError naming the choices otherwise."""
    if isinstance(raw, str) and raw in POLICIES:
        return Policy(raw)
    raise ValueError(f"policy must be one of {', '.join(POLICIES)}")


def parse_allow(raw: object) -> tuple[str, ...]:
    """An allow-list: a list of at most :data:`MAX_ALLOW` senders, each like a ``from``
    (or an ``@name``); duplicates dropped, order kept.  ValueError says what is wrong."""
    if not isinstance(raw, list):
        raise ValueError("allow must be a list of senders")
    if len(raw) > MAX_ALLOW:
        raise ValueError(f"allow holds at most {MAX_ALLOW} senders")
    for entry in raw:
        if not isinstance(entry, str) or not ALLOW_ENTRY_RE.fullmatch(entry):
            raise ValueError(f"each allow entry must match {ALLOW_ENTRY_RE.pattern}")
    return tuple(dict.fromkeys(raw))


def parse_steer(raw: object) -> bool:
    """Whether steering is allowed: ``true`` or ``false``; ValueError otherwise."""
    if isinstance(raw, bool):
        return raw
    raise ValueError("steer must be true or false")


def held_reason(session: str, policy: Policy, unverified: str | None = None) -> str:
    """``last_error`` of a held message: why it waits (``unverified``: the sender named on
    the allow-list whose proof did not admit it)."""
    why = "" if unverified is None else f"; sender {unverified} not verified"
    return f"held: {session}'s inbound policy is {policy.value}{why}; waits until released"
