"""A session's own things are its own (pigeond/api/authority.py): names, policy and channel
memberships change over HTTP only by the session's own tool call in flight, or a person.

Requests here come from agents' processes (not a person); each session's transcript is a
stand-in holding the calls a test starts (tests/authority_helpers.py).  The same routes
asked by a person are tested in test_names_routes.py, test_policy_routes.py and
test_channel_routes.py; the real opencode in tests/e2e/test_authority_e2e.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.api.authority import (
    MAX_CHECKS_IN_FLIGHT,
    OWN_CALL_POLL_S,
    OWN_CALL_WAIT_S,
    PERSON,
    OwnCall,
)
from pigeond.api.web import HttpError
from pigeond.config import Config
from pigeond.service.daemon import Daemon
from pigeond.tool_calls import ToolCall, TranscriptUnreadable
from tests.authority_helpers import CallsInFlight, a_person, agent_authority, as_agents
from tests.http_helpers import daemon_call, failure_of, result_of
from tests.storage_helpers import clock_daemon

pytestmark = pytest.mark.both_backends

OWNER, ATTACKER = "ses_victim", "ses_att"
CLAUDE = "0f3c2a1e-8d4b-4c6a-9e2f-1a2b3c4d5e6f"
TEAM = "team"


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Daemon:
    """Delivery off (every holder counts as live), asked by agents' processes."""
    return clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)


@pytest.fixture
def calls(daemon: Daemon) -> CallsInFlight:
    return as_agents(daemon)


def claim(daemon: Daemon, name: str, session: str, **more: Any) -> tuple[int, Any]:
    return daemon_call(daemon, "POST", "/swarm/names", {"name": name, "session": session} | more)


def holder(daemon: Daemon, name: str) -> str | None:
    _, listed = daemon_call(daemon, "GET", "/swarm/names")
    return next((e["session"] for e in listed["names"] if e["name"] == name), None)


# -- names ----------------------------------------------------------------------------------


def test_a_forced_claim_of_a_live_sessions_name_by_another_is_403(
    daemon: Daemon, calls: CallsInFlight
) -> None:
    """The attacker's own swarm_name call cannot take a name a live session holds, even with
    force: the name stays, and mail to @reviewer still reaches its holder."""
    calls.start(OWNER, "swarm_name", name="reviewer")
    assert claim(daemon, "reviewer", OWNER)[0] == 200
    calls.start(ATTACKER, "swarm_name", name="reviewer")
    status, answer = claim(daemon, "reviewer", ATTACKER, force=True)
    assert status == 403
    assert "only a person at a terminal may take the name reviewer" in answer["error"]
    assert holder(daemon, "reviewer") == OWNER
    sent = daemon_call(daemon, "POST", "/swarm/send",
                       {"from": ATTACKER, "to": "@reviewer", "payload": "hi"})  # fmt: skip
    assert sent[0] == 202
    stored = daemon_call(daemon, "GET", f"/swarm/message/{sent[1]['msg_id']}")[1]
    assert stored["to"] == OWNER


def test_an_allow_list_name_cannot_be_taken_to_pass_a_refusal(
    daemon: Daemon, calls: CallsInFlight
) -> None:
    """The victim refuses all but @lead; the attacker's forced claim of lead is refused, so
    its send to the victim is still refused."""
    lead = "ses_lead"
    calls.start(lead, "swarm_name", name="lead")
    assert claim(daemon, "lead", lead)[0] == 200
    calls.start(OWNER, "swarm_policy", policy="refuse", allow=["@lead"])
    assert put_policy(daemon, OWNER, policy="refuse", allow=["@lead"])[0] == 200
    calls.start(ATTACKER, "swarm_name", name="lead")
    assert claim(daemon, "lead", ATTACKER, force=True)[0] == 403
    sent = daemon_call(daemon, "POST", "/swarm/send",
                       {"from": ATTACKER, "to": OWNER, "payload": "let me in"})  # fmt: skip
    assert sent[0] == 403 and "refuses messages from ses_att" in sent[1]["error"]


