"""A person's own prompt in an opencode 2.x transcript resets a thread's hops, as in a
1.x's (pigeond/delivery/person_prompts.py): what counts, how the reader switches to the
2.x transcript, and a pigeond process whose hop hold a person's prompt in a session of
the 2.x stand-in lifts."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from pigeond.delivery.person_prompts import (
    RECENT_MESSAGES,
    OpencodePersonPrompts,
    newest_person_prompt,
)
from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.polling import PATIENCE_S, wait_until
from tests.http_helpers import result_of
from tests.opencode_v2_reads_helpers import StubV2, found_2x, person_prompt
from tests.test_opencode_v2_daemon import standin, start
from tests.test_tool_call_reader import StubOpencode

ENVELOPE = '<swarm_message v="1" kind="chat" from="ses_a" msg_id="msg_1">\nhi\n</swarm_message>'
SESSION = "ses_known"


def v2_input(kind: str, text: str, at: int) -> dict[str, Any]:
    """An input of a 2.x transcript (``SessionMessageUser`` or ``…Synthetic``)."""
    return {"id": f"msg_{at}", "time": {"created": at}, "text": text, "type": kind}


def test_a_typed_2x_prompt_is_a_persons() -> None:
    """The newest user input with words, by its creation time; assistant steps are not."""
    messages = [
        v2_input("user", "please review", 100),
        {"id": "msg_a", "time": {"created": 200}, "type": "assistant", "content": []},
        v2_input("user", "and then deploy", 300),
    ]
    assert newest_person_prompt(messages, v2=True) == 300


def test_pigeond_s_own_2x_input_is_no_persons_prompt() -> None:
    """Synthetic input never; a user input with an envelope at a line's start (pigeond's
    batch through /prompt, envelopes joined by blank lines) is pigeond's; no words either."""
    messages = [
        v2_input("user", "start", 100),
        v2_input("synthetic", "a person never writes synthetic input", 200),
        v2_input("user", ENVELOPE, 300),
        v2_input("user", f"{ENVELOPE}\n\n{ENVELOPE}", 400),
        v2_input("user", "  \n", 500),
    ]
    assert newest_person_prompt(messages, v2=True) == 100
    assert newest_person_prompt(messages[1:], v2=True) is None


def test_a_2x_session_s_prompts_are_read_through_the_2x_client() -> None:
    """Once the 1.x read finds a 2.x, the session's 2.x transcript is read by its id."""
    v2 = StubV2([v2_input("user", "go on", 700)])
    prompts = OpencodePersonPrompts(found_2x(), found_2x(), v2)
    assert result_of(Deferred.fromCoroutine(prompts.last_person_prompt(SESSION))) == 700
    assert v2.asked == [(SESSION, RECENT_MESSAGES)]


def test_a_1x_session_s_prompts_are_never_read_as_a_2x() -> None:
    """A server answering as a 1.x: its transcript, and the 2.x client asked nothing."""
    v1, v2 = StubOpencode([]), StubV2([v2_input("user", "go on", 700)])
    prompts = OpencodePersonPrompts(v1, v1, v2)
    assert result_of(Deferred.fromCoroutine(prompts.last_person_prompt(SESSION))) is None
    assert v2.asked == []


def send(daemon: DaemonProcess, sender: str, target: str, msg_id: str, **more: Any) -> Any:
    body = {"from": sender, "to": target, "payload": f"hello {msg_id}", "msg_id": msg_id, **more}
    status, answer = daemon.request_json("POST", "/swarm/send", body)
    assert status == 202, answer
    return answer


def test_a_persons_2x_prompt_lifts_the_hop_hold(daemons: DaemonFactory) -> None:
    """Two sessions of a 2.x at a limit of 2 hops: the third send is held although the
    target's transcript holds pigeond's own inputs; after a person's prompt in one of
    them, the next send goes."""
    with standin() as (server, first):
        second = server.create_session()
        daemon = start(daemons, server, "stand-in-secret", "--max-hops-per-thread", "2")
        thread = send(daemon, first.id, second.id, "msg_1")["thread"]
        send(daemon, second.id, first.id, "msg_2", thread=thread)
        assert send(daemon, first.id, second.id, "msg_3", thread=thread)["held"]["brake"] == "hops"
        person_prompt(first, "carry on, both of you")
        wait_until(lambda: first.messages and first.messages[-1]["type"] == "assistant",
                   PATIENCE_S, "the person's turn")  # fmt: skip
        assert "held" not in send(daemon, second.id, first.id, "msg_4", thread=thread)
