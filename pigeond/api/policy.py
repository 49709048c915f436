"""Each session's consent over HTTP, and the daemon's copy of every policy.

``PUT /swarm/policy/<session>`` sets a policy (``{"policy": "accept" | "hold" |
"refuse", "allow": [...], "steer": true | false}``), ``GET /swarm/policy/<session>``
reads it with the count of held messages, ``POST /swarm/release/<session>`` releases
what is held now (the policy stays), and ``GET /swarm/policies`` lists every session
that set one.

A session's consent is its own (:mod:`pigeond.api.authority`): ``PUT`` and the release
are allowed only to the session's own ``swarm_policy`` call (in flight, asking for the same)
or to a person; the stored ``by`` is who that was (the session, or ``person``), never what
the request's ``by`` says.  ``pigeon policy`` acts on the database, as the operator's tools
always have.

The send path must stay as fast as before for the default ``accept``: so the daemon
keeps every stored policy in memory (:class:`PolicyBook`), loaded at start, kept by the
writes made through it, and read again every :data:`REFRESH_S` seconds for what another
process (``pigeon policy``, ``sqlite3``) wrote.  A send to a target without a policy
costs a dict lookup, no database read.  The database stays the truth: a policy change
applies itself to the waiting messages in its own transaction, and when a refresh finds
a policy another process changed, it applies it once more, to what this daemon accepted
meanwhile under the old one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web import server

from pigeond.api.authority import CALL_ID_FIELD, OwnCall, SessionAuthority, call_id_of
from pigeond.api.send_request import InvalidRequest, decode_json_object
from pigeond.api.web import HttpError, JsonApi, JsonResponse, read_body
from pigeond.consent import (
    DEFAULT_POLICY,
    InboundPolicy,
    Verdict,
    held_reason,
    parse_allow,
    parse_policy,
    parse_steer,
)
from pigeond.model import (
    SESSION_ID_RE,
    NewMessage,
    SenderClaim,
    SenderProof,
)
from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.database import Database
from pigeond.storage.policies import PolicyChange

POLICY_PATH = "/swarm/policy/{session}"
POLICIES_PATH = "/swarm/policies"
RELEASE_PATH = "/swarm/release/{session}"
REFRESH_S = 2.0
# A sender nothing vouches for: what a caller that names no proof is judged as.
UNVERIFIED_CLAIM = SenderClaim(SenderProof.UNVERIFIED)
log = Logger()


class PolicyBook:
    """Every stored policy, in memory; the send path's one question is :meth:`judge`."""

    def __init__(self, db: Database, clock: IReactorTime) -> None:
        self._db = db
        self._clock = clock
        self._policies: dict[str, InboundPolicy] = {}
        self._loaded: Deferred[None] | None = None

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    def load(self) -> Deferred[None]:
        """Read every policy (at start); sends wait for it, once."""
        if self._loaded is None:
            self._loaded = Deferred.fromCoroutine(self._load())
        return self._loaded

    async def _load(self) -> None:
        stored = await self._db.read(SwarmRepository.policies)
        self._policies = {p.session: p for p in stored}

    def policy_of(self, session: str) -> InboundPolicy:
        return self._policies.get(session) or InboundPolicy(session, DEFAULT_POLICY)

    async def judge(
        self, message: NewMessage, sender: SenderClaim = UNVERIFIED_CLAIM
    ) -> str | None:
        """Why ``message`` must wait for its target's consent (None: it goes as usual);
        raises a 403 HttpError when the target refuses its sender.

        Sends are idempotent by msg_id, so a retry of a message already stored goes on to
        the store (which answers it as before, 202) even if its target refuses now.  What
        this costs beyond the dict lookup is paid only where it is needed: the sender's
        name is read only when the policy would hold or refuse it and lists a name, the
        stored message only when the answer would be a 403."""
        if self._loaded is None or not self._loaded.called:
            await self.load()
        target = message.to_session
        policy = None if target is None else self._policies.get(target)
        if policy is None or target is None:
            return None
        proven = sender.may_be_allowed
        name = None
        verdict = policy.verdict(message.from_session, None, proven)
        if verdict is not Verdict.DELIVER and policy.allows_names:
            name = await self._db.read(SwarmRepository.name_of, message.from_session)
            verdict = policy.verdict(message.from_session, name, proven)
        unverified = None
        if verdict is not Verdict.DELIVER and policy.allows(message.from_session, name):
            unverified = message.from_session  # listed, but its proof did not admit it
        if verdict is Verdict.REFUSE and not await self._stored_already(message):
            why = "" if unverified is None else f" (sender {unverified} not verified)"
            raise HttpError(
                403,
                f"{target} refuses messages from {message.from_session}:"
                f" its inbound policy is {policy.policy.value}{why}",
                {"policy": policy.policy.value},
            )
        if verdict is Verdict.HOLD:
            return held_reason(target, policy.policy, unverified)
        return None

    async def _stored_already(self, message: NewMessage) -> bool:
        """Whether ``message`` is a retry of one stored before (its msg_id, its content):
        it was accepted then, so it gets the same 202 now, whatever the policy became."""
        stored = await self._db.read(SwarmRepository.get, message.msg_id)
        return stored is not None and message.same_content(stored)

    def remember(self, change: PolicyChange) -> None:
        """A policy this daemon just stored."""
        policy = change.policy
        if policy.is_default:
            self._policies.pop(policy.session, None)
        else:
            self._policies[policy.session] = policy

    def refresh(self) -> Deferred[None]:
        """One refresh (a periodic job); never fails: a failure would stop its timer."""
        return Deferred.fromCoroutine(self._refresh())

    async def _refresh(self) -> None:
        try:
            stored = {p.session: p for p in await self._db.read(SwarmRepository.policies)}
            changed = [
                stored.get(s) or InboundPolicy(s, DEFAULT_POLICY)
                for s in set(stored) | set(self._policies)
                if stored.get(s) != self._policies.get(s)
            ]
            self._policies = stored
            for policy in changed:
                log.info("{session}'s inbound policy is now {policy} (set elsewhere)",
                         session=policy.session, policy=policy.policy.value)  # fmt: skip
                await self._db.write(SwarmRepository.reapply_policy, policy, self._now_ms())
        except StorageError as e:
            log.warn("policy refresh: {error}; trying again", error=str(e))


