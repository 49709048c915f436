"""A verifier on the injected clock over an in-memory opencode transcript, for the tests of
what its looks record (answers: tests/test_receipts.py; turn costs: tests/test_turn_costs.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.delivery.turns import TurnCount
from pigeond.delivery.verifier import Verifier
from pigeond.envelope import render_envelope
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message, user_entry
from tests.http_helpers import result_of
from tests.transcript_sources import opencode_transcripts

GRACE_MS = 60_000


@dataclass
class Transcripts:
    """opencode's ``GET /session/<id>/message``: what each session holds, and every read."""

    entries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    reads: list[tuple[str, int | None]] = field(default_factory=list)

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        self.reads.append((session_id, limit))
        held = self.entries.get(session_id, [])
        return held if limit is None else held[-limit:]


@dataclass
class Rig:
    repo: SwarmRepository
    clock: Clock
    transcripts: Transcripts
    verifier: Verifier
    # what the turn tracker says per target (None: the event stream is down)
    turns: dict[str, TurnCount | None]

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def hand_off(self, *msg_ids: str, to: str = "ses_target") -> list[str]:
        """Hand ``msg_ids`` off in one prompt; returns their envelopes."""
        for msg_id in msg_ids:
            self.repo.accept(new_message(to, msg_id=msg_id), self.now_ms())
        self.repo.mark_handed_off_many(msg_ids, self.now_ms(), self.now_ms() + GRACE_MS)
        return [render_envelope(m) for m in map(self.repo.get, msg_ids) if m is not None]

    def prompt(self, user_id: str, *msg_ids: str, to: str = "ses_target") -> None:
        """The hand-off of ``msg_ids`` lands in the transcript as user message ``user_id``."""
        self.transcripts.entries.setdefault(to, []).append(
            user_entry(user_id, *self.hand_off(*msg_ids, to=to))
        )

    def reply(self, *entries: dict[str, Any], to: str = "ses_target") -> None:
        self.transcripts.entries.setdefault(to, []).extend(entries)

    def check(self, target: str = "ses_target") -> None:
        result_of(Deferred.fromCoroutine(self.verifier.check(target)))

    def receipt(self, msg_id: str) -> tuple[str, int | None, str | None]:
        stored = self.repo.get(msg_id)
        assert stored is not None
        return stored.receipt(), stored.answered_at, stored.answer_message_id


def verifier_rig(repo: SwarmRepository, clock: Clock, turn_timeout_s: float) -> Rig:
    """A verifier looking every 2 s, requeueing at most 3 times, over an empty transcript."""
    transcripts = Transcripts()
    turns: dict[str, TurnCount | None] = {}
    verifier = Verifier(
        InlineDatabase(repo), opencode_transcripts(transcripts), clock,
        Config(verify_interval_s=2, max_requeues=3, turn_timeout_s=turn_timeout_s),
        turns_ended=lambda target: turns.get(target),
    )  # fmt: skip
    return Rig(repo, clock, transcripts, verifier, turns)
