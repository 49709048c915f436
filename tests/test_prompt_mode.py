"""Where a hand-off's agent and model come from: the target's latest user message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.delivery.events import user_message_of
from pigeond.delivery.opencode_client import OpencodeError
from pigeond.delivery.prompt_mode import (
    DEFAULT_MODE,
    NEWEST_READ,
    AgentCatalog,
    ModeTracker,
    PromptMode,
    mode_of_user_message,
)
from tests.http_helpers import result_of

PLAN = {
    "id": "msg_002",
    "role": "user",
    "agent": "plan",
    "model": {"providerID": "fake", "modelID": "fake-model-2"},
}
BUILD = {"id": "msg_004", "role": "user", "agent": "build", "model": PLAN["model"]}
REPLY = {"id": "msg_003", "role": "assistant", "agent": "plan", "modelID": "x", "providerID": "y"}
PLAN_MODE = PromptMode("plan", "fake", "fake-model-2")


@dataclass
class FakeReader:
    infos: list[dict[str, Any]] = field(default_factory=list)
    reads: list[int | None] = field(default_factory=list)

    async def message_infos(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        self.reads.append(limit)
        return self.infos[-limit:] if limit else list(self.infos)


def mode_for(tracker: ModeTracker, session: str = "ses_t") -> PromptMode:
    return result_of(Deferred.fromCoroutine(tracker.mode_for(session, "/w")))


# -- reading opencode's message info ---------------------------------------------------------


def test_a_user_message_gives_agent_and_model() -> None:
    """opencode's user message ``info`` names the agent and the provider and model."""
    assert mode_of_user_message(PLAN) == PLAN_MODE


@pytest.mark.parametrize(
    "info",
    [
        PLAN | {"variant": "high"},
        PLAN | {"model": {"providerID": "fake", "modelID": "fake-model-2", "variant": "high"}},
    ],
)
def test_the_variant_is_kept(info: dict[str, Any]) -> None:
    """A variant, on the message or on its model, is named too."""
    assert mode_of_user_message(info) == PromptMode("plan", "fake", "fake-model-2", "high")


@pytest.mark.parametrize(
    "info",
    [REPLY, {"role": "user"}, {"role": "user", "agent": 7}, "text", None,
     {"role": "user", "agent": "bad name\n"}],
)  # fmt: skip
def test_anything_else_gives_no_mode(info: object) -> None:
    """Assistant messages, missing or odd fields give nothing to copy."""
    assert mode_of_user_message(info) is None


def test_a_half_model_is_left_out() -> None:
    """A model without its provider is not named; the agent still is."""
    info = {"role": "user", "agent": "plan", "model": {"modelID": "m"}}
    assert mode_of_user_message(info) == PromptMode("plan")


def test_body_fields_name_agent_model_and_variant() -> None:
    """The prompt body names what is known and nothing else."""
    mode = PromptMode("plan", "fake", "m", "high")
    assert mode.body_fields() == {
        "agent": "plan",
        "model": {"providerID": "fake", "modelID": "m"},
        "variant": "high",
    }
    assert DEFAULT_MODE.body_fields() == {}
    assert mode.without_agent().body_fields() == {
        "model": {"providerID": "fake", "modelID": "m"},
        "variant": "high",
    }


def test_message_updated_events_carry_user_messages() -> None:
    """A ``message.updated`` event about a user message is read from the global stream."""
    event = {"directory": "/w", "payload": {"type": "message.updated",
             "properties": {"info": PLAN | {"sessionID": "ses_t"}}}}  # fmt: skip
    assert user_message_of(event) == ("ses_t", PLAN | {"sessionID": "ses_t"})
    reply = {"payload": {"type": "message.updated", "properties": {"info": REPLY}}}
    assert user_message_of(reply) is None


# -- the tracker ---------------------------------------------------------------------------


def test_known_mode_is_used_while_the_stream_is_up() -> None:
    """With the event stream connected, a known mode costs no read."""
    reader = FakeReader()
    tracker = ModeTracker(reader, stream_connected=lambda: True)
    tracker.observe("ses_t", PLAN)
    assert mode_for(tracker) == PLAN_MODE
    assert reader.reads == []


