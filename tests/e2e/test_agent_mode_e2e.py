"""A hand-off keeps the target's agent and model, against the real opencode (1.15.4, 1.18.33).

opencode runs a prompt that names no agent in its ``build`` agent, and drops
the variant (it does keep the session's last model): see
:func:`test_opencode_moves_a_prompt_naming_nothing_to_build`, the behaviour
these tests guard against.  Each session's person first prompts it, as
opencode's UI would, naming an agent and model (``plan`` on
``fake/fake-model-2``, not the default ``fake/fake-model``); what a swarm
message then ran in is read from opencode's own transcript (the user message
holding the envelope, and the assistant message answering it), from the
model the fake LLM was asked for, and from pigeond's record of the hand-off
(``handed_to`` in ``GET /swarm/message/<id>``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from testkit.daemon_process import DaemonFactory, DaemonProcess, isolated_env
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.polling import PATIENCE_S, wait_until
from tests.e2e.test_delivery_e2e import (
    batches_in_transcript,
    first_completion_with,
    post,
    session_completions,
    start_pigeond,
    wait_delivered,
)
from tests.e2e.test_opencode_race import IDLE_TIMEOUT_S, session_with_one_turn

OTHER_MODEL = ("fake", "fake-model-2")
DEFAULT_MODEL = ("fake", "fake-model")
OTHER_MODEL_INFO = {"providerID": "fake", "modelID": "fake-model-2"}
# ran_in(...) of a turn in plan on fake-model-2, and of one in opencode's defaults
IN_PLAN = ("plan", OTHER_MODEL_INFO, "plan", "plan", "fake", "fake-model-2")
DEFAULT_MODEL_INFO = {"providerID": "fake", "modelID": "fake-model"}
IN_DEFAULTS = ("build", DEFAULT_MODEL_INFO, "build", "build", "fake", "fake-model")
PLAN_ON_OTHER_MODEL = {
    "agent": "plan",
    "model": OTHER_MODEL_INFO,
    "variant": None,
    "note": None,
}


def person_prompts(
    server: OpencodeServer,
    llm: FakeLLM,
    session: str,
    directory: str,
    text: str,
    *,
    agent: str | None = None,
    model: tuple[str, str] | None = None,
    variant: str | None = None,
    wait: bool = True,
) -> None:
    """The session's person prompts it (in opencode's UI); with ``wait``, until its turn ended,
    else until the turn has reached the model."""
    before = len(session_completions(llm, session))
    status = server.prompt_async(
        session, directory, text, agent=agent, model=model, variant=variant
    )
    assert status == 204
    if not wait:
        llm.wait_for(lambda _: llm.in_flight("main") > 0, IDLE_TIMEOUT_S, "the person's turn")
        return
    llm.wait_for(
        lambda _: len(session_completions(llm, session)) > before, IDLE_TIMEOUT_S, "a reply"
    )
    server.wait_idle(session, directory, timeout_s=IDLE_TIMEOUT_S)


def planning_session(
    server: OpencodeServer, llm: FakeLLM, directory: str, variant: str | None = None
) -> str:
    """A new session whose person prompted it in ``plan`` on fake-model-2; idle again."""
    session = session_with_one_turn(
        server, llm, directory, "let us plan", agent="plan", model=OTHER_MODEL, variant=variant
    )
    server.wait_idle(session, directory, timeout_s=IDLE_TIMEOUT_S)
    return session


def envelope_exchange(
    server: OpencodeServer, session: str, msg_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``info`` of the (newest) user message holding ``msg_id``'s envelope that has a reply,
    and of that reply."""
    transcript = server.messages(session)
    messages = [m["info"] for m in transcript]
    holding = {
        m["info"]["id"]
        for m in transcript
        if m["info"].get("role") == "user"
        and any(f'msg_id="{msg_id}"' in str(p.get("text", "")) for p in m["parts"])
    }
    for reply in reversed(messages):
        if reply.get("role") == "assistant" and reply.get("parentID") in holding:
            user = next(m for m in messages if m["id"] == reply["parentID"])
            return user, reply
    raise AssertionError(f"no reply to the envelope of {msg_id} in {session}: {messages}")


