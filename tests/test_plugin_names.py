"""The plugin's swarm_name tool, and swarm_send to "@name", in opencode's own runtime."""

from __future__ import annotations

from typing import Any

import pytest

from tests.plugin_runner import SESSION, accepted, run_tool


def claimed(name: str, released: str | None = None) -> dict[str, Any]:
    """The daemon's 200 to a claim."""
    body = {"name": name, "session": SESSION, "previous": None, "released": released}
    return {"status": 200, "body": body}


def test_swarm_name_claims_the_name_for_the_calling_session() -> None:
    """The claim names the calling session itself, never one given as an argument."""
    run = run_tool("swarm_name", {"name": "reviewer"}, replies=[claimed("reviewer")])
    assert run.ok, run.error
    [post] = run.posts
    assert post["url"] == "http://127.0.0.1:9/swarm/names"
    assert post["body"] == {"name": "reviewer", "session": SESSION, "call_id": "call_1"}
    assert run.output == 'you are now reviewer: others reach you with swarm_send to "@reviewer"'


@pytest.mark.parametrize("call_id", [None, "", "call with spaces"])
def test_without_a_usable_call_id_the_claim_names_none(call_id: str | None) -> None:
    """opencode gave no call id pigeond could take: the claim goes without one (pigeond
    then finds the call by its input)."""
    run = run_tool("swarm_name", {"name": "reviewer"}, replies=[claimed("reviewer")],
                   call_id=call_id)  # fmt: skip
    assert run.ok, run.error
    assert run.posts[0]["body"] == {"name": "reviewer", "session": SESSION}


def test_swarm_name_takes_no_session_argument() -> None:
    """A session argument is refused before anything is sent: a session names only itself."""
    run = run_tool("swarm_name", {"name": "reviewer", "session": "ses_other"})
    assert run.error is not None and "unknown argument 'session'" in run.error
    assert run.posts == []


def test_swarm_name_says_which_name_was_given_up() -> None:
    """Claiming a second name reports the first, which the session no longer holds."""
    run = run_tool("swarm_name", {"name": "builder-2"}, replies=[claimed("builder-2", "reviewer")])
    assert run.output is not None and run.output.endswith("(you gave up reviewer)")


def test_a_name_held_by_a_live_session_is_a_tool_error() -> None:
    """The daemon's 409 becomes an error naming the holder and what to do."""
    held = {"status": 409, "body": {"error": "held", "name": "reviewer", "session": "ses_other"}}
    run = run_tool("swarm_name", {"name": "reviewer"}, replies=[held])
    assert run.error == (
        "swarm_name: the name reviewer is held by ses_other, a live session; choose another name"
    )


@pytest.mark.parametrize("name", ["Reviewer", "@reviewer", "", "-x", "a" * 65])
def test_a_malformed_name_is_refused_before_sending(name: str) -> None:
    """Names follow pigeond's pattern; anything else never reaches the daemon."""
    run = run_tool("swarm_name", {"name": name})
    assert run.error is not None and run.error.startswith("swarm_name: 'name'")
    assert run.posts == []


def test_swarm_send_sends_to_a_name() -> None:
    """to: "@reviewer" goes to the daemon as it is, which resolves it."""
    run = run_tool("swarm_send", {"to": "@reviewer", "payload": "hi"}, replies=[accepted()])
    assert run.ok, run.error
    assert run.posts[0]["body"]["to"] == "@reviewer"


def test_swarm_send_to_a_name_nobody_holds_says_so() -> None:
    """The daemon's 404 for an unheld name is an error that names the name, not a session."""
    gone = {"status": 404, "body": {"error": "nobody holds the name @ghost"}}
    run = run_tool("swarm_send", {"to": "@ghost", "payload": "hi"}, replies=[gone])
    assert run.error is not None
    assert run.error.startswith(
        "swarm_send: the message was NOT sent: nobody holds the name @ghost"
    )
