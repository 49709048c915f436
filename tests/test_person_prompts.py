"""What counts as a person's own prompt in a transcript (pigeond/delivery/person_prompts.py,
claude_transcript.person_prompt_at): the hop brake's reset, on recorded shapes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from twisted.internet.defer import Deferred

from pigeond.delivery.claude_transcript import person_prompt_at, read_tail
from pigeond.delivery.person_prompts import PersonPromptsByRuntime, newest_person_prompt
from testkit.messages import assistant_entry, user_entry
from tests.claude_transcripts import FIXTURES
from tests.http_helpers import result_of

ENVELOPE = '<swarm_message v="1" kind="chat" from="ses_a" msg_id="msg_1">\nhi\n</swarm_message>'


def created(entry: dict[str, Any], at: int) -> dict[str, Any]:
    entry["info"]["time"]["created"] = at
    return entry


def claude_prompts(name: str) -> list[int]:
    return [t for t in map(person_prompt_at, read_tail(FIXTURES / f"{name}.jsonl")) if t]


def test_opencode_a_typed_prompt_is_a_persons() -> None:
    """The newest user message with words of its own, by its creation time."""
    messages = [
        created(user_entry("m1", "please review"), 100),
        assistant_entry("m2", "m1"),
        created(user_entry("m3", "and then deploy"), 300),
    ]
    assert newest_person_prompt(messages) == 300


def test_opencode_an_envelope_is_no_persons_prompt() -> None:
    """A user message that is a swarm envelope (any of its parts) is pigeond's, not a person's."""
    messages = [
        created(user_entry("m1", "start"), 100),
        created(user_entry("m2", ENVELOPE), 200),
        created(user_entry("m3", ENVELOPE, "and a note"), 300),
    ]
    assert newest_person_prompt(messages) == 100
    assert newest_person_prompt(messages[1:]) is None


def test_opencode_synthetic_parts_are_no_words() -> None:
    """A user message of synthetic parts only (opencode's own) is no prompt."""
    message = created(user_entry("m1", "x"), 100)
    message["parts"][0]["synthetic"] = True
    assert newest_person_prompt([message]) is None


def test_claude_a_typed_prompt_is_a_persons() -> None:
    """plain.jsonl: the prompt "hello", at its timestamp."""
    stamp = datetime(2026, 12, 4, 17, 46, 25, 305_000, tzinfo=UTC)
    assert claude_prompts("plain") == [int(stamp.timestamp() * 1000)]


def test_claude_hook_feedback_and_channel_pushes_are_not() -> None:
    """A Stop hook's envelope and a channel's push are Claude Code's, not a person's."""
    assert len(claude_prompts("stop_block")) == 1  # the prompt "hello" only
    assert claude_prompts("channel") == []


def test_claude_a_tool_result_is_not() -> None:
    """mcp_tool.jsonl: only the typed prompt, not the tool's result quoting an envelope."""
    assert len(claude_prompts("mcp_tool")) == 1


def test_a_session_of_no_known_runtime_is_unknown() -> None:
    """Without a reader for its runtime (or an id of none), the answer is None."""
    prompts = PersonPromptsByRuntime()
    for session in ("ses_a", "mcp_builder", "not-a-session"):
        assert result_of(Deferred.fromCoroutine(prompts.last_person_prompt(session))) is None