def ran_in(server: OpencodeServer, session: str, msg_id: str) -> tuple[object, ...]:
    """(user agent, user model, reply agent, reply mode, reply provider, reply model)."""
    user, reply = envelope_exchange(server, session, msg_id)
    return (
        user.get("agent"),
        user.get("model"),
        reply.get("agent"),
        reply.get("mode"),
        reply.get("providerID"),
        reply.get("modelID"),
    )


def handed_to(daemon: DaemonProcess, msg_id: str) -> Any:
    """``handed_to`` of ``GET /swarm/message/<msg_id>``, once the hand-off is recorded."""

    def fetch() -> Any:
        request = urllib.request.Request(
            f"{daemon.base_url}/swarm/message/{msg_id}", headers=daemon.auth_headers
        )
        with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
            assert response.status == 200
            return json.loads(response.read())["handed_to"]

    wait_until(lambda: fetch() is not None, PATIENCE_S, f"the hand-off record of {msg_id}")
    return fetch()


def shown_columns(db: Path, msg_id: str, home: Path) -> dict[str, str]:
    """The ``column  value`` lines ``pigeon show`` prints for ``msg_id``."""
    pigeon = Path(sys.executable).parent / "pigeon"
    result = subprocess.run(
        [str(pigeon), "show", "--db", str(db), msg_id],
        env=isolated_env(home),
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=True,
    )
    head = result.stdout.split("\n\n", 1)[0]
    return dict(line.split(None, 1) for line in head.splitlines() if " " in line.strip())


def test_opencode_moves_a_prompt_naming_nothing_to_build(
    opencode_any: OpencodeServer, fake_llm: FakeLLM
) -> None:
    """opencode runs a prompt naming no agent in build, without the variant: what pigeond avoids."""
    server, directory = opencode_any, opencode_any.dirs["dirA"]
    session = planning_session(server, fake_llm, directory, variant="high")
    person_prompts(server, fake_llm, session, directory, "a prompt naming nothing")
    users = [m["info"] for m in server.messages(session) if m["info"]["role"] == "user"]
    assert [(u["agent"], u["model"]) for u in users] == [
        ("plan", {"providerID": "fake", "modelID": "fake-model-2", "variant": "high"}),
        ("build", {"providerID": "fake", "modelID": "fake-model-2"}),
    ]