def test_a_claim_for_another_session_is_403(daemon: Daemon, calls: CallsInFlight) -> None:
    """A claim naming session X, with no swarm_name call of X in flight, is refused."""
    calls.start(ATTACKER, "swarm_name", name="lead")
    status, answer = claim(daemon, "lead", OWNER)
    assert status == 403
    assert answer["error"].startswith(f"only {OWNER} itself may claim a name for it")
    assert "pigeon name set lead ses_victim" in answer["error"]
    assert holder(daemon, "lead") is None


def test_a_sessions_own_claim_in_flight_is_allowed(daemon: Daemon, calls: CallsInFlight) -> None:
    """The session's own swarm_name call, in flight with this name, makes the claim its own."""
    calls.start(OWNER, "swarm_name", name="reviewer")
    assert claim(daemon, "reviewer", OWNER)[0] == 200
    assert holder(daemon, "reviewer") == OWNER


@pytest.mark.parametrize("finished", [False, True])
def test_an_own_call_for_another_name_or_finished_does_not_count(
    daemon: Daemon, calls: CallsInFlight, finished: bool
) -> None:
    """A call asking another name, or a call that has returned, is not this request's."""
    calls.start(OWNER, "swarm_name", name="reviewer" if finished else "builder")
    if finished:
        calls.finish_all()
    assert claim(daemon, "reviewer", OWNER)[0] == 403


def test_a_request_naming_its_call_needs_that_very_call(
    daemon: Daemon, calls: CallsInFlight
) -> None:
    """With call_id (the plugin sends opencode's callID), only that call counts."""
    own = calls.start(OWNER, "swarm_name", name="reviewer")
    status, answer = claim(daemon, "reviewer", OWNER, call_id="call_other")
    assert status == 403 and "no swarm_name call call_other in flight" in answer["error"]
    assert claim(daemon, "reviewer", OWNER, call_id=own.call_id)[0] == 200


@pytest.mark.parametrize("call_id", ["", "call id", 7, "x" * 129])
def test_a_malformed_call_id_is_a_400(daemon: Daemon, calls: CallsInFlight, call_id: Any) -> None:
    """A call_id that is not an id is refused before anything is looked up."""
    status, answer = claim(daemon, "reviewer", OWNER, call_id=call_id)
    assert status == 400 and answer["error"].startswith("call_id must match")


def test_an_mcp_member_claims_its_own_name_without_a_call(
    daemon: Daemon, calls: CallsInFlight
) -> None:
    """pigeon-mcp --as @reviewer (mcp_reviewer) claims reviewer: its id says it already."""
    assert claim(daemon, "reviewer", "mcp_reviewer")[0] == 200
    assert claim(daemon, "other", "mcp_reviewer")[0] == 403


def test_an_mcp_members_policy_and_channels_are_a_persons(
    daemon: Daemon, calls: CallsInFlight
) -> None:
    """pigeond reads no transcript of an MCP-only member (Codex): only a person changes
    its policy or memberships, and the refusal says why."""
    status, answer = put_policy(daemon, "mcp_codex", policy="hold")
    assert status == 403 and "pigeond has no transcript of mcp_codex" in answer["error"]
    joined = daemon_call(
        daemon, "POST", f"/swarm/channels/{TEAM}/members", {"session": "mcp_codex"}
    )
    assert joined[0] == 403


def test_releasing_a_name_is_a_persons(daemon: Daemon, calls: CallsInFlight) -> None:
    """DELETE /swarm/names/<name> from an agent is refused; the name stays."""
    calls.start(OWNER, "swarm_name", name="reviewer")
    claim(daemon, "reviewer", OWNER)
    status, answer = daemon_call(daemon, "DELETE", f"/swarm/names/reviewer?session={OWNER}")
    assert status == 403
    assert "only a person at a terminal may release the name reviewer" in answer["error"]
    assert holder(daemon, "reviewer") == OWNER


# -- policy ---------------------------------------------------------------------------------


def put_policy(daemon: Daemon, session: str, **body: Any) -> tuple[int, Any]:
    return daemon_call(daemon, "PUT", f"/swarm/policy/{session}", body)


def policy_of(daemon: Daemon, session: str) -> dict[str, Any]:
    status, answer = daemon_call(daemon, "GET", f"/swarm/policy/{session}")
    assert status == 200
    return dict(answer)


