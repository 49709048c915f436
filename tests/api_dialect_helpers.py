"""A daemon on a Clock whose opencode is :mod:`tests.opencode_v2_standin` in memory
(StubTreq): what the tests of which API opencode speaks share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from treq.testing import StubTreq
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.service.daemon import Daemon
from tests.http_helpers import daemon_call
from tests.openapi_check import check_body
from tests.opencode_v2_standin import OpencodeV2StandIn
from tests.storage_helpers import clock_daemon, repo_of

URL = "http://127.0.0.1:4096"
OUTAGE_RETRY_S = 30


def build(tmp_path: Path, clock: Clock, opencode: OpencodeV2StandIn, **config: Any) -> Daemon:
    defaults: dict[str, Any] = {
        "db": str(tmp_path / "p.db"),
        "delivery": "call",
        "opencode_url": URL,
        "outage_retry_s": OUTAGE_RETRY_S,
    }
    settings = Config(**(defaults | config))  # fmt: skip
    daemon = clock_daemon(settings, clock, http=StubTreq(opencode))  # type: ignore[arg-type]
    daemon.start_delivery()
    return daemon


def send(daemon: Daemon, msg_id: str, to: str = "ses_known") -> tuple[int, Any]:
    body = {"from": "ses_sender", "to": to, "payload": "hi", "msg_id": msg_id}
    return daemon_call(daemon, "POST", "/swarm/send", body)


def health(daemon: Daemon) -> Any:
    status, answer = daemon_call(daemon, "GET", "/health", token=False)
    check_body(
        "GET", "/health", status, {"content-type": "application/json"}, json.dumps(answer).encode()
    )
    return answer


def held(daemon: Daemon, msg_id: str) -> tuple[str, int, str | None]:
    stored = repo_of(daemon).get(msg_id)
    assert stored is not None
    return stored.state, stored.attempts, stored.last_error
