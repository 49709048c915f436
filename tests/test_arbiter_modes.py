"""The arbiter names the target's own agent and model in every hand-off."""

from __future__ import annotations

from dataclasses import dataclass, field

from twisted.internet.task import Clock

from pigeond.delivery.opencode_client import FailureKind, OpencodeError
from pigeond.delivery.prompt_mode import DEFAULT_MODE, PromptMode
from pigeond.storage import SwarmRepository
from tests.arbiter_harness import Harness, make_harness

PLAN = PromptMode("plan", "fake", "fake-model-2", "high")
PLAN_FIELDS = {
    "agent": "plan",
    "model": {"providerID": "fake", "modelID": "fake-model-2"},
    "variant": "high",
}


@dataclass
class FixedModes:
    mode: PromptMode = PLAN
    asked: list[tuple[str, str]] = field(default_factory=list)

    async def mode_for(self, session: str, directory: str) -> PromptMode:
        self.asked.append((session, directory))
        return self.mode


@dataclass
class Agents:
    names: set[str] = field(default_factory=lambda: {"build", "plan"})

    async def has(self, agent: str, directory: str) -> bool:
        return agent in self.names


def harness(
    repo: SwarmRepository, clock: Clock, agents: Agents | None = None, batch_max: int = 1
) -> tuple[Harness, FixedModes]:
    modes = FixedModes()
    h = make_harness(repo, clock, modes=modes, agents=agents or Agents(), batch_max=batch_max)
    return h, modes


def handed_to(h: Harness, msg_id: str) -> dict[str, object] | None:
    stored = h.repo.get(msg_id)
    assert stored is not None
    return stored.handed_to()


def test_hand_off_names_the_targets_agent_and_model(repo: SwarmRepository, clock: Clock) -> None:
    """The prompt names the agent, model and variant of the target's latest user message."""
    h, modes = harness(repo, clock)
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    [prompt] = h.opencode.pending()
    assert prompt.mode == PLAN_FIELDS
    assert modes.asked == [("ses_target", "/work/ses_target")]
    h.opencode.succeed_all()
    assert handed_to(h, msg_id) == {
        "agent": "plan", "model": {"providerID": "fake", "modelID": "fake-model-2"},
        "variant": "high", "note": None,
    }  # fmt: skip


def test_a_batch_is_one_prompt_with_one_mode(repo: SwarmRepository, clock: Clock) -> None:
    """A backlog goes out as one prompt naming one agent and model."""
    h, modes = harness(repo, clock, batch_max=10)
    ids = [h.send(msg_id=f"msg_b{i}") for i in range(3)]
    h.arbiter.kick("ses_target")
    [prompt] = h.opencode.pending()
    assert len(prompt.texts) == 3 and prompt.mode == PLAN_FIELDS
    assert len(modes.asked) == 1
    h.opencode.succeed_all()
    assert all(handed_to(h, i) == handed_to(h, ids[0]) for i in ids)


def test_default_mode_names_nothing(repo: SwarmRepository, clock: Clock) -> None:
    """A session with no user message yet gets opencode's defaults, as before."""
    h, modes = harness(repo, clock)
    modes.mode = DEFAULT_MODE
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    [prompt] = h.opencode.pending()
    assert prompt.mode == {}
    h.opencode.succeed_all()
    assert handed_to(h, msg_id) == {"agent": None, "model": None, "variant": None, "note": None}


def test_an_agent_opencode_no_longer_has_is_not_named(repo: SwarmRepository, clock: Clock) -> None:
    """A vanished agent is not the sender's fault: no agent is named, and that is recorded."""
    h, _ = harness(repo, clock, agents=Agents({"build"}))
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    [prompt] = h.opencode.pending()
    assert "agent" not in prompt.mode and prompt.mode["model"]["modelID"] == "fake-model-2"
    h.opencode.succeed_all()
    shown = handed_to(h, msg_id)
    assert shown is not None and shown["agent"] is None
    assert "agent 'plan' no longer exists" in str(shown["note"])
    assert h.state(msg_id) == "handed_off"


def test_a_refused_agent_is_retried_at_once_without_it(repo: SwarmRepository, clock: Clock) -> None:
    """opencode's 400 for the agent costs no attempt: the same prompt goes again naming none."""
    h, _ = harness(repo, clock)
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(OpencodeError("HTTP 400: unknown agent", 400, FailureKind.PERMANENT))
    [retry] = h.opencode.pending()
    assert "agent" not in retry.mode and retry.texts == h.opencode.prompts[0].texts
    h.opencode.succeed_all()
    stored = h.repo.get(msg_id)
    assert stored is not None and (stored.state, stored.attempts) == ("handed_off", 0)
    assert "opencode refused agent 'plan'" in str(stored.handoff_note)


def test_a_400_without_an_agent_still_fails(repo: SwarmRepository, clock: Clock) -> None:
    """When no agent was named, a 400 is the message's own problem, as before."""
    h, modes = harness(repo, clock)
    modes.mode = DEFAULT_MODE
    msg_id = h.send()
    h.arbiter.kick("ses_target")
    h.opencode.fail_all(OpencodeError("HTTP 400: bad", 400, FailureKind.PERMANENT))
    assert h.state(msg_id) == "failed"
    assert len(h.opencode.prompts) == 1