def test_a_policy_with_a_forged_by_is_403(daemon: Daemon, calls: CallsInFlight) -> None:
    """PUT /swarm/policy/ses_victim saying by ses_victim, from another session: refused,
    the victim's policy unchanged."""
    calls.start(ATTACKER, "swarm_policy", policy="accept", allow=[ATTACKER])
    status, answer = put_policy(daemon, OWNER, policy="accept", allow=[ATTACKER], by=OWNER)
    assert status == 403
    assert answer["error"].startswith(f"only {OWNER} itself may set its policy")
    assert policy_of(daemon, OWNER)["allow"] == []


def test_a_sessions_own_policy_call_sets_it_by_itself(daemon: Daemon, calls: CallsInFlight) -> None:
    """The session's own swarm_policy call in flight: the policy is set, by the session
    (whatever the request's by says)."""
    calls.start(OWNER, "swarm_policy", policy="refuse", allow=["@lead"], release=None)
    status, _ = put_policy(daemon, OWNER, policy="refuse", allow=["@lead"], by="ses_other")
    assert status == 200
    stored = policy_of(daemon, OWNER)
    assert (stored["policy"], stored["allow"], stored["updated_by"]) == (
        "refuse", ["@lead"], OWNER,
    )  # fmt: skip


@pytest.mark.parametrize(
    "body",
    [{"policy": "accept"}, {"policy": "refuse", "allow": ["ses_att"]}, {"policy": "refuse"}],
)
def test_an_own_policy_call_asking_something_else_does_not_count(
    daemon: Daemon, calls: CallsInFlight, body: dict[str, Any]
) -> None:
    """The call in flight asks refuse with allow [@lead]: another policy, another allow-list,
    or the list left out is not what it asked."""
    calls.start(OWNER, "swarm_policy", policy="refuse", allow=["@lead"])
    assert put_policy(daemon, OWNER, **body)[0] == 403


def test_releasing_anothers_held_messages_is_403(daemon: Daemon, calls: CallsInFlight) -> None:
    """POST /swarm/release/<session> needs the session's own swarm_policy release call."""
    assert daemon_call(daemon, "POST", f"/swarm/release/{OWNER}", {})[0] == 403
    release = calls.start(OWNER, "swarm_policy", release=True)
    body = {"call_id": release.call_id}
    assert daemon_call(daemon, "POST", f"/swarm/release/{OWNER}", body)[0] == 200


def test_a_persons_policy_is_stored_as_by_a_person(daemon: Daemon) -> None:
    """A person's PUT is allowed; its by is "person", not what the body says."""
    assert daemon.authority is not None
    daemon.authority.caller = a_person
    assert put_policy(daemon, OWNER, policy="hold", by=OWNER)[0] == 200
    assert policy_of(daemon, OWNER)["updated_by"] == PERSON


# -- channels -------------------------------------------------------------------------------


def members(daemon: Daemon) -> list[str]:
    _, listed = daemon_call(daemon, "GET", f"/swarm/channels/{TEAM}")
    return [m["session"] for m in listed["members"]]


def test_joining_another_session_to_a_channel_is_403(daemon: Daemon, calls: CallsInFlight) -> None:
    """A join of session X without X's own swarm_channel join call: refused, not a member."""
    calls.start(ATTACKER, "swarm_channel", action="join", channel=TEAM)
    status, answer = daemon_call(
        daemon, "POST", f"/swarm/channels/{TEAM}/members", {"session": OWNER}
    )
    assert status == 403
    assert answer["error"].startswith(f"only {OWNER} itself may join it to channel {TEAM}")
    assert members(daemon) == []


def test_a_sessions_own_join_and_leave_are_allowed(daemon: Daemon, calls: CallsInFlight) -> None:
    """Its own join call joins it; another's leave is refused; its own leave call leaves."""
    calls.start(OWNER, "swarm_channel", action="join", channel=TEAM)
    path = f"/swarm/channels/{TEAM}/members"
    assert daemon_call(daemon, "POST", path, {"session": OWNER})[0] == 201
    assert daemon_call(daemon, "DELETE", f"{path}/{OWNER}")[0] == 403
    assert members(daemon) == [OWNER]
    leave = calls.start(OWNER, "swarm_channel", action="leave", channel=TEAM)
    assert daemon_call(daemon, "DELETE", f"{path}/{OWNER}?call_id={leave.call_id}")[0] == 200
    assert members(daemon) == []


