"""The wiring factory: a daemon built from a Config sends, delivers and reports health."""

from __future__ import annotations

import base64
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.web import server
from twisted.web.resource import Resource

from pigeond.config import Config
from pigeond.credentials import BasicAuth
from pigeond.service.daemon import Daemon, stop_later
from tests.http_helpers import daemon_call, result_of, stub_client
from tests.opencode_stub import RecordingOpencode
from tests.storage_helpers import clock_daemon, repo_of


def build(tmp_path: Path, clock: Clock, opencode: Resource, **config: Any) -> Daemon:
    settings = Config(db=str(tmp_path / "p.db"), **({"delivery": "call"} | config))
    return clock_daemon(settings, clock, http=stub_client(opencode))


def status_of(daemon: Daemon) -> str:
    return result_of(Deferred.fromCoroutine(daemon.status_line()))


def send(daemon: Daemon, body: dict[str, Any]) -> int:
    """POST /swarm/send as a client of the daemon does; the status."""
    return daemon_call(daemon, "POST", "/swarm/send", body)[0]


def health(daemon: Daemon) -> Any:
    """GET /health without a token, as a monitor does; the JSON answer."""
    return daemon_call(daemon, "GET", "/health", token=False)[1]


def test_send_is_delivered_with_basic_auth(tmp_path: Path, clock: Clock) -> None:
    """With opencode credentials set, every call of a hand-off uses Basic auth (the lookup,
    the read of the newest messages for the target's agent and model, the prompt)."""
    opencode = RecordingOpencode(tmp_path)
    daemon = build(tmp_path, clock, opencode, opencode_auth=BasicAuth("opencode", "pw"))
    daemon.start_delivery()
    assert send(daemon, {"from": "ses_a", "to": "ses_t", "payload": "hi", "msg_id": "msg_1"}) == 202
    expected = "Basic " + base64.b64encode(b"opencode:pw").decode()
    assert opencode.seen == [
        ("/session/ses_t", expected),
        ("/session/ses_t/message", expected),
        ("/session/ses_t/prompt_async", expected),
    ]
    stored = repo_of(daemon).get("msg_1")
    assert stored is not None and stored.state == "handed_off"


def test_empty_opencode_url_disables_delivery(tmp_path: Path, clock: Clock) -> None:
    """With an empty opencode_url the routes work, messages stay queued, health says so."""
    opencode = RecordingOpencode(tmp_path)
    daemon = build(tmp_path, clock, opencode, opencode_url="")
    daemon.start_delivery()
    assert send(daemon, {"from": "ses_a", "to": "ses_t", "payload": "hi"}) == 202
    clock.advance(10)
    assert opencode.seen == []
    assert health(daemon) | {"version": "-"} == {
        "ok": True, "version": "-", "arbiter": False, "arbiter_ticking": False,
        "opencode": "off", "event_stream": "off", "in_flight": 0, "unrecorded": 0,
        "queued": 1, "failed": 0,
    }  # fmt: skip


def test_health_reports_running_arbiter(tmp_path: Path, clock: Clock) -> None:
    """Once delivery has started, health reports the arbiter as running."""
    daemon = build(tmp_path, clock, RecordingOpencode(tmp_path))
    assert health(daemon)["arbiter"] is False
    daemon.start_delivery()
    assert health(daemon)["arbiter"] is True


def test_max_attempts_setting_is_used(tmp_path: Path, clock: Clock) -> None:
    """max_attempts from the config bounds the attempts before a message fails."""
    daemon = build(tmp_path, clock, RecordingOpencode(tmp_path, prompt_status=500), max_attempts=2)
    daemon.start_delivery()
    send(daemon, {"from": "ses_a", "to": "ses_t", "payload": "hi", "msg_id": "msg_1"})
    clock.advance(1)
    clock.advance(1)
    stored = repo_of(daemon).get("msg_1")
    assert stored is not None and (stored.state, stored.attempts) == ("failed", 2)


def test_stop_closes_the_database(tmp_path: Path, clock: Clock) -> None:
    """stop() ends delivery and closes the database."""
    daemon = build(tmp_path, clock, RecordingOpencode(tmp_path))
    daemon.start_delivery()
    result_of(stop_later(daemon))
    assert daemon.arbiter is not None and not daemon.arbiter.running
    assert _is_closed(daemon)


def _is_closed(daemon: Daemon) -> bool:
    try:
        repo_of(daemon).connection.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


class HangingPrompts(RecordingOpencode):
    """Answers lookups, never answers a prompt."""

    def render(self, request: server.Request) -> bytes | int:  # type: ignore[override]
        if request.method == b"GET":
            return super().render(request)
        return server.NOT_DONE_YET


