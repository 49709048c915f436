"""What one look at a target's transcript showed, written in one transaction.

The verifier reads a target's transcript and finds there the hand-offs now seen, the
turns that consumed seen messages and ended, and the answers those turns gave.  Written
as three transactions, that was three trips to the writer and three commits, each an
fsync, for every look: under load most of the writer's commits.  Written here, it is one,
all or nothing (a look that cannot be written is looked at again).  The order inside is
the receipt chain's: seen, then the turn (recorded before its answer stops the looks),
then the answer; each step changes only the rows its own conditions still allow, so a
message the look took as seen but that changed meanwhile is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pigeond.costs import EndedTurn
from pigeond.storage.costs import Costs
from pigeond.storage.delivery import DeliveryTransitions
from pigeond.storage.receipts import Receipts
from pigeond.storage.write_marks import shares_commit


@dataclass(frozen=True, slots=True)
class LookRecorded:
    """What a look changed: the msg_ids seen now, the turns that linked a msg_id now, and
    the msg_ids answered now."""

    verified: list[str]
    turns: list[EndedTurn]
    answered: list[str]


class TranscriptLooks(DeliveryTransitions, Receipts, Costs):
    @shares_commit
    def record_look(
        self,
        target: str,
        seen: Sequence[str],
        turns: Sequence[EndedTurn],
        answers: Mapping[str, str],
        now_ms: int,
    ) -> LookRecorded:
        """``seen`` hand-offs to ``target`` marked seen (:meth:`mark_verified`), its ended
        ``turns`` recorded (:meth:`record_turns`) and ``answers`` marked
        (:meth:`mark_answered`), in one transaction."""
        with self._write() as conn:
            verified = self._verify(conn, seen, now_ms)
            recorded = [turn for turn in turns if self._record_turn(conn, target, turn, now_ms)]
            answered = self._answer(conn, answers, now_ms)
        return LookRecorded(verified, recorded, answered)
