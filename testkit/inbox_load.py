"""A large inbox and clients that ask for it and never read (tests/test_inbox_memory.py,
bench/abuse_table.py)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from pigeond.storage import SwarmRepository, open_database
from testkit.daemon_process import DaemonProcess
from testkit.messages import new_message

READER = "ses_readerCCCC"


def handed_off(db: Path, payloads: list[str]) -> list[str]:
    """Messages to READER with these payloads, stored and handed off in this order."""
    ids = [f"msg_inbox{i:04d}" for i in range(len(payloads))]
    repo = SwarmRepository(open_database(db))
    try:
        now_ms = int(time.time() * 1000)  # now: the pruner leaves the backlog alone
        for msg_id, payload in zip(ids, payloads, strict=True):
            repo.accept(new_message(READER, msg_id=msg_id, payload=payload), now_ms)
        assert repo.mark_handed_off_many(ids, now_ms) == ids
    finally:
        repo.close()
    return ids


def inbox_request(daemon: DaemonProcess) -> bytes:
    """A raw ``GET /swarm/inbox`` for all of READER's inbox (limit=1000), with the token."""
    return (
        f"GET /swarm/inbox?session={READER}&limit=1000 HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{daemon.port}\r\n"
        f"Authorization: Bearer {daemon.token}\r\n\r\n"
    ).encode("ascii")


def stalled_reader(daemon: DaemonProcess, request: bytes) -> socket.socket:
    """A connection that sends ``request`` (maybe several, pipelined) and reads nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    sock.settimeout(10)
    sock.connect(("127.0.0.1", daemon.port))
    sock.sendall(request)
    return sock


def status_line(sock: socket.socket) -> bytes:
    """The first 12 bytes of the answer (``HTTP/1.1 200``); the rest stays unread."""
    data = b""
    while len(data) < 12:
        chunk = sock.recv(12 - len(data))
        assert chunk, "the daemon closed the connection"
        data += chunk
    return data
