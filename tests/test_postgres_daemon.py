"""pigeond itself on PostgreSQL (``--db postgresql://…``): it delivers what it accepts, a
stopped PostgreSQL gives 503s (never a 202 that is then lost) and both sending and
delivery resume by themselves, and the URL's password is never printed."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from pigeond.storage import SwarmRepository
from pigeond.storage.postgres import open_postgres
from pigeond.storage.postgres.schema import DUE_CHANNEL
from testkit.daemon_process import PAIR_BRAKES_OFF, DaemonFactory, DaemonProcess, isolated_env
from testkit.fake_opencode import FakeOpencode
from testkit.pg_cluster import PgCluster
from testkit.polling import PATIENCE_S, wait_until

pytestmark = pytest.mark.slow

TARGET = "ses_target"
# the longest tick pigeond allows: between two ticks only a notification wakes a daemon
SLOW_TICK_S = 60.0
SLOW_TICK = ("--tick-ms", str(int(SLOW_TICK_S * 1000)))


def send(daemon: DaemonProcess, msg_id: str, to: str = TARGET) -> int:
    """POST one message; the status (0 when the daemon did not answer at all)."""
    body = {"msg_id": msg_id, "from": "ses_sender", "to": to, "payload": f"hi {msg_id}"}
    try:
        status, _ = daemon.request_json("POST", "/swarm/send", body)
    except OSError:
        return 0
    return status


def wait_delivered(fake: FakeOpencode, msg_ids: set[str], target: str = TARGET) -> list[str]:
    """Every msg_id's prompt reached the fake opencode; the msg_ids prompted, in order."""

    def prompted() -> list[str] | None:
        ids = [c.msg_id for c in fake.prompt_calls(target)]
        return ids if msg_ids <= set(ids) else None

    return wait_until(prompted, PATIENCE_S, f"the prompts of {sorted(msg_ids)}")


def wait_recorded(daemon: DaemonProcess, msg_id: str) -> None:
    """``msg_id`` is recorded handed off (the prompt reaches opencode a moment before)."""
    wait_until(
        lambda: daemon.request_json("GET", f"/swarm/message/{msg_id}")[1]["state"]
        == "handed_off", PATIENCE_S, f"{msg_id} recorded as handed off",
    )  # fmt: skip


