"""The hop brake: a thread whose agents sent ``max_hops_per_thread`` messages in a row
without a person holds the next one for a person.

The count is the thread's ``hops`` (pigeond/storage/threads.py: sends from sessions since
the thread's last reset; a send from a person's shell resets it).  A person's own prompt
in a session of the thread resets it too, but transcripts are read only when they could
change the verdict: when the count has reached the limit, the sessions of the thread are
asked (:class:`~pigeond.brakes.base.PersonPrompts`) for their newest prompt of a person,
and one newer than the thread's last reset resets the thread from its time, letting the
send go.  A thread a person raised the limit of (``pigeon release --raise N``) has its
own limit; the option's 0 turns the brake off for every thread.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, gatherResults
from twisted.logger import Logger

from pigeond.brakes.base import PersonPrompts
from pigeond.config import Config
from pigeond.model import SESSION_ID_RE, Hold, NewMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.database import Database

log = Logger()
NAME = "hops"
# The most sessions of one thread whose transcripts are read for a person's prompt (the
# latest to talk in it; a thread is mostly two).
MAX_SESSIONS_ASKED = 8


def hop_reason(thread_id: str, limit: int) -> str:
    """What the sender and the operator are told of a hop hold."""
    return f"thread {thread_id} reached {limit} hops without a person; a person must release it"


class HopBrake:
    """Holds a thread's next agent's send once its hops reach the limit."""

    def __init__(self, db: Database, config: Config, prompts: PersonPrompts | None) -> None:
        """``prompts`` None: no transcript is read, only sends reset a thread."""
        self._db = db
        self._prompts = prompts
        self.configure(config)

    def configure(self, config: Config) -> None:
        self.max_hops = config.max_hops_per_thread

    async def judge(self, message: NewMessage, thread_id: str, now_ms: int) -> Hold | None:
        if self.max_hops == 0 or not SESSION_ID_RE.fullmatch(message.from_session):
            return None  # off, or a person's send (which resets the count)
        thread = await self._db.read(SwarmRepository.thread, thread_id)
        if thread is None:
            return None  # its first message
        limit = thread.hop_limit_or(self.max_hops)
        if thread.hops < limit:
            return None
        prompted_at = await self._newest_prompt(thread_id)
        if prompted_at is not None and prompted_at > thread.reset_at:
            await self._db.write(SwarmRepository.reset_thread, thread_id, prompted_at)
            return None
        return Hold(NAME, hop_reason(thread_id, limit))

    async def _newest_prompt(self, thread_id: str) -> int | None:
        """The newest prompt of a person in any session of the thread (None: none known)."""
        if self._prompts is None:
            return None
        sessions = await self._db.read(SwarmRepository.thread_sessions, thread_id)
        asked = [Deferred.fromCoroutine(self._ask(s)) for s in sessions[:MAX_SESSIONS_ASKED]]
        found = await gatherResults(asked, consumeErrors=True)
        return max((t for t in found if t is not None), default=None)

    async def _ask(self, session: str) -> int | None:
        """One session's answer; a reader that fails is no answer (the hold stands, and a
        person can still release it), never a failed send."""
        assert self._prompts is not None
        try:
            return await self._prompts.last_person_prompt(session)
        except Exception:
            log.failure("could not read {session}'s transcript for a person's prompt",
                        session=session)  # fmt: skip
            return None