def test_hand_off_keeps_the_persons_agent_and_model(
    opencode_any: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """A session its person prompted in plan on fake-model-2 gets a swarm message in plan on it."""
    server, directory = opencode_any, opencode_any.dirs["dirA"]
    session = planning_session(server, fake_llm, directory)
    db = tmp_path / "p.db"
    # started after the person's prompt: pigeond learns the mode by reading the transcript
    daemon = start_pigeond(daemons, db, server.url)
    msg_id = post(daemon, {"from": "ses_peer", "to": session, "payload": "review my plan"})
    wait_delivered(server, session, [msg_id], directory)

    assert ran_in(server, session, msg_id) == IN_PLAN
    turn = first_completion_with(session_completions(fake_llm, session), msg_id)
    assert turn.model == "fake-model-2", "the fake LLM was asked for the person's model"
    assert handed_to(daemon, msg_id) == PLAN_ON_OTHER_MODEL
    shown = shown_columns(db, msg_id, tmp_path / "cli-home")
    assert [shown[c] for c in ("handoff_agent", "handoff_provider", "handoff_model")] == [
        "plan", "fake", "fake-model-2",
    ]  # fmt: skip
    assert (shown["handoff_variant"], shown["handoff_note"]) == ("-", "-")


def test_hand_off_follows_the_persons_switch_to_build(
    opencode_any: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """After the person switches from plan to build on the default model, swarm messages follow."""
    server, directory = opencode_any, opencode_any.dirs["dirB"]
    # running all along: pigeond learns of the switch from opencode's event stream
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    session = planning_session(server, fake_llm, directory)
    in_plan = post(daemon, {"from": "ses_peer", "to": session, "payload": "while planning"})
    wait_delivered(server, session, [in_plan], directory)
    assert ran_in(server, session, in_plan) == IN_PLAN
    assert handed_to(daemon, in_plan) == PLAN_ON_OTHER_MODEL

    person_prompts(
        server, fake_llm, session, directory, "go ahead", agent="build", model=DEFAULT_MODEL
    )
    in_build = post(daemon, {"from": "ses_peer", "to": session, "payload": "while building"})
    wait_delivered(server, session, [in_build], directory)

    assert ran_in(server, session, in_build) == IN_DEFAULTS
    assert handed_to(daemon, in_build) == {
        "agent": "build",
        "model": DEFAULT_MODEL_INFO,
        "variant": None,
        "note": None,
    }


def test_fresh_session_gets_opencodes_defaults(
    opencode_any: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """A session with no user message yet: pigeond names nothing; opencode: build, fake-model."""
    server, directory = opencode_any, opencode_any.dirs["dirC"]
    session = server.create_session(directory, "fresh")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    msg_id = post(daemon, {"from": "ses_peer", "to": session, "payload": "hello, new one"})
    wait_delivered(server, session, [msg_id], directory)

    assert ran_in(server, session, msg_id) == IN_DEFAULTS
    assert handed_to(daemon, msg_id) == {
        "agent": None,
        "model": None,
        "variant": None,
        "note": None,
    }


def test_hand_off_keeps_the_persons_variant(
    opencode_any: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """The variant the person picked (``high``) is named in the hand-off and kept by opencode."""
    server, directory = opencode_any, opencode_any.dirs["dirD"]
    session = planning_session(server, fake_llm, directory, variant="high")
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    msg_id = post(daemon, {"from": "ses_peer", "to": session, "payload": "think hard"})
    wait_delivered(server, session, [msg_id], directory)

    user, reply = envelope_exchange(server, session, msg_id)
    assert user["model"] == {"providerID": "fake", "modelID": "fake-model-2", "variant": "high"}
    assert (reply["agent"], reply["modelID"], reply.get("variant")) == (
        "plan", "fake-model-2", "high",
    )  # fmt: skip
    assert handed_to(daemon, msg_id) == PLAN_ON_OTHER_MODEL | {"variant": "high"}


def test_backlog_during_the_persons_turn_goes_out_as_one_prompt_in_its_mode(
    opencode_any: OpencodeServer, fake_llm: FakeLLM, daemons: DaemonFactory, tmp_path: Path
) -> None:
    """Messages sent while the person's plan turn runs go out after it in one prompt, in plan."""
    server, directory = opencode_any, opencode_any.dirs["dirA"]
    session = planning_session(server, fake_llm, directory)
    daemon = start_pigeond(daemons, tmp_path / "p.db", server.url)
    with fake_llm.turns_held():
        person_prompts(
            server, fake_llm, session, directory, "a long think",
            agent="plan", model=OTHER_MODEL, wait=False,
        )  # fmt: skip
        sent = [post(daemon, {"from": f"ses_peer{n}", "to": session, "payload": f"note {n}"})
                for n in range(3)]  # fmt: skip
    wait_delivered(server, session, sent, directory)

    assert batches_in_transcript(server, session) == [sent], "one prompt, in the order sent"
    assert ran_in(server, session, sent[0]) == IN_PLAN
    envelope_turns = [
        c for c in session_completions(fake_llm, session) if 'msg_id="' in c.last_user_text
    ]
    assert [c.model for c in envelope_turns] == ["fake-model-2"]
    assert [handed_to(daemon, m) for m in sent] == [PLAN_ON_OTHER_MODEL] * 3