def listeners(pg_url: str) -> int:
    """How many connections to the database listen for sends (one per daemon, once its
    listener is connected), as PostgreSQL shows them."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = %s",
            (f"LISTEN {DUE_CHANNEL}",),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_daemon_on_postgresql_delivers_what_it_accepts(
    daemons: DaemonFactory, tmp_path: Path, pg_url: str
) -> None:
    """A send to a daemon on PostgreSQL is stored (202), handed off once, and readable."""
    with FakeOpencode(tmp_path) as fake:
        fake.add_session(TARGET)
        daemon = daemons.start(pg_url, opencode_url=fake.url)
        assert send(daemon, "msg_pg1") == 202
        assert wait_delivered(fake, {"msg_pg1"}) == ["msg_pg1"]
        wait_recorded(daemon, "msg_pg1")


def test_postgresql_stopped_mid_stream_loses_nothing_that_got_a_202(
    daemons: DaemonFactory, tmp_path: Path, pg_url: str, pg_cluster: PgCluster
) -> None:
    """While PostgreSQL is down sends get 503; once it is back, sends are 202 again and
    every message that got a 202 is delivered, each once."""
    with FakeOpencode(tmp_path) as fake:
        fake.add_session(TARGET)
        daemon = daemons.start(pg_url, opencode_url=fake.url)
        accepted = {f"msg_before{i}" for i in range(5) if send(daemon, f"msg_before{i}") == 202}
        assert len(accepted) == 5
        pg_cluster.pg_ctl("stop", "-m", "fast")
        try:
            during = {f"msg_down{i}": send(daemon, f"msg_down{i}") for i in range(3)}
            assert set(during.values()) == {503}, during
            status, health = daemon.request_json("GET", "/health")
            assert status == 503 or health.get("status") != "ok", health
        finally:
            pg_cluster.pg_ctl("start")
        wait_until(
            lambda: send(daemon, "msg_after") == 202, PATIENCE_S,
            "sends to resume after PostgreSQL came back", every_s=0.2,
        )  # fmt: skip
        accepted.add("msg_after")
        prompted = wait_delivered(fake, accepted)
        assert sorted(m for m in prompted if m in accepted) == sorted(accepted)
        assert not set(during) & set(prompted)


def test_the_url_password_is_never_printed(tmp_path: Path) -> None:
    """--check-config and a start that cannot reach PostgreSQL show the URL (from
    PIGEOND_DB: never a command line's) without its password; the token's default place
    is the state folder."""
    url = "postgresql://pigeon:s3cret-pw@127.0.0.1:1/swarm"
    home = tmp_path / "home"
    env = isolated_env(home, {"PIGEOND_DB": url})
    shown = subprocess.run(
        [sys.executable, "-m", "pigeond", "--check-config"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "s3cret" not in shown.stdout + shown.stderr
    assert 'db = "postgresql://pigeon:***@127.0.0.1:1/swarm"' in shown.stdout
    assert f'token_file = "{home}/.local/state/pigeond/token"' in shown.stdout
    started = subprocess.run(
        [sys.executable, "-m", "pigeond", "--listen", "tcp:0:interface=127.0.0.1"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert started.returncode != 0
    assert "s3cret" not in started.stdout + started.stderr
    assert "postgresql://pigeon:***@127.0.0.1:1/swarm" in started.stderr
    assert len(started.stderr.strip().splitlines()) == 1, started.stderr


def test_a_url_that_names_no_database_is_a_config_error(tmp_path: Path) -> None:
    """--db postgresql://host/ (no database) is refused at once, in one line."""
    env = isolated_env(tmp_path / "home")
    shown = subprocess.run(
        [sys.executable, "-m", "pigeond", "--check-config", "--db", "postgresql://u@h/"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert shown.returncode == 2
    assert shown.stderr.strip() == (
        "pigeond: db postgresql://u@h/ names no database (…/DBNAME, or ?service=NAME)"
    )


def test_two_daemons_never_hand_one_target_two_prompts_at_once(
    daemons: DaemonFactory, tmp_path: Path, pg_url: str
) -> None:
    """Two daemons on one PostgreSQL and one opencode, sends to one target through both:
    every message is prompted once, and no two prompts to the target overlap (each
    drain holds the target's advisory lock)."""
    with FakeOpencode(tmp_path, hold_s=0.05) as fake:
        fake.add_session(TARGET)
        pair = [
            daemons.start(
                pg_url,
                opencode_url=fake.url,
                env={"XDG_STATE_HOME": str(tmp_path / f"st{i}")},
                extra_args=PAIR_BRAKES_OFF,  # 24 sends alike from one session to another
            )
            for i in range(2)
        ]
        sent = {f"msg_two{i}" for i in range(24)}
        assert {send(pair[i % 2], f"msg_two{i}") for i in range(24)} == {202}
        wait_delivered(fake, sent)
        calls = fake.prompt_calls(TARGET)
        assert sorted(c.msg_id for c in calls) == sorted(sent)
        pairs = itertools.combinations(calls, 2)
        overlapping = [(a.msg_id, b.msg_id) for a, b in pairs if a.overlaps(b)]
        assert overlapping == []


def _host(
    daemons: DaemonFactory, tmp_path: Path, name: str, pg_url: str, fake: FakeOpencode
) -> DaemonProcess:
    """A daemon named ``name`` beside ``fake`` (its host's opencode), on the shared database."""
    return daemons.start(
        pg_url, opencode_url=fake.url,
        extra_args=("--daemon-name", name),
        env={"XDG_STATE_HOME": str(tmp_path / name)},
    )  # fmt: skip


def test_a_message_is_handed_off_by_the_daemon_whose_opencode_has_its_target(
    daemons: DaemonFactory, tmp_path: Path, pg_url: str
) -> None:
    """Two hosts (a daemon and an opencode each): sends to B's session through either
    daemon reach B's opencode once each, never A's; the route names B."""
    with FakeOpencode(tmp_path / "a") as fake_a, FakeOpencode(tmp_path / "b") as fake_b:
        fake_a.add_session("ses_on_a")
        fake_b.add_session(TARGET)
        host_a = _host(daemons, tmp_path, "host-a", pg_url, fake_a)
        host_b = _host(daemons, tmp_path, "host-b", pg_url, fake_b)
        sent = {f"msg_far{i}" for i in range(10)}
        assert {send((host_a, host_b)[i % 2], f"msg_far{i}") for i in range(10)} == {202}
        prompted = wait_delivered(fake_b, sent)
        assert sorted(prompted) == sorted(sent)
        assert fake_a.prompt_calls(TARGET) == []
        wait_recorded(host_a, "msg_far0")
        repo = SwarmRepository(open_postgres(pg_url))
        try:
            route = repo.route_of(TARGET)
            assert route is not None and route.daemon == "host-b"
            assert route.opencode_url == fake_b.url
        finally:
            repo.close()


def test_kill_9_of_the_target_s_daemon_loses_nothing(
    daemons: DaemonFactory, tmp_path: Path, pg_url: str
) -> None:
    """Host B's daemon is killed mid-stream; what host A accepted for B's session meanwhile
    waits, and is delivered once B's daemon is back: every 202'd message, each once."""
    with FakeOpencode(tmp_path / "a") as fake_a, FakeOpencode(tmp_path / "b") as fake_b:
        fake_b.add_session(TARGET)
        host_a = _host(daemons, tmp_path, "host-a", pg_url, fake_a)
        host_b = _host(daemons, tmp_path, "host-b", pg_url, fake_b)
        accepted = {f"msg_k{i}" for i in range(5) if send(host_a, f"msg_k{i}") == 202}
        wait_delivered(fake_b, set(accepted))
        host_b.kill()
        accepted |= {f"msg_gone{i}" for i in range(5) if send(host_a, f"msg_gone{i}") == 202}
        assert len(accepted) == 10
        _host(daemons, tmp_path, "host-b", pg_url, fake_b)
        prompted = wait_delivered(fake_b, accepted)
        assert sorted(prompted) == sorted(accepted)
        assert fake_a.prompt_calls(TARGET) == []


def test_a_send_through_one_host_wakes_the_other_at_once(
    daemons: DaemonFactory, tmp_path: Path, pg_url: str
) -> None:
    """With a tick of 60 s, a send accepted by host A for host B's session is handed off
    by B before B's next tick: A's accept notifies (LISTEN/NOTIFY), B's arbiter is kicked."""
    with FakeOpencode(tmp_path / "a") as fake_a, FakeOpencode(tmp_path / "b") as fake_b:
        fake_b.add_session(TARGET)
        fake_b.add_session("ses_primer")
        host_a = daemons.start(
            pg_url, opencode_url=fake_a.url, extra_args=("--daemon-name", "host-a", *SLOW_TICK),
            env={"XDG_STATE_HOME": str(tmp_path / "host-a")},
        )  # fmt: skip
        # queued before B starts, so B's first tick hands it off: once it has, that tick
        # has read the queue, and only a notification (or the next tick) wakes B again
        assert send(host_a, "msg_primer", to="ses_primer") == 202
        b_spawned_at = time.monotonic()
        daemons.start(
            pg_url, opencode_url=fake_b.url, extra_args=("--daemon-name", "host-b", *SLOW_TICK),
            env={"XDG_STATE_HOME": str(tmp_path / "host-b")},
        )  # fmt: skip
        wait_delivered(fake_b, {"msg_primer"}, target="ses_primer")
        wait_until(lambda: listeners(pg_url) == 2, PATIENCE_S, "both daemons to listen")
        assert send(host_a, "msg_wake") == 202
        # B's first tick came after its spawn, so its next one comes no sooner than this
        before_next_tick_s = b_spawned_at + SLOW_TICK_S - time.monotonic()
        wait_until(lambda: fake_b.prompt_calls(TARGET), before_next_tick_s, "B to be woken")
        assert [c.msg_id for c in fake_b.prompt_calls(TARGET)] == ["msg_wake"]
