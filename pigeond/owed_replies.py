"""Owed replies: which kinds of message expect an answer, the states of what a debtor owes
a creditor, and an obligation as the views show it.

Apart from :mod:`pigeond.model` (the messages themselves) because only the reply
ledger reads it: the send route (which kinds expect a reply), its storage
(pigeond/storage/obligations.py), ``pigeon owed`` and the TUI's owed view.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

# Kinds that expect a reply unless the send says otherwise (the seed's two questions).
REPLY_EXPECTED_KINDS: Final = ("task.assign", "clarification.request")


class Owed(StrEnum):
    """An obligation's state: ``open`` until reminded, ``overdue`` once the creditor was
    told; ``met`` by the debtor's reply, ``cancelled`` when the original failed, expired
    or was cancelled (nobody can answer what never arrived)."""

    OPEN = "open"
    REMINDED = "reminded"
    OVERDUE = "overdue"
    MET = "met"
    CANCELLED = "cancelled"


# Still owed: what ``GET /swarm/owed``, ``pigeon owed`` and the TUI list.
OUTSTANDING: Final = (Owed.OPEN, Owed.REMINDED, Owed.OVERDUE)


@dataclass(frozen=True, slots=True)
class Obligation:
    """A reply ``debtor`` owes ``creditor`` for message ``msg_id``, with what of that
    message the views quote (its kind, first line and hand-off time)."""

    msg_id: str
    debtor: str
    creditor: str
    within_ms: int
    state: str
    created_at: int
    updated_at: int
    reminded_at: int | None
    overdue_at: int | None
    met_at: int | None
    met_by: str | None
    kind: str
    first_line: str
    handed_off_at: int | None

    @property
    def due_at(self) -> int | None:
        """When the next step falls due: the reminder ``within_ms`` after the hand-off,
        the creditor's notice ``within_ms`` after the reminder; None when none is due
        (not handed off yet, or past both steps)."""
        if self.state == Owed.OPEN and self.handed_off_at is not None:
            return self.handed_off_at + self.within_ms
        if self.state == Owed.REMINDED and self.reminded_at is not None:
            return self.reminded_at + self.within_ms
        return None

    def view(self) -> dict[str, object]:
        """The fields ``GET /swarm/owed`` shows for one obligation."""
        return {
            "msg_id": self.msg_id,
            "debtor": self.debtor,
            "creditor": self.creditor,
            "kind": self.kind,
            "first_line": self.first_line,
            "state": self.state,
            "reply_within_s": self.within_ms / 1000,
            "created_at": self.created_at,
            "handed_off_at": self.handed_off_at,
            "due_at": self.due_at,
            "reminded_at": self.reminded_at,
            "overdue_at": self.overdue_at,
            "met_at": self.met_at,
            "met_by": self.met_by,
        }
