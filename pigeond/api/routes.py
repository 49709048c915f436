"""The swarm routes, wired to the repository and the arbiter.

The send path is ``parse → check → admit and store → kick``: the check is the
database watch (:data:`SendCheck`), the admission the flood guard
(:class:`Admission`).  Every database call goes through a
:class:`~pigeond.storage.Database`, off the reactor thread, so a handler waits
for its own call while the reactor serves others.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web import server

from pigeond import __version__
from pigeond.api.callers import caller_of
from pigeond.api.channels import channel_status, fan_out_answer
from pigeond.api.names import resolve_target
from pigeond.api.openapi import OPENAPI_PATH, openapi_document
from pigeond.api.paging import DEFAULT_INBOX_LIMIT as DEFAULT_INBOX_LIMIT
from pigeond.api.paging import MAX_INBOX_LIMIT as MAX_INBOX_LIMIT
from pigeond.api.paging import cursor_number, encode_cursor, page_limit
from pigeond.api.send_request import parse_send_body
from pigeond.api.sender_claims import sender_claim
from pigeond.api.threads import hold_view, message_thread_fields, stored_hold, thread_for
from pigeond.api.web import HttpError, JsonApi, JsonResponse, query_param, read_body
from pigeond.brakes import Brake, first_hold
from pigeond.config import Config
from pigeond.ids import make_msg_id
from pigeond.model import MSG_ID_RE, SESSION_ID_RE, NewMessage, SenderClaim, State
from pigeond.storage import AcceptOutcome, SwarmRepository
from pigeond.storage.database import Database
from pigeond.storage.repository import Accept, QueueLimits

MESSAGE_PATH = "/swarm/message/{msg_id}"
log = Logger()

# A check on a parsed send before it is stored; raises HttpError to refuse it.
SendCheck = Callable[[server.Request, NewMessage], Awaitable[None] | None]
# Whether opencode has the send's target: True/False (checked or not: the 202's
# ``target_checked``), at once when it knows, else awaited; raises a 404 HttpError for a
# target opencode does not have (see pigeond.api.target_check).
TargetCheck = Callable[[NewMessage], bool | Awaitable[bool]]


# Why a send must wait for its target's consent (None: it goes as usual); raises a 403
# HttpError when the target refuses the sender (see pigeond.api.policy.PolicyBook.judge).
# The allow-list admits the sender only as its proof may (model.SenderClaim).
Consent = Callable[[NewMessage, SenderClaim], Awaitable[str | None]]


class Admission(Protocol):
    """Decides, around the store itself, whether a send may be stored (the flood guard):
    some limits can only be judged in the store's own transaction (a target's count)."""

    async def admit(
        self,
        message: NewMessage,
        store: Callable[[QueueLimits], Awaitable[AcceptOutcome]],
        caller: str,
    ) -> AcceptOutcome:
        """Store ``message``, sent by ``caller`` (a :class:`Caller`'s key), through
        ``store(limits)`` or raise a 4xx/5xx HttpError."""
        ...


@dataclass(frozen=True, slots=True)
class DeliveryHealth:
    """What ``/health`` tells of delivery beside the queue's counts (the daemon knows it)."""

    running: bool  # the arbiter runs (false with delivery off)
    ticking: bool  # ...and ticked lately
    opencode: str  # ok, degraded, unreachable, not contacted yet, unsupported, off
    event_stream: str  # connected, down, off (delivery=call needs none)
    in_flight: int  # targets with a hand-off in flight
    unrecorded: int  # hand-offs opencode took that the database has not recorded yet
    problem: str | None = None  # what is wrong with opencode, in a sentence (its API...)
    # while opencode is unreachable: since when (ms since the epoch), and the last error
    unreachable_since_ms: int | None = None
    unreachable_error: str | None = None
    # while transcript reads (of any runtime) pass their deadline: what /health says of it
    transcripts_problem: str | None = None
    # opencode's version when it was found to be a 2.x (pigeond speaks its /api/ routes)
    opencode_version: str | None = None


DELIVERY_OFF = DeliveryHealth(False, False, "off", "off", 0, 0)


class SwarmRoutes:
    def __init__(
        self,
        db: Database,
        clock: IReactorTime,
        config: Config,
        *,
        on_accepted: Callable[[str], None] = lambda target: None,
        delivery_health: Callable[[], DeliveryHealth] = lambda: DELIVERY_OFF,
        send_checks: Sequence[SendCheck] = (),
        admission: Admission | None = None,
        storage_problem: Callable[[], str | None] = lambda: None,
        target_check: TargetCheck | None = None,
        consent: Consent | None = None,
        brakes: Sequence[Brake] = (),
    ) -> None:
        """``config`` gives ``default_ttl_s`` and ``inbox_max_bytes`` (see :meth:`configure`);
        ``brakes`` are asked in order whether a send is held for a person (pigeond/brakes/)."""
        self.configure(config)
        self._db = db
        self._clock = clock
        self._on_accepted = on_accepted
        self.delivery_health = delivery_health
        self._send_checks = tuple(send_checks)
        self._admission = admission
        self._storage_problem = storage_problem
        self._target_check = target_check
        self._consent = consent
        self.brakes = tuple(brakes)

    def install(self, api: JsonApi) -> JsonApi:
        api.route("POST", "/swarm/send", self.send)
        api.route("GET", "/swarm/inbox", self.inbox)
        api.route("GET", "/health", self.health)
        api.route("GET", MESSAGE_PATH, self.message)
        api.route("GET", OPENAPI_PATH, self.openapi)
        return api

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    # -- POST /swarm/send ------------------------------------------------------

    def configure(self, config: Config) -> None:
        """A reload's settings, from the next request on.  ``inbox_max_bytes`` bounds an
        inbox answer in bytes as ``limit`` does in messages: the answer is built on the
        reactor thread and buffered whole for a client that does not read."""
        self.default_ttl_s = config.default_ttl_s
        self.reply_within_s = config.reply_within_s
        self.inbox_max_bytes = config.inbox_max_bytes
        self.sender_proof_timeout_ms = int(config.sender_proof_timeout_s * 1000)

    async def send(self, request: server.Request) -> JsonResponse:
        now_ms = self._now_ms()
        send = parse_send_body(read_body(request), lambda: make_msg_id(now_ms))
        message = await resolve_target(self._db, send)  # to: "@name" -> its holder, or 404
        for check in self._send_checks:
            waiting = check(request, message)
            if waiting is not None:
                await waiting
        caller = caller_of(request)  # the process behind it: charged, and a person's shell?
        sender = sender_claim(
            message, caller if send.via_terminal else None, now_ms, self.sender_proof_timeout_ms
        )
        held = None if self._consent is None else await self._consent(message, sender)
        target_checked = False  # no opencode to ask (delivery off)
        if self._target_check is not None:  # before the flood guard spends a token
            checked = self._target_check(message)
            target_checked = checked if isinstance(checked, bool) else await checked
        thread_id = await thread_for(self._db, send, now_ms)
        hold = await first_hold(self.brakes, message, thread_id, now_ms)
        expires_at = now_ms + 1000 * (send.ttl_s or self.default_ttl_s)  # each copy too
        reply_within_ms = 0
        if send.expects_reply:
            reply_within_ms = 1000 * (send.reply_within_s or self.reply_within_s)

        def store(limits: QueueLimits) -> Awaitable[AcceptOutcome]:
            return self._db.accept(
                Accept(
                    message,
                    now_ms,
                    expires_at,
                    limits.per_target,
                    reply_within_ms,
                    send.to_name,
                    held=held,
                    thread_id=thread_id,
                    brake_hold=hold,
                    sender=sender,
                    max_queued_bytes=limits.total_bytes,
                )
            )

        if self._admission is None:
            outcome = await store(QueueLimits())
        else:
            outcome = await self._admission.admit(message, store, caller.key)
        if outcome is AcceptOutcome.CONFLICT:
            raise HttpError(
                409,
                "msg_id is already used by a message with different content",
                {"msg_id": message.msg_id},
            )
        if outcome is AcceptOutcome.NO_RECIPIENT:
            raise HttpError(
                409,
                f"no member of channel {message.channel!r} can take this message: it has no"
                " member but the sender, or each one refuses the sender or already has"
                " max_queued_per_target queued messages; nothing stored",
                {"channel": message.channel},
            )
        if outcome is AcceptOutcome.STORED:
            log.info(
                "accepted {msg_id} from {sender} to {target} in {thread}{held}",
                msg_id=message.msg_id,
                sender=message.from_session,
                target=message.to_session or f"channel:{message.channel}",
                thread=thread_id,
                held="" if hold is None else f", held: {hold.reason}",
            )
            if message.to_session is not None and hold is None:
                self._on_accepted(message.to_session)
        else:  # a retried send: answered as the stored message is
            stored = await self._db.read(SwarmRepository.get, message.msg_id)
            if stored is not None:
                thread_id, hold = stored.thread_id or thread_id, stored_hold(stored)
        answer: dict[str, object] = {
            "accepted": True,
            "msg_id": message.msg_id,
            "thread": thread_id,
            "target_checked": target_checked,
        }
        if hold is not None:
            answer["held"] = hold_view(hold)
        if message.channel is not None:  # each member's copy, kicked when new
            kick = self._on_accepted if outcome is AcceptOutcome.STORED else None
            answer |= await fan_out_answer(self._db, message.msg_id, kick)
        return JsonResponse(202, answer)

    # -- GET /swarm/inbox ------------------------------------------------------

    async def inbox(self, request: server.Request) -> JsonResponse:
        """A page of the session's hand-offs, bounded by ``limit`` and ``inbox_max_bytes``:
        the answer is built on the reactor thread and, for a client that does not read,
        waits whole in the send buffer, so its size must not follow the backlog's."""
        session = query_param(request, "session")
        if not session:
            raise HttpError(400, "query parameter 'session' is required")
        if not SESSION_ID_RE.fullmatch(session):
            raise HttpError(400, f"query parameter 'session' must match {SESSION_ID_RE.pattern}")
        limit = page_limit(query_param(request, "limit"))
        since = query_param(request, "since")
        after_seq = 0 if since is None else await self._cursor_position(since, session)
        page = await self._db.read(
            SwarmRepository.inbox_page, session, after_seq, limit, self.inbox_max_bytes
        )
        if page.messages:
            last_seq = page.messages[-1].handoff_seq
            assert last_seq is not None
            next_cursor: str | None = encode_cursor(last_seq)
        else:
            next_cursor = since
        return JsonResponse(
            200,
            {
                "messages": [m.inbox_view() for m in page.messages],
                "has_more": page.has_more,
                "next_cursor": next_cursor,
            },
        )

    async def _cursor_position(self, since: str, session: str) -> int:
        """A cursor is ours (``cur_N``) or, as in the seed, a msg_id handed off to this session."""
        seq = cursor_number(since)
        if seq is not None:
            if seq > await self._db.read(SwarmRepository.last_handoff_seq):
                raise HttpError(400, f"unknown cursor {since!r}")
            return seq
        message = await self._db.read(SwarmRepository.get, since)
        if message is None or message.to_session != session or message.handoff_seq is None:
            raise HttpError(
                400,
                f"unknown cursor {since!r}: no such message handed off to this session"
                " (unknown, or pruned after retention_days); page with the cur_N cursor"
                " from next_cursor instead",
            )
        return message.handoff_seq

    # -- GET /swarm/message/<msg_id> ---------------------------------------------

    async def message(self, request: server.Request, msg_id: str) -> JsonResponse:
        """One message's fields and delivery state, so a sender can follow it up."""
        if not MSG_ID_RE.fullmatch(msg_id):
            raise HttpError(400, f"msg_id must match {MSG_ID_RE.pattern}")
        stored = await self._db.read(SwarmRepository.get, msg_id)
        if stored is None:
            raise HttpError(404, f"no message {msg_id}", {"msg_id": msg_id})
        waiting = await self._db.read(SwarmRepository.permission_waited_on, msg_id)
        fan_out: dict[str, object] = {}
        if stored.state == State.FANNED_OUT:  # a channel message: what became of each copy
            fan_out = await channel_status(self._db, msg_id)
        return JsonResponse(
            200,
            stored.inbox_view()
            | {
                "state": stored.state,
                "attempts": stored.attempts,
                "requeue_count": stored.requeue_count,
                "last_error": stored.last_error,
                "next_retry_at": stored.next_retry_at,
                "expires_at": stored.expires_at,
                "to_runtime": stored.to_runtime,
                "handed_to": stored.handed_to(),
                "receipt": stored.receipt(),
                "answered_at": stored.answered_at,
                "answer_message_id": stored.answer_message_id,
                # the target waits for a permission answer while it handles this message
                "waiting_on_permission": None if waiting is None else waiting.view(),
            }
            | message_thread_fields(stored)
            | fan_out,
        )

    # -- GET /health -------------------------------------------------------------

    async def health(self, request: server.Request) -> JsonResponse:
        """200 while the daemon serves (``ok`` says only that), with what a monitor needs:
        whether delivery runs and ticks, whether opencode answers (while it does not,
        since when and the last error) and the event stream is up, and the queue's
        counts.  503 and ``ok: false`` once the database file is not the one opened (its
        counts would describe a file nobody will read again): an unreachable opencode is
        opencode's outage, not the daemon's, and messages wait for it."""
        problem = self._storage_problem()
        if problem is not None:
            return JsonResponse(
                503,
                {"ok": False, "version": __version__, "arbiter": False,
                 "error": f"{problem}; restart pigeond"},
            )  # fmt: skip
        counts = await self._db.read(SwarmRepository.count_open)
        delivery = self.delivery_health()
        return JsonResponse(
            200,
            {
                "ok": True,
                "version": __version__,
                "arbiter": delivery.running,
                "arbiter_ticking": delivery.ticking,
                "opencode": delivery.opencode,
                "event_stream": delivery.event_stream,
                "in_flight": delivery.in_flight,
                "unrecorded": delivery.unrecorded,
                "queued": counts.get(State.QUEUED, 0),
                "failed": counts.get(State.FAILED, 0),
            }
            | ({} if delivery.problem is None else {"opencode_problem": delivery.problem})
            | (
                {}
                if delivery.opencode_version is None
                else {"opencode_version": delivery.opencode_version}
            )
            | (
                {}
                if delivery.transcripts_problem is None
                else {"transcripts_problem": delivery.transcripts_problem}
            )
            | (
                {}
                if delivery.unreachable_since_ms is None
                else {
                    "opencode_unreachable_since": delivery.unreachable_since_ms,
                    "opencode_error": delivery.unreachable_error or "",
                }
            ),
        )

    # -- GET /openapi.json ---------------------------------------------------------

    def openapi(self, request: server.Request) -> JsonResponse:
        """This API's OpenAPI description (``pigeond/api/openapi.json``).  Behind the token like
        every route but /health: nothing in it is secret, but one rule ("only /health is
        open") is easier to keep than a list, and a supervisor needs only /health."""
        return JsonResponse(200, openapi_document())
