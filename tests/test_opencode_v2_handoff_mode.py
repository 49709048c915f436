"""The agent and model a 2.x hand-off ran with, recorded from the session's transcript:
a 2.x input names neither (the session keeps its own), so what is recorded is what the
session's newest turn ran with, as its ``assistant`` messages say."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest_twisted

from pigeond.delivery.opencode_v2_runtime import SESSION_OWN_NOTE, session_mode
from pigeond.model import NO_MODE, HandoffMode
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.opencode_v2_session import AGENT, MODEL_REF
from testkit.polling import PATIENCE_S, wait_until
from tests.opencode_v2_calls import running
from tests.test_opencode_v2_daemon import send, standin, start, stored
from tests.test_opencode_v2_runtime import TEXTS, runtime_at

STANDIN_MODE = HandoffMode(AGENT, MODEL_REF["providerID"], MODEL_REF["id"], None, SESSION_OWN_NOTE)


def assistant(agent: Any, model: Any) -> dict[str, Any]:
    return {"id": "msg_a", "type": "assistant", "agent": agent, "model": model, "content": []}


def test_the_newest_assistant_message_names_the_session_s_agent_and_model() -> None:
    """The newest ``assistant`` message's agent and model (its variant too), however many
    inputs came after it."""
    older = assistant("plan", {"id": "m1", "providerID": "p"})
    newer = assistant("build", {"id": "m2", "providerID": "p", "variant": "high"})
    later_input = {"id": "msg_u", "type": "user", "text": "hi"}
    assert session_mode([older, newer, later_input]) == HandoffMode(
        "build", "p", "m2", "high", SESSION_OWN_NOTE
    )


def test_a_transcript_without_a_whole_assistant_message_names_nothing() -> None:
    """No assistant message yet, or one without its agent or model: nothing is taken."""
    assert session_mode([{"id": "msg_u", "type": "user", "text": "hi"}]) is None
    assert session_mode([assistant("build", {"id": "m"})]) is None
    assert session_mode([assistant(None, {"id": "m", "providerID": "p"})]) is None


@pytest_twisted.ensureDeferred
async def test_a_hand_off_records_what_the_session_ran_with() -> None:
    """A session that has run no turn: nothing to record (NO_MODE); once a turn ran, the
    next hand-off records its agent and model."""
    with running() as (url, session), runtime_at(url) as (runtime, _):
        prepared = await runtime.prepare(session.id)
        assert prepared is not None
        with session.turns_held():
            first = await runtime.hand_off(session.id, prepared, TEXTS[:1])
        await runtime.after_hand_off(session.id, prepared)
        prepared = await runtime.prepare(session.id)
        assert prepared is not None
        second = await runtime.hand_off(session.id, prepared, TEXTS[1:])
    assert (first, second) == (NO_MODE, STANDIN_MODE)


def answered(daemon: DaemonProcess, msg_id: str) -> Callable[[], bool]:
    return lambda: stored(daemon, msg_id).receipt() == "answered"


def test_a_daemon_records_a_2x_hand_off_s_agent_and_model(daemons: DaemonFactory) -> None:
    """Through a pigeond process: a message handed off once the session has run a turn
    shows the session's agent and model as the one it was handed to."""
    with standin() as (server, session):
        daemon = start(daemons, server)
        for msg_id in ("msg_1", "msg_2"):
            send(daemon, session.id, msg_id)
            wait_until(answered(daemon, msg_id), PATIENCE_S, f"{msg_id} answered")
        handed = stored(daemon, "msg_2").handed_to()
    assert handed == {
        "agent": AGENT,
        "model": {"providerID": MODEL_REF["providerID"], "modelID": MODEL_REF["id"]},
        "variant": None,
        "note": SESSION_OWN_NOTE,
    }