# -- finding the call: runtimes that write it late, transcripts that cannot be read --------


class Scripted:
    """A reader whose answers a test scripts, one per read (the last one repeats)."""

    def __init__(self, *answers: list[ToolCall] | Exception | None) -> None:
        self.answers = list(answers)
        self.reads = 0

    async def recent_calls(self, member: str) -> list[ToolCall] | None:
        self.reads += 1
        answer = self.answers[min(self.reads, len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


NAMING = OwnCall("swarm_name", lambda given: given.get("name") == "x", "claim a name", "name set")
IN_FLIGHT = [ToolCall("toolu_1", "swarm_name", {"name": "x"}, finished=False)]


def ask(clock: Clock, reader: Any, session: str) -> Deferred[str]:
    authority = agent_authority(clock, reader)
    return Deferred.fromCoroutine(authority.acting_for(object(), session, NAMING))  # type: ignore[arg-type]


def test_a_claude_call_written_after_the_request_is_found() -> None:
    """Claude Code writes the tool_use after calling the tool: its transcript is read again."""
    clock = Clock()
    reader = Scripted([], [], IN_FLIGHT)
    asking = ask(clock, reader, CLAUDE)
    clock.advance(OWN_CALL_POLL_S)
    assert not asking.called
    clock.advance(OWN_CALL_POLL_S)
    assert result_of(asking) == CLAUDE


def test_a_claude_call_never_written_is_refused_after_the_wait() -> None:
    """No call by OWN_CALL_WAIT_S: 403."""
    clock = Clock()
    asking = ask(clock, Scripted([]), CLAUDE)
    clock.pump([OWN_CALL_POLL_S] * (round(OWN_CALL_WAIT_S / OWN_CALL_POLL_S) - 1))
    assert not asking.called
    clock.advance(OWN_CALL_POLL_S)
    refusal = failure_of(asking).value
    assert isinstance(refusal, HttpError) and refusal.status == 403


def test_an_opencode_transcript_is_read_once() -> None:
    """opencode stores the call before it runs the tool: one read tells."""
    reader = Scripted([])
    failure = failure_of(ask(Clock(), reader, OWNER))
    assert failure.check(HttpError) and reader.reads == 1


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (TranscriptUnreadable("opencode answered 503"), "could not be read: opencode answered"),
        (None, "pigeond has no transcript of"),
    ],
)
def test_a_transcript_not_read_is_a_403_saying_why(answer: Any, why: str) -> None:
    """An unreadable transcript, or a member pigeond reads none of: 403, and why."""
    refusal = failure_of(ask(Clock(), Scripted(answer), OWNER)).value
    assert isinstance(refusal, HttpError) and why in refusal.message


class Hanging:
    """A reader whose reads never end (an opencode that hangs)."""

    def __init__(self) -> None:
        self.reads = 0

    async def recent_calls(self, member: str) -> list[ToolCall] | None:
        self.reads += 1
        await Deferred()
        return None


def test_checks_beyond_the_cap_are_429_and_read_nothing() -> None:
    """With MAX_CHECKS_IN_FLIGHT checks under way, the next is 429 with Retry-After."""
    reader, clock = Hanging(), Clock()
    authority = agent_authority(clock, reader)
    # held here: a check nobody holds could be collected, and its count with it
    under_way = [
        Deferred.fromCoroutine(authority.acting_for(object(), f"ses_{n}", NAMING))  # type: ignore[arg-type]
        for n in range(MAX_CHECKS_IN_FLIGHT)
    ]
    refusal = failure_of(
        Deferred.fromCoroutine(authority.acting_for(object(), "ses_more", NAMING))  # type: ignore[arg-type]
    ).value
    assert isinstance(refusal, HttpError)
    assert (refusal.status, refusal.headers) == (429, {"Retry-After": "1"})
    assert reader.reads == MAX_CHECKS_IN_FLIGHT
    assert not any(d.called for d in under_way)
