"""The push path: the real Claude Code 2.1.332, interactive under tmux, started with
pigeond's channel (``pigeon-mcp --channel``) and left idle, is woken by a message and
answers it, with no prompt typed; on the fake model, offline."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeond.delivery.claude_runtime import ON_CHANNEL
from pigeond.model import RECEIPT_STAGES
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_opencode import FakeOpencode
from testkit.polling import Budget, wait_until
from tests.claude_code import ClaudeCode
from tests.claude_tui import DeadEndProxy
from tests.e2e.claude_member import HOOK, ClaudeMember, send, stored
from tests.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.slow
# The whole test, start to end, on a loaded machine; every wait gets what is left of it.
BUDGET_S = 60.0
FRAMING = '<channel source="pigeon" from="pigeond">\n'


@pytest.fixture
def daemon(daemons: DaemonFactory, tmp_path: Path, fake: FakeOpencode) -> DaemonProcess:
    """pigeond with delivery on (an opencode beside it that this test never uses)."""
    return daemons.start(tmp_path / "p.db", opencode_url=fake.url)


@pytest.fixture
def idle_session(
    claude: ClaudeCode, tmp_path: Path, daemon: DaemonProcess, budget: Budget
) -> Iterator[ClaudeMember]:
    """A Claude Code session with pigeond's hooks and channel, started and left idle: its
    SessionStart hook has registered it and its channel is listening."""
    member = ClaudeMember(claude, tmp_path / "project", daemon)
    member.install_hooks()
    with DeadEndProxy() as proxy:
        tui = member.start_tui(proxy, tmp_path, budget.left())
        try:
            tui.wait_logged(f"[{HOOK} session-start] finished with status 0",
                            "the SessionStart hook", budget.left())  # fmt: skip
            # "registered", or "skipped: <why>" (an MCP server without the capability ...)
            said = tui.wait_logged('MCP server "pigeon": Channel notifications',
                                   "the channel's fate", budget.left())  # fmt: skip
            assert said.endswith("Channel notifications registered"), said
            yield member
        finally:
            tui.close()


@pytest.fixture
def budget() -> Budget:
    return Budget(BUDGET_S)


def channel_calls(fake: FakeAnthropic, msg_id: str) -> list[str]:
    """The last user texts of the model calls that carry the envelope in its framing."""
    opening = re.compile(f'^<swarm_message [^>\n]*msg_id="{msg_id}"', re.MULTILINE)
    return [
        text
        for texts in fake.last_user_texts()
        for text in texts
        if text.startswith(FRAMING) and opening.search(text)
    ]


def test_an_idle_session_is_woken_by_a_message_and_answers_it(
    idle_session: ClaudeMember, daemon: DaemonProcess,
    fake_anthropic: FakeAnthropic, budget: Budget,
) -> None:  # fmt: skip
    """Sent to the idle session: pushed on its channel, the session runs a turn of its own
    (the model is given the envelope in the channel's framing, and nothing typed), the
    envelope is in the transcript once, and the receipt goes seen, then answered."""
    member = idle_session
    assert fake_anthropic.model_calls() == [], "the session ran a turn before any message"
    msg_id = send(daemon, member.id, "wake up and answer")
    [text] = wait_until(lambda: channel_calls(fake_anthropic, msg_id), budget.left(),
                        "the model called with the pushed envelope")  # fmt: skip
    assert text.endswith("wake up and answer\n</swarm_message>\n</channel>"), text
    seen: list[str] = []

    def answered() -> bool:
        seen.append(stored(daemon, msg_id)["receipt"])
        return seen[-1] == "answered"

    wait_until(answered, budget.left(), "the receipt answered")
    final = stored(daemon, msg_id)
    stages = [RECEIPT_STAGES.index(stage) for stage in seen]
    assert stages == sorted(stages), seen  # never back
    assert final["handed_off_at"] <= final["verified_at"] <= final["answered_at"], final
    assert final["handed_to"]["note"] == ON_CHANNEL
    assert all(t.startswith(FRAMING) for ts in fake_anthropic.last_user_texts() for t in ts)
    [pushed] = member.pushed()
    assert pushed == text
    homes = [t for t in member.user_texts() if f'msg_id="{msg_id}"' in t]
    assert homes == [text], "the envelope is in the transcript once, as pushed"