def test_the_database_watch_and_the_pruner_start_and_stop_with_the_daemon(
    tmp_path: Path, clock: Clock
) -> None:
    """The database watch and the pruner are services of the daemon's MultiService: they
    run from start_delivery on and leave nothing on the clock once the daemon stops."""
    daemon = clock_daemon(Config(db=str(tmp_path / "p.db"), opencode_url=""), clock)
    watch, pruner = (daemon.jobs.getServiceNamed(name) for name in ("db-watch", "pruner"))
    assert (watch.job, pruner.job) == (daemon.db_watch, daemon.pruner)
    assert clock.getDelayedCalls() == []  # nothing runs before the daemon starts

    def running() -> tuple[bool, bool, bool]:
        return bool(watch.running), bool(pruner.running), daemon.pruner.running

    daemon.start_delivery()
    assert running() == (True, True, True)
    result_of(stop_later(daemon))
    assert running() == (False, False, False)
    assert clock.getDelayedCalls() == []


def test_stop_waits_for_in_flight_hand_offs_only_so_long(tmp_path: Path, clock: Clock) -> None:
    """Stopping waits for a hand-off in flight at most stop_timeout_s; the message stays
    queued for the next start, and the database is closed."""
    daemon = build(tmp_path, clock, HangingPrompts(tmp_path), stop_timeout_s=10)
    daemon.start_delivery()
    send(daemon, {"from": "ses_a", "to": "ses_t", "payload": "hi", "msg_id": "msg_1"})
    stopping = stop_later(daemon)
    clock.advance(9)
    assert not stopping.called
    clock.advance(1)
    result_of(stopping)
    assert _is_closed(daemon)
    reopened = build(tmp_path, clock, RecordingOpencode(tmp_path))
    stored = repo_of(reopened).get("msg_1")
    assert stored is not None and stored.state == "queued"


def test_status_line(tmp_path: Path, clock: Clock) -> None:
    """The systemd status line counts the queue and says whether opencode answered."""
    daemon = build(tmp_path, clock, RecordingOpencode(tmp_path))
    assert status_of(daemon) == "queued 0, failed 0, in flight 0, opencode not contacted yet"
    daemon.start_delivery()
    send(daemon, {"from": "ses_a", "to": "ses_t", "payload": "hi"})
    assert status_of(daemon) == "queued 0, failed 0, in flight 0, opencode ok"


def test_reload_applies_access_and_flood_settings_live(tmp_path: Path, clock: Clock) -> None:
    """A SIGHUP reload changes allow_hosts and the flood limits at once; allow_group's
    socket file is named as needing a restart."""
    daemon = build(tmp_path, clock, RecordingOpencode(tmp_path), opencode_url="")
    api = stub_client(daemon.site.resource)
    assert result_of(api.get("http://pigeond.internal/health")).code == 421
    new = replace(daemon.config, allow_hosts=("pigeond.internal",), sender_burst=1,
                  sender_rate_per_s=0.001, allow_group="root")  # fmt: skip
    assert daemon.reload(new) == ["allow_group"]
    assert result_of(api.get("http://pigeond.internal/health")).code == 200
    assert send(daemon, {"from": "ses_a", "to": "ses_t", "payload": "1"}) == 202
    assert send(daemon, {"from": "ses_a", "to": "ses_t", "payload": "2"}) == 429


def test_reload_reaches_every_part_through_configure(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload hands the new settings to each part's configure(), and what the client
    and the registry use changes at once."""
    daemon = build(tmp_path, clock, RecordingOpencode(tmp_path), delivery="turn")
    reached: list[str] = []
    for part in daemon.reconfigurable():
        configure = part.configure

        def noting(config: Config, configure: Any = configure, part: Any = part) -> None:
            reached.append(type(part).__name__)
            configure(config)

        monkeypatch.setattr(part, "configure", noting)
    new = replace(daemon.config, handoff_timeout_s=7.0, registry_ttl_s=9.0)
    daemon.reload(new)
    assert sorted(reached) == sorted(
        ["QuietSite", "SwarmRoutes", "InlineDatabase", "Pruner", "FloodGuard", "AccessPolicy",
         "Arbiter", "OpencodeClient", "SessionDirectoryRegistry", "Verifier", "TurnTracker",
         "ChannelRoutes", "HopBrake", "PairRateBrake", "RepeatBrake", "BudgetBrake",
         "PermissionWatch", "SenderProofJob", "OpencodeV2Parts", "QuietGate", "TargetCheck"]
    )  # fmt: skip
    assert daemon.delivery is not None
    assert (daemon.delivery.client.timeout_s, daemon.delivery.registry.ttl_s) == (7.0, 9.0)