def test_a_later_user_message_switches_the_mode() -> None:
    """When the person switches agent, the next hand-off follows."""
    tracker = ModeTracker(FakeReader(), stream_connected=lambda: True)
    tracker.observe("ses_t", PLAN)
    tracker.observe("ses_t", BUILD)
    assert mode_for(tracker).agent == "build"


def test_an_older_message_read_late_does_not_win() -> None:
    """A transcript read that started before the switch does not undo it."""
    tracker = ModeTracker(FakeReader(), stream_connected=lambda: True)
    tracker.observe("ses_t", BUILD)
    tracker.observe_transcript("ses_t", [PLAN, REPLY])
    assert mode_for(tracker).agent == "build"


def test_transcripts_give_the_newest_user_message() -> None:
    """From a transcript, the newest user message counts, not the assistant's reply."""
    tracker = ModeTracker(FakeReader(), stream_connected=lambda: True)
    tracker.observe_transcript("ses_t", [BUILD | {"id": "msg_001"}, PLAN, REPLY])
    assert mode_for(tracker) == PLAN_MODE


def test_nothing_known_reads_the_newest_messages() -> None:
    """With nothing known, the newest messages are read once and remembered."""
    reader = FakeReader([PLAN, REPLY])
    tracker = ModeTracker(reader, stream_connected=lambda: True)
    assert mode_for(tracker) == PLAN_MODE
    assert mode_for(tracker) == PLAN_MODE
    assert reader.reads == [NEWEST_READ]


def test_without_the_stream_every_hand_off_reads() -> None:
    """With the event stream down a switch could go unseen, so the newest messages are read."""
    reader = FakeReader([PLAN])
    tracker = ModeTracker(reader, stream_connected=lambda: False)
    tracker.observe("ses_t", PLAN)
    reader.infos.append(BUILD)
    assert mode_for(tracker).agent == "build"
    assert reader.reads == [NEWEST_READ]


def test_a_session_with_no_user_message_gets_the_defaults() -> None:
    """A fresh session: name nothing, as before."""
    assert mode_for(ModeTracker(FakeReader())) == DEFAULT_MODE


def test_a_long_run_without_user_messages_reads_the_whole_transcript() -> None:
    """When the newest messages hold no user message, the whole transcript is read."""
    reader = FakeReader([PLAN] + [REPLY] * NEWEST_READ)
    assert mode_for(ModeTracker(reader)) == PLAN_MODE
    assert reader.reads == [NEWEST_READ, None]


# -- which agents exist ------------------------------------------------------------------------


@dataclass
class FakeLister:
    names: set[str]
    error: OpencodeError | None = None
    calls: int = 0

    async def agent_names(self, directory: str) -> set[str]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return set(self.names)


def has(catalog: AgentCatalog, agent: str) -> bool:
    return result_of(Deferred.fromCoroutine(catalog.has(agent, "/w")))


def test_catalog_knows_listed_agents_and_caches_them() -> None:
    """A listed agent exists; the list is read once per ttl."""
    lister = FakeLister({"build", "plan"})
    catalog = AgentCatalog(lister, Clock(), ttl_s=60)
    assert has(catalog, "plan") and has(catalog, "build")
    assert lister.calls == 1


def test_catalog_reads_again_for_a_missing_agent() -> None:
    """An agent not in the cached list is looked up afresh (it may have just been added)."""
    lister = FakeLister({"build"})
    catalog = AgentCatalog(lister, Clock())
    assert not has(catalog, "plan")
    lister.names.add("plan")
    assert has(catalog, "plan")


def test_catalog_that_cannot_list_assumes_the_agent_exists() -> None:
    """If opencode cannot list its agents, the agent is named (a 400 still falls back)."""
    catalog = AgentCatalog(FakeLister(set(), OpencodeError("GET /agent: HTTP 404")), Clock())
    assert has(catalog, "plan")
