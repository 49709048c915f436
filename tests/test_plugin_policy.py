"""The plugin's swarm_policy tool, and swarm_send meeting a refusing target, in opencode's
own runtime (the daemon stubbed)."""

from __future__ import annotations

import re
from typing import Any

from pigeond.consent import MAX_ALLOW, POLICIES
from tests.plugin_runner import PLUGIN, SESSION, run_tool


def policy_answer(policy: str, held: int = 0, allow: list[str] | None = None) -> dict[str, Any]:
    """The daemon's 200 to GET /swarm/policy/<session>."""
    body = {"session": SESSION, "policy": policy, "allow": allow or [], "updated_at": 1,
            "updated_by": SESSION, "held": held}  # fmt: skip
    return {"status": 200, "body": body}


def changed(policy: str, held: int = 0, released: int = 0) -> dict[str, Any]:
    """The daemon's 200 to PUT /swarm/policy/<session>."""
    return {
        "status": 200,
        "body": policy_answer(policy)["body"] | {"held": held, "released": released},
    }


def test_the_plugin_declares_pigeonds_policies() -> None:
    """The plugin's POLICIES and MAX_ALLOW are pigeond.consent's."""
    source = PLUGIN.read_text()
    declared = re.search(r"const POLICIES = \[([^\]]*)\]", source)
    assert declared is not None
    assert tuple(re.findall(r'"([a-z]+)"', declared.group(1))) == POLICIES
    assert f"const MAX_ALLOW = {MAX_ALLOW};" in source


def test_swarm_policy_sets_the_calling_session_s_own_policy() -> None:
    """The PUT names the calling session in the path and as ``by``, never an argument."""
    run = run_tool(
        "swarm_policy", {"policy": "hold", "allow": ["ses_lead"]},
        replies=[changed("hold", held=2), policy_answer("hold", 2, ["ses_lead"])],
    )  # fmt: skip
    assert run.ok, run.error
    put = run.requests[0]
    assert (put["method"], put["url"]) == ("PUT", f"http://127.0.0.1:9/swarm/policy/{SESSION}")
    assert put["body"] == {
        "policy": "hold", "allow": ["ses_lead"], "by": SESSION, "call_id": "call_1",
    }  # fmt: skip
    assert run.output == (
        "your policy is now hold: 2 message(s) held, 0 released\n"
        "policy: hold; always let through: ses_lead; steering: off; held now: 2"
    )


def test_swarm_policy_release_lets_the_held_messages_in() -> None:
    """release: true posts to /swarm/release/<own session> and says how many came free."""
    released = {"status": 200, "body": {"session": SESSION, "released": 3}}
    run = run_tool("swarm_policy", {"release": True}, replies=[released, policy_answer("hold")])
    assert run.ok, run.error
    assert run.posts[0]["url"] == f"http://127.0.0.1:9/swarm/release/{SESSION}"
    assert run.posts[0]["body"] == {"call_id": "call_1"}
    assert run.output is not None and run.output.startswith("released 3 held message(s)")


def test_swarm_policy_takes_no_session_argument() -> None:
    """A session argument is refused before anything is sent: a session sets only its own."""
    run = run_tool("swarm_policy", {"policy": "hold", "session": "ses_other"})
    assert run.error is not None and "unknown argument 'session'" in run.error
    assert run.requests == []


def test_an_unknown_policy_is_refused_before_sending() -> None:
    """The policy must be one of pigeond's."""
    run = run_tool("swarm_policy", {"policy": "maybe"})
    assert run.error is not None and "'policy' must be one of accept, hold, refuse" in run.error
    assert run.requests == []


def test_swarm_send_to_a_refusing_target_is_a_clear_error() -> None:
    """The daemon's 403 naming the policy becomes an error saying nothing was sent."""
    refused = {"status": 403, "body": {
        "error": "ses_b refuses messages from ses_callerAAAA: its inbound policy is refuse",
        "policy": "refuse"}}  # fmt: skip
    run = run_tool("swarm_send", {"to": "ses_b", "payload": "hi"}, replies=[refused])
    assert run.error is not None
    assert run.error.startswith(
        "swarm_send: the message was NOT sent: ses_b refuses messages from ses_callerAAAA:"
        " its inbound policy is refuse"
    )
