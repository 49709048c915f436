"""The sender-proof job, wired (pigeond/delivery/sender_proof.py): its reader of the
members' transcripts, its timer, and the kicks after an accept and after a settle.

The job runs whether delivery runs or not: a pending message must settle either way (a
daemon with delivery off hands nothing off, but shows the proof).  Without a reader of
transcripts (:class:`NoTranscripts`) every pending proof settles ``unverified`` at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from twisted.internet.interfaces import IReactorTime

from pigeond.config import Config
from pigeond.delivery.routing import Routing
from pigeond.delivery.sender_proof import SenderProofJob
from pigeond.service.quiet import QuietGate, unless_quiet
from pigeond.service.ticker import Ticker
from pigeond.storage.database import Database
from pigeond.tool_calls import ToolCall, ToolCallReader


class NoTranscripts:
    """A reader with no transcript of anyone: what a daemon has until one is wired."""

    async def recent_calls(self, member: str) -> Sequence[ToolCall] | None:
        return None


def sender_proof_job(
    db: Database,
    reactor: IReactorTime,
    config: Config,
    ticker: Ticker,
    gate: QuietGate,
    reader: ToolCallReader | None,
    kick: Callable[[str], None],
    routing: Routing | None = None,
) -> SenderProofJob:
    """The job, on ``ticker`` (skipped while ``gate`` is quiet); ``kick`` is the arbiter's,
    for the targets a settled proof made due; ``routing`` (a shared PostgreSQL) leaves each
    sender to the daemon whose opencode has it."""
    mine = None if routing is None else routing.mine
    job = SenderProofJob(db, reader or NoTranscripts(), reactor, config, on_settled=kick, mine=mine)
    ticker.add("sender-proof", unless_quiet(gate, job.tick))
    return job


def accepted_then(kick: Callable[[str], None], job: SenderProofJob) -> Callable[[str], None]:
    """The send path's ``on_accepted``: the arbiter's kick, then the sender-proof job's."""

    def accepted(target: str) -> None:
        kick(target)
        job.kick()

    return accepted
