"""TCP ports on loopback for tests that must be refused."""

from __future__ import annotations

import socket


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then let go)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
