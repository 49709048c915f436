"""A real pigeond through an outage of a real (fake) opencode on loopback: a message sent
while opencode is stopped goes out within a few seconds of its restart, and the outage is
two lines of the daemon's log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.fake_opencode import FakeOpencode
from testkit.polling import wait_until

pytestmark = pytest.mark.slow

# generous for a loaded machine, and still far below the 30 s pigeond once waited
RETURN_TIMEOUT_S = 15.0
TARGET = "ses_target"


@pytest.fixture
def daemons(tmp_path: Path, fake: FakeOpencode) -> Iterator[DaemonFactory]:
    # depends on ``fake`` so the daemons stop before the fake opencode does
    factory = DaemonFactory(tmp_path)
    yield factory
    factory.close()


def send(daemon: DaemonProcess, payload: str) -> str:
    status, answer = daemon.request_json(
        "POST", "/swarm/send", {"from": "ses_sender", "to": TARGET, "payload": payload}
    )
    assert status == 202, answer
    msg_id: str = answer["msg_id"]
    return msg_id


def opencode_state(daemon: DaemonProcess) -> str:
    status, answer = daemon.request_json("GET", "/health")
    assert status == 200, answer
    state: str = answer["opencode"]
    return state


def delivered(fake: FakeOpencode, msg_id: str) -> bool:
    return any(c.status == 204 and c.msg_id == msg_id for c in fake.prompt_calls(TARGET))


def test_a_message_sent_during_an_outage_goes_soon_after_opencode_returns(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory
) -> None:
    """opencode stops, a message is sent, opencode starts again on its port: the message is
    handed off within seconds, and the log says the outage once as it starts and once as
    it ends."""
    fake.add_session(TARGET)
    daemon = daemons.start(tmp_path / "p.db", opencode_url=fake.url)
    first = send(daemon, "before")
    wait_until(lambda: delivered(fake, first), RETURN_TIMEOUT_S, "the first hand-off")
    port = fake.port
    fake.stop()
    during = send(daemon, "during the outage")
    wait_until(lambda: opencode_state(daemon) == "unreachable", 10, "/health to say it")
    fake.start(port=port)
    wait_until(lambda: delivered(fake, during), RETURN_TIMEOUT_S, "the hand-off after the return")
    wait_until(lambda: "answers again after" in daemon.output(), 10, "the outage's end")
    lines = daemon.output().splitlines()
    assert len([line for line in lines if "unreachable (" in line]) == 1
    assert len([line for line in lines if "answers again after" in line]) == 1
    assert opencode_state(daemon) == "ok"