def _allow_list(raw: object) -> tuple[object, ...] | None:
    """An allow-list as given, duplicates dropped (None: not given)."""
    return tuple(dict.fromkeys(raw)) if isinstance(raw, list) else None


def setting(session: str, body: Mapping[str, Any]) -> OwnCall:
    """The ``swarm_policy`` call that asks for what a ``PUT`` body does."""
    wanted, allow, steer = body.get("policy"), _allow_list(body.get("allow")), body.get("steer")

    def matches(given: Mapping[str, Any]) -> bool:
        return (
            given.get("policy") == wanted
            and _allow_list(given.get("allow")) == allow
            and given.get("steer") == steer
        )

    return OwnCall("swarm_policy", matches, "set its policy", f"policy set {session} ...")


def releasing(session: str) -> OwnCall:
    """The ``swarm_policy`` call that releases what is held."""
    return OwnCall(
        "swarm_policy", lambda given: given.get("release") is True,
        "release its held messages", f"policy release {session}",
    )  # fmt: skip


class PolicyRoutes:
    def __init__(
        self, db: Database, book: PolicyBook, clock: IReactorTime, authority: SessionAuthority
    ) -> None:
        self._db = db
        self._book = book
        self._clock = clock
        self._authority = authority

    def install(self, api: JsonApi) -> JsonApi:
        api.route("PUT", POLICY_PATH, self.put)
        api.route("GET", POLICY_PATH, self.get)
        api.route("POST", RELEASE_PATH, self.release)
        api.route("GET", POLICIES_PATH, self.list_all)
        return api

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    @staticmethod
    def _check(session: str) -> str:
        if not SESSION_ID_RE.fullmatch(session):
            raise HttpError(400, f"session must match {SESSION_ID_RE.pattern}")
        return session

    async def put(self, request: server.Request, session: str) -> JsonResponse:
        """Set the session's policy (its allow-list and steering: each omitted stays as it
        was); 403 when the caller is neither the session's own swarm_policy call nor a
        person."""
        self._check(session)
        try:
            body = decode_json_object(read_body(request))
            policy = parse_policy(body.get("policy"))
            # omitted: as stored when written (not this daemon's copy, which may be older)
            allow = None if body.get("allow") is None else parse_allow(body["allow"])
            steer = None if body.get("steer") is None else parse_steer(body["steer"])
        except (InvalidRequest, ValueError) as e:
            raise HttpError(400, str(e)) from e
        call_id = call_id_of(body.get(CALL_ID_FIELD))
        by = await self._authority.acting_for(request, session, setting(session, body), call_id)
        change = await self._db.write(
            SwarmRepository.set_policy, session, policy, allow, self._now_ms(), by, steer
        )
        self._book.remember(change)
        log.info("{session}'s inbound policy is now {policy}, steering {steer} (by {by}):"
                 " {held} held, {released} released", session=session, policy=policy.value,
                 steer="allowed" if change.policy.steer else "off", by=by, held=change.held,
                 released=change.released)  # fmt: skip
        return JsonResponse(
            200, change.policy.view() | {"held": change.held, "released": change.released}
        )

    async def get(self, request: server.Request, session: str) -> JsonResponse:
        self._check(session)
        policy = await self._db.read(SwarmRepository.policy_of, session)
        held = await self._db.read(SwarmRepository.held_counts)
        return JsonResponse(200, policy.view() | {"held": held.get(session, 0)})

    async def release(self, request: server.Request, session: str) -> JsonResponse:
        """Release what is held for the session now; its policy stays."""
        self._check(session)
        raw = read_body(request)
        try:
            body = decode_json_object(raw) if raw.strip() else {}
        except InvalidRequest as e:
            raise HttpError(400, str(e)) from e
        call_id = call_id_of(body.get(CALL_ID_FIELD))
        await self._authority.acting_for(request, session, releasing(session), call_id)
        released = await self._db.write(SwarmRepository.release_held, session, self._now_ms())
        log.info("{n} held message(s) for {session} released", n=released, session=session)
        return JsonResponse(200, {"session": session, "released": released})

    async def list_all(self, request: server.Request) -> JsonResponse:
        stored = await self._db.read(SwarmRepository.policies)
        held = await self._db.read(SwarmRepository.held_counts)
        return JsonResponse(
            200, {"policies": [p.view() | {"held": held.get(p.session, 0)} for p in stored]}
        )
