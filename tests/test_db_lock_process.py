"""A real pigeond while another process holds SQLite's write lock: the reactor never waits.

``sqlite3`` in a terminal, or a second tool, can hold ``BEGIN IMMEDIATE`` on the
daemon's database.  Writes then wait up to the busy timeout (5 s) and fail with a
503; everything else (``/health``, reads) goes on, because database work runs off
the reactor thread (pigeond/storage/database.py).
"""

from __future__ import annotations

import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.daemon_process import DaemonFactory, DaemonProcess
from testkit.polling import PATIENCE_S, wait_until
from testkit.raw_http import health_probe

pytestmark = pytest.mark.slow

SEND = {"from": "ses_sender", "to": "ses_target", "payload": "while the lock is held"}
# well under the 5 s busy timeout: an answer that waited for the lock would miss it
UNLOCKED_ANSWER_S = 2.0


@pytest.fixture
def daemon(daemons: DaemonFactory, tmp_path: Path) -> DaemonProcess:
    return daemons.start(tmp_path / "state" / "pigeond.db", opencode_url="")


@pytest.fixture
def write_lock(daemon: DaemonProcess) -> Iterator[sqlite3.Connection]:
    """Another process's connection holding the write lock until the test commits it."""
    conn = sqlite3.connect(daemon.db, isolation_level=None, timeout=PATIENCE_S)
    conn.execute("BEGIN IMMEDIATE")
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


def send_in_background(
    daemon: DaemonProcess, body: dict[str, Any]
) -> tuple[threading.Thread, list[tuple[int, Any]]]:
    """Start a send on its own thread; its (status, answer) lands in the returned list."""
    answers: list[tuple[int, Any]] = []
    thread = threading.Thread(
        target=lambda: answers.append(daemon.request_json("POST", "/swarm/send", body, 30)),
        daemon=True,
    )
    thread.start()
    return thread, answers


def test_health_answers_while_a_send_waits_for_the_lock(
    daemon: DaemonProcess, write_lock: sqlite3.Connection
) -> None:
    """With a send waiting on the lock, /health still answers; the send is stored once the
    lock goes within the busy timeout."""
    sending, answers = send_in_background(daemon, SEND | {"msg_id": "msg_1"})
    for _ in range(5):
        response, _elapsed = health_probe(daemon.port, timeout_s=UNLOCKED_ANSWER_S)
        assert response is not None and response.status == 200
        assert response.json()["ok"] is True
    assert answers == []  # the send is still waiting for the lock
    write_lock.execute("COMMIT")
    sending.join(timeout=PATIENCE_S)
    assert [status for status, _ in answers] == [202]


def test_a_send_gets_503_after_the_busy_timeout_then_202(
    daemon: DaemonProcess, write_lock: sqlite3.Connection
) -> None:
    """Past the busy timeout the send is a 503 (nothing stored); once the lock goes, a 202."""
    status, answer = daemon.request_json("POST", "/swarm/send", SEND | {"msg_id": "msg_1"}, 30)
    assert status == 503
    assert "storage unavailable" in answer["error"] and "locked" in answer["error"]
    write_lock.execute("COMMIT")
    status, answer = daemon.request_json("POST", "/swarm/send", SEND | {"msg_id": "msg_1"})
    assert (status, answer["msg_id"]) == (202, "msg_1")
    assert [m.msg_id for m in daemon.stored_messages()] == ["msg_1"]


def test_reads_answer_while_the_lock_is_held(
    daemon: DaemonProcess, write_lock: sqlite3.Connection
) -> None:
    """The inbox and a message's state are reads: they answer while writes wait."""
    status, answer = daemon.request_json(
        "GET", "/swarm/inbox?session=ses_target", timeout_s=UNLOCKED_ANSWER_S
    )
    assert (status, answer["messages"]) == (200, [])
    status, answer = daemon.request_json(
        "GET", "/swarm/message/msg_none", timeout_s=UNLOCKED_ANSWER_S
    )
    assert status == 404


def test_a_stop_answers_the_send_under_way(
    daemon: DaemonProcess, write_lock: sqlite3.Connection
) -> None:
    """SIGTERM while a send waits for the lock: the daemon stops listening at once, but the
    send still gets its 202 once the lock goes, and the daemon then exits cleanly."""
    sending, answers = send_in_background(daemon, SEND | {"msg_id": "msg_1"})
    assert wait_for_send_to_wait(daemon)
    daemon.terminate()
    wait_until(lambda: refused(daemon.port), PATIENCE_S, "connections refused", every_s=0.05)
    write_lock.execute("COMMIT")
    sending.join(timeout=PATIENCE_S)
    assert [status for status, _ in answers] == [202], daemon.output()
    assert daemon.wait() == 0
    assert [m.msg_id for m in daemon.stored_messages()] == ["msg_1"]


def wait_for_send_to_wait(daemon: DaemonProcess) -> bool:
    """Whether the daemon has the send (its request fully read): a /health answered after
    the send was made is answered after the send was read."""
    response, _ = health_probe(daemon.port, timeout_s=PATIENCE_S)
    return response is not None and response.status == 200


def refused(port: int) -> bool:
    """Whether a connection to ``port`` is refused (the daemon stopped listening)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S).close()
    except ConnectionRefusedError:
        return True
    return False
