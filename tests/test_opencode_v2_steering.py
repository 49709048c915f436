"""The arbiter steering into a running 2.x turn: its drain, the 2.x runtime and the
stand-in over real HTTP on loopback, a real repository."""

from __future__ import annotations

from pathlib import Path

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from pigeond.consent import Policy
from pigeond.delivery.arbiter import Arbiter, DeliveryPolicy
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.database import InlineDatabase
from testkit.messages import new_message
from testkit.opencode_v2_session import StandInSession
from testkit.polling import PATIENCE_S
from tests.arbiter_harness import FakeRegistry, InMemoryOpencode
from tests.opencode_v2_calls import prompt, running, wait_idle
from tests.test_opencode_v2_runtime import runtime_at


async def until_busy(session: StandInSession) -> None:
    """Let the reactor run (the drain's calls) until the stand-in's session runs a turn."""
    for _ in range(int(PATIENCE_S / 0.05)):
        if session.turn_running():
            return
        await deferLater(reactor, 0.05, lambda: None)
    raise AssertionError(f"no turn ran within {PATIENCE_S} s")


def accept(repo: SwarmRepository, target: str, **fields: object) -> str:
    message = new_message(target, **fields)  # type: ignore[arg-type]
    repo.accept(message, int(reactor.seconds() * 1000))
    return message.msg_id


@pytest_twisted.ensureDeferred
async def test_an_allowed_steer_goes_into_the_turn_pigeond_waits_for(tmp_path: Path) -> None:
    """While the drain waits for the turn its queued batch started, an urgent message asked
    to steer, to a session whose policy allows it, is admitted at once and read by that
    turn: the stand-in ran one turn with both inputs."""
    repo = SwarmRepository(open_database(tmp_path / "steer.db"))
    with running(step_s=2.0) as (url, session), runtime_at(url) as (runtime, _):
        repo.set_policy(session.id, Policy.ACCEPT, (), 0, "person", steer=True)
        arbiter = Arbiter(
            InlineDatabase(repo), FakeRegistry(), InMemoryOpencode(), reactor,
            policy=DeliveryPolicy(batch_max=10), runtimes=[runtime],
        )  # fmt: skip
        first = accept(repo, session.id)
        arbiter.kick(session.id)
        await until_busy(session)
        steer = accept(repo, session.id, priority="urgent", steer=True)
        arbiter.kick(session.id)
        drained = arbiter.drained(session.id)
        assert drained is not None
        await drained
        inputs = [session.admitted[i] for turn in session.turns for i in turn.input_ids]
        assert len(session.turns) == 1
        assert [(first in i.text, steer in i.text, i.delivery) for i in inputs] == [
            (True, False, "queue"), (False, True, "steer"),
        ]  # fmt: skip
        await arbiter.stop()
    repo.close()


@pytest_twisted.ensureDeferred
async def test_a_steer_read_after_a_tool_step_is_answered_by_that_turn() -> None:
    """The stand-in writes a steer read at a step boundary after the turn's step of tool
    calls; the runtime's read (reading back past it) finds both inputs answered by that
    turn, as one ended turn."""
    with running() as (url, session), runtime_at(url) as (runtime, _):
        with session.turns_held():
            first = prompt(url, session.id, '<swarm_message msg_id="m1">a</swarm_message>')
            with session.tool_running("read", {"filePath": "notes.md"}):
                steer = prompt(url, session.id, '<swarm_message msg_id="m2">b</swarm_message>',
                               delivery="steer")  # fmt: skip
        wait_idle(url, session)
        kinds = [m["type"] for m in session.transcript()]
        assert kinds == ["user", "assistant", "user", "assistant"]
        assert runtime.transcripts is not None
        view = await runtime.transcripts.read(session.id, 2)
        where = {"m1": first["id"], "m2": steer["id"]}
        answer = session.transcript()[-1]["id"]
        assert view.answers(where) == {"m1": answer, "m2": answer}
        assert [t.msg_ids for t in view.turns(where)] == [("m1", "m2")]
