"""End-to-end delivery over real sockets: a pigeond subprocess and a fake opencode.

These tests specify what pigeond promises its users, from the outside:
one prompt in flight per target session, priority then FIFO order, no
message lost across a ``kill -9``, the Unix-socket listener, and the
``pigeon-send`` path a new user takes first.
"""

from __future__ import annotations

import collections
import http.client
import json
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pigeond.model import MSG_ID_RE
from testkit.daemon_process import PAIR_BRAKES_OFF, DaemonFactory, DaemonProcess, isolated_env
from testkit.fake_opencode import FakeOpencode, PromptCall
from testkit.polling import PATIENCE_S, wait_until
from tests.unix_http import UnixHTTPConnection

pytestmark = pytest.mark.slow

HTTP_TIMEOUT_S = PATIENCE_S
PRIORITY_RANK = {"urgent": 0, "normal": 1, "low": 2}
PIGEON_SEND = Path(sys.executable).parent / "pigeon-send"
WAIT_TIMEOUT = str(int(PATIENCE_S))  # pigeon-send --wait --timeout: a bound here

Connect = Callable[[], http.client.HTTPConnection]


# -- plumbing ------------------------------------------------------------------


class _BearerHTTPConnection(http.client.HTTPConnection):
    """HTTP over TCP with the daemon's bearer token on every request."""

    def __init__(self, port: int, token: str, timeout: float) -> None:
        super().__init__("127.0.0.1", port, timeout=timeout)
        self._token = token

    def putrequest(self, method: str, url: str, *args: Any, **kwargs: Any) -> None:
        super().putrequest(method, url, *args, **kwargs)
        self.putheader("Authorization", f"Bearer {self._token}")


def tcp(daemon: DaemonProcess) -> Connect:
    port, token = daemon.port, daemon.token
    return lambda: _BearerHTTPConnection(port, token, HTTP_TIMEOUT_S)


def unix(path: str) -> Connect:
    return lambda: UnixHTTPConnection(path, HTTP_TIMEOUT_S)


def call(
    connect: Connect, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    """One request; returns the status and the parsed JSON answer."""
    conn = connect()
    try:
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {} if data is None else {"content-type": "application/json"}
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    answer = json.loads(raw.decode("utf-8"))
    assert isinstance(answer, dict), raw
    return response.status, answer


def send(connect: Connect, target: str, payload: str, **fields: str) -> str:
    """POST /swarm/send and insist on 202; returns the msg_id."""
    status, answer = call(
        connect,
        "POST",
        "/swarm/send",
        {"from": "ses_sender", "to": target, "payload": payload} | fields,
    )
    assert status == 202, answer
    assert answer["accepted"] is True, answer
    msg_id = answer["msg_id"]
    assert isinstance(msg_id, str) and MSG_ID_RE.fullmatch(msg_id), answer
    return msg_id


def health(connect: Connect) -> dict[str, Any]:
    status, answer = call(connect, "GET", "/health")
    assert status == 200, answer
    return answer


def inbox_ids(connect: Connect, session: str, page_size: int = 25) -> list[str]:
    """Every msg_id in the session's inbox, following next_cursor page by page."""
    ids: list[str] = []
    since: str | None = None
    for _ in range(1000):
        query = f"/swarm/inbox?session={session}&limit={page_size}"
        if since is not None:
            query += f"&since={since}"
        status, page = call(connect, "GET", query)
        assert status == 200, page
        ids += [m["msg_id"] for m in page["messages"]]
        if not page["has_more"]:
            return ids
        since = page["next_cursor"]
    raise AssertionError("inbox paging did not end after 1000 pages")


def delivered_ok(fake: FakeOpencode, session: str | None = None) -> list[PromptCall]:
    """The prompt_async calls the fake accepted (204), in the order they ended."""
    return [c for c in fake.prompt_calls(session) if c.status == 204]


def overlapping_pairs(calls: list[PromptCall]) -> list[tuple[PromptCall, PromptCall]]:
    ordered = sorted(calls, key=lambda c: c.start)
    return [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1 :] if a.overlaps(b)]


def assert_one_at_a_time(fake: FakeOpencode, session: str, since: float = 0.0) -> None:
    """No two prompt_async calls to ``session`` (started after ``since``) overlapped."""
    calls = [c for c in fake.prompt_calls(session) if c.start >= since]
    pairs = overlapping_pairs(calls)
    assert not pairs, f"{len(pairs)} overlapping prompt_async pair(s) to {session}: " + "; ".join(
        f"{a.msg_id} [{a.start:.3f}-{a.end:.3f}] with {b.msg_id} [{b.start:.3f}-{b.end:.3f}]"
        for a, b in pairs[:5]
    )


def assert_routed(fake: FakeOpencode, calls: list[PromptCall]) -> None:
    """Each call carries its session's directory and an envelope addressed to that session."""
    for c in calls:
        assert c.directory == str(fake.directory_of(c.session)), c
        assert c.envelope_attributes["to"] == c.session, c


def priority_order(sent: list[tuple[str, str]]) -> list[str]:
    """The msg_ids of ``(msg_id, priority)`` pairs in send order, as they must be delivered."""
    return [m for m, p in sorted(sent, key=lambda mp: PRIORITY_RANK[mp[1]])]


@pytest.fixture
def daemons(tmp_path: Path, fake: FakeOpencode) -> Iterator[DaemonFactory]:
    # depends on ``fake`` so the daemons stop before the fake opencode does
    factory = DaemonFactory(tmp_path)
    yield factory
    factory.close()


@pytest.fixture
def refused_url() -> Iterator[str]:
    """An opencode URL on 127.0.0.1 where nothing listens: a bound, non-listening port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


# -- one at a time per target ----------------------------------------------------


def test_concurrent_senders_never_overlap_prompts_to_one_target(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory
) -> None:
    """Concurrent sends arrive exactly once, one prompt at a time per target; targets overlap."""
    fake.add_session("ses_alpha")
    fake.add_session("ses_beta")
    daemon = daemons.start(tmp_path / "p.db", opencode_url=fake.url, extra_args=PAIR_BRAKES_OFF)
    connect = tcp(daemon)

    plan = [("ses_alpha", 5)] * 4 + [("ses_beta", 5)] * 2  # (target, messages) per sender
    barrier = threading.Barrier(len(plan), timeout=PATIENCE_S)
    lock = threading.Lock()
    accepted: dict[str, str] = {}  # msg_id -> target
    errors: list[BaseException] = []

    def sender(index: int, target: str, count: int) -> None:
        try:
            barrier.wait()
            for n in range(count):
                msg_id = send(connect, target, f"sender {index} message {n}")
                with lock:
                    accepted[msg_id] = target
        except BaseException as e:
            with lock:
                errors.append(e)

    threads = [
        threading.Thread(target=sender, args=(i, target, count), daemon=True)
        for i, (target, count) in enumerate(plan)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=PATIENCE_S)
    assert not any(t.is_alive() for t in threads), "a sender thread hung"
    assert not errors, errors
    assert len(accepted) == sum(count for _, count in plan)

    wanted = set(accepted)
    fake.wait_for_prompts(
        lambda calls: wanted <= {c.msg_id for c in calls if c.status == 204}, timeout_s=PATIENCE_S
    )
    wait_until(lambda: health(connect)["queued"] == 0, PATIENCE_S, "the queue to empty")

    for target in ("ses_alpha", "ses_beta"):
        assert_one_at_a_time(fake, target)
    calls = delivered_ok(fake)
    counts = collections.Counter(c.msg_id for c in calls)
    assert {m: n for m, n in counts.items() if n != 1} == {}, "delivered more than once"
    assert set(counts) == wanted
    assert all(c.status == 204 for c in fake.prompt_calls())
    assert_routed(fake, calls)
    for target in ("ses_alpha", "ses_beta"):
        assert sorted(inbox_ids(connect, target)) == sorted(
            m for m, t in accepted.items() if t == target
        )
    # the two targets drained side by side: at least one alpha prompt overlapped a beta one
    alpha, beta = delivered_ok(fake, "ses_alpha"), delivered_ok(fake, "ses_beta")
    assert any(a.overlaps(b) for a in alpha for b in beta), "targets were drained one after another"
    # the directory was looked up once per session, then cached
    assert sorted(fake.lookups()) == ["ses_alpha", "ses_beta"]


# -- priority, then FIFO ------------------------------------------------------------

MIXED_PRIORITIES = [
    "low",
    "normal",
    "urgent",
    "normal",
    "low",
    "urgent",
    "urgent",
    "low",
    "normal",
    "urgent",
    "low",
    "normal",
]


def build_backlog(connect: Connect, target: str) -> list[tuple[str, str]]:
    """Send MIXED_PRIORITIES to ``target`` in quick succession; returns (msg_id, priority)."""
    return [
        (send(connect, target, f"backlog {i} ({p})", priority=p), p)
        for i, p in enumerate(MIXED_PRIORITIES)
    ]


def test_backlog_is_delivered_urgent_then_normal_then_low_each_in_send_order(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory
) -> None:
    """A backlog queued with the arbiter off is delivered by priority, then in accept order."""
    fake.add_session("ses_target")
    db = tmp_path / "p.db"
    offline = daemons.start(db, opencode_url="")
    sent = build_backlog(tcp(offline), "ses_target")
    status = health(tcp(offline))
    assert status["arbiter"] is False
    assert status["queued"] == len(sent)
    assert offline.stop() == 0
    assert fake.prompt_calls() == [] and fake.lookups() == []

    online = daemons.start(db, opencode_url=fake.url)
    calls = fake.wait_for_prompts(lambda calls: len(calls) >= len(sent), timeout_s=PATIENCE_S)
    wait_until(lambda: health(tcp(online))["queued"] == 0, PATIENCE_S, "the queue to empty")

    delivered = [c.msg_id for c in delivered_ok(fake)]
    assert delivered == priority_order(sent)
    assert [c.envelope_attributes["priority"] for c in calls] == sorted(
        MIXED_PRIORITIES, key=PRIORITY_RANK.__getitem__
    )
    assert_routed(fake, calls)
    assert_one_at_a_time(fake, "ses_target")
    assert inbox_ids(tcp(online), "ses_target") == delivered


def test_backlog_built_while_opencode_is_down_keeps_priority_order(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory, refused_url: str
) -> None:
    """Messages held while opencode was down still go out by priority, then FIFO."""
    fake.add_session("ses_target")
    db = tmp_path / "p.db"
    down = daemons.start(db, opencode_url=refused_url, extra_args=["--outage-retry-s", "0.2"])
    sent = build_backlog(tcp(down), "ses_target")

    def held() -> list[tuple[str, int, str | None]]:
        conn = sqlite3.connect(db)
        try:
            rows = conn.execute(
                "SELECT msg_id, attempts, last_error FROM swarm_messages"
                " WHERE last_error IS NOT NULL"
            ).fetchall()
        finally:
            conn.close()
        return [(str(m), int(n), e) for m, n, e in rows]

    # the head of the queue was tried and held: an outage spends no attempts
    wait_until(lambda: len(held()) > 0, PATIENCE_S, "a held message")
    assert all(n == 0 and error for _, n, error in held()), held()
    assert health(tcp(down))["queued"] == len(sent)
    assert down.stop() == 0

    online = daemons.start(db, opencode_url=fake.url)
    calls = fake.wait_for_prompts(lambda calls: len(calls) >= len(sent), timeout_s=PATIENCE_S)
    wait_until(lambda: health(tcp(online))["queued"] == 0, PATIENCE_S, "the queue to empty")

    assert [c.msg_id for c in delivered_ok(fake)] == priority_order(sent)
    assert_routed(fake, calls)
    assert_one_at_a_time(fake, "ses_target")


# -- crash -----------------------------------------------------------------------------


@dataclass
class SendLog:
    lock: threading.Lock = field(default_factory=threading.Lock)
    accepted: dict[str, str] = field(default_factory=dict)  # msg_id -> target
    unreachable: int = 0
    errors: list[str] = field(default_factory=list)


def test_every_accepted_message_is_delivered_after_kill_9(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory
) -> None:
    """Every message answered 202 is handed off (at least once) after a kill -9 and restart."""
    targets = ["ses_crash_a", "ses_crash_b"]
    for target in targets:
        fake.add_session(target)
    db = tmp_path / "p.db"
    first = daemons.start(db, opencode_url=fake.url, extra_args=PAIR_BRAKES_OFF)
    connect = tcp(first)
    log = SendLog()
    senders, per_sender = 4, 60  # ~1.2 s of sends each: still sending at the kill

    def sender(index: int) -> None:
        for n in range(per_sender):
            target = targets[(index + n) % len(targets)]
            body = {"from": f"ses_sender{index}", "to": target, "payload": f"{index}/{n}"}
            try:
                status, answer = call(connect, "POST", "/swarm/send", body)
            except (OSError, http.client.HTTPException):
                with log.lock:
                    log.unreachable += 1
                return  # the daemon is gone
            with log.lock:
                if status == 202:
                    log.accepted[answer["msg_id"]] = target
                else:
                    log.errors.append(f"{status} {answer}")
            time.sleep(0.02)  # the senders' pace

    threads = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(senders)]
    for t in threads:
        t.start()

    def mid_stream() -> bool:
        with log.lock:
            enough_accepted = len(log.accepted) >= 30
        return enough_accepted and len(delivered_ok(fake)) >= 2

    wait_until(mid_stream, PATIENCE_S, "sends accepted and hand-offs under way")
    first.kill()
    killed_at = time.monotonic()
    for t in threads:
        t.join(timeout=PATIENCE_S)
    assert not any(t.is_alive() for t in threads), "a sender thread hung"
    assert not log.errors, log.errors
    assert log.unreachable >= 1, "the kill did not land mid-stream: every send finished"
    assert len(log.accepted) < senders * per_sender
    before_restart = {c.msg_id for c in delivered_ok(fake)}
    assert set(log.accepted) - before_restart, "nothing was left queued at the kill"

    second = daemons.start(db, opencode_url=fake.url)
    restarted_at = time.monotonic()
    assert restarted_at > killed_at
    wanted = set(log.accepted)
    fake.wait_for_prompts(
        lambda calls: wanted <= {c.msg_id for c in calls if c.status == 204}, timeout_s=PATIENCE_S
    )
    wait_until(lambda: health(tcp(second))["queued"] == 0, PATIENCE_S, "the queue to empty")

    calls = delivered_ok(fake)
    assert_routed(fake, calls)
    for target in targets:
        assert_one_at_a_time(fake, target, since=restarted_at)
        in_inbox = set(inbox_ids(tcp(second), target, page_size=7))
        missing = {m for m, t in log.accepted.items() if t == target} - in_inbox
        assert not missing, f"accepted but not in {target}'s inbox: {sorted(missing)}"
    counts = collections.Counter(c.msg_id for c in calls)
    duplicates = {m: n for m, n in counts.items() if n > 1}
    unconfirmed = set(counts) - wanted
    print(
        f"crash test: {len(wanted)} accepted, {len(before_restart)} handed off before the kill,"
        f" {len(duplicates)} delivered twice (at-least-once: {sorted(duplicates)}),"
        f" {len(unconfirmed)} delivered without a 202 seen (lost in flight at the kill)"
    )


# -- Unix socket ------------------------------------------------------------------------


def test_unix_socket_listener_has_mode_0600_and_accepts_sends(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory
) -> None:
    """A ``unix:PATH:mode=600`` listener is a 0600 socket that takes sends; a stop removes it."""
    fake.add_session("ses_target")
    path = tmp_path / "p.sock"
    assert len(str(path)) < 100, f"socket path too long for AF_UNIX: {path}"
    daemon = daemons.start(tmp_path / "p.db", opencode_url=fake.url, listen=f"unix:{path}:mode=600")
    assert daemon.unix_path == str(path)

    mode = path.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600, oct(stat.S_IMODE(mode))

    connect = unix(str(path))
    assert health(connect)["ok"] is True
    by_http = send(connect, "ses_target", "over AF_UNIX")
    cli = subprocess.run(
        [str(PIGEON_SEND), "--url", f"unix:{path}", "--from", "ses_cli", "ses_target", "via CLI"],
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        env=isolated_env(tmp_path / "home"),
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    by_cli = cli.stdout.strip()
    assert MSG_ID_RE.fullmatch(by_cli), cli.stdout

    calls = fake.wait_for_prompts(lambda calls: len(calls) >= 2, timeout_s=PATIENCE_S)
    assert [c.msg_id for c in calls] == [by_http, by_cli]
    assert_routed(fake, calls)

    assert daemon.stop() == 0
    assert not path.exists(), "the socket file was left behind after a clean stop"


def test_unix_socket_daemon_restarts_on_the_same_path_after_kill_9(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory
) -> None:
    """A daemon restarted after kill -9 listens again on the stale Unix socket path."""
    fake.add_session("ses_target")
    path = tmp_path / "p.sock"
    listen = f"unix:{path}:mode=600"
    first = daemons.start(tmp_path / "p.db", opencode_url=fake.url, listen=listen)
    first.kill()
    assert path.exists(), "expected the killed daemon to leave its socket file"

    daemons.start(tmp_path / "p.db", opencode_url=fake.url, listen=listen)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    msg_id = send(unix(str(path)), "ses_target", "after the crash")
    calls = fake.wait_for_prompts(lambda calls: len(calls) >= 1, timeout_s=PATIENCE_S)
    assert [c.msg_id for c in calls] == [msg_id]


# -- the new user's first message ---------------------------------------------------------


def test_pigeon_send_message_reaches_opencode_and_the_inbox(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory
) -> None:
    """pigeon-send prints a msg_id; opencode gets the exact escaped envelope; the inbox lists it."""
    target_dir = fake.add_session("ses_target")
    daemon = daemons.start(tmp_path / "p.db", opencode_url=fake.url)

    cli = subprocess.run(
        [
            str(PIGEON_SEND),
            "--url",
            daemon.base_url,
            "--from",
            "ses_sender",
            "ses_target",
            "hello <b>",
        ],
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        env=isolated_env(tmp_path / "home"),
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stderr == ""
    msg_id = cli.stdout.strip()
    assert cli.stdout == msg_id + "\n"
    assert MSG_ID_RE.fullmatch(msg_id)

    calls = fake.wait_for_prompts(lambda calls: len(calls) >= 1, timeout_s=PATIENCE_S)
    assert len(calls) == 1
    (prompt,) = calls
    assert prompt.session == "ses_target"
    assert prompt.status == 204
    assert prompt.directory == str(target_dir)
    assert prompt.body == {
        "parts": [
            {
                "type": "text",
                "text": '<swarm_message v="1" kind="chat" from="ses_sender" to="ses_target"'
                f' msg_id="{msg_id}" priority="normal" from_verified="unverified">'
                "\nhello &lt;b&gt;\n</swarm_message>",
            }
        ]
    }

    connect = tcp(daemon)

    def inbox() -> dict[str, Any] | None:
        status, page = call(connect, "GET", "/swarm/inbox?session=ses_target")
        assert status == 200, page
        return page if page["messages"] else None

    page = wait_until(inbox, PATIENCE_S, "the message in the inbox")
    assert page["has_more"] is False
    assert isinstance(page["next_cursor"], str) and page["next_cursor"]
    (message,) = page["messages"]
    assert {k: message[k] for k in ("msg_id", "from", "to", "channel", "kind", "priority")} == {
        "msg_id": msg_id,
        "from": "ses_sender",
        "to": "ses_target",
        "channel": None,
        "kind": "chat",
        "priority": "normal",
    }
    assert message["payload"] == "hello <b>"
    assert isinstance(message["handed_off_at"], int)
    # reading on from the cursor finds nothing new, and keeps the cursor
    status, after = call(
        connect, "GET", f"/swarm/inbox?session=ses_target&since={page['next_cursor']}"
    )
    assert status == 200
    assert after == {"messages": [], "has_more": False, "next_cursor": page["next_cursor"]}
    # one prompt only: a later message to the target is handed off alone, so the drain
    # that read the target's queue again (and the ticks meanwhile) found the first done
    later = send(connect, "ses_target", "later")
    fake.wait_for_prompts(lambda calls: len(calls) >= 2, timeout_s=PATIENCE_S)
    assert [c.msg_id for c in fake.prompt_calls()] == [msg_id, later]


def test_pigeon_send_wait_returns_once_handed_off(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory
) -> None:
    """pigeon-send --wait prints the msg_id and exits 0 once the message is handed off."""
    fake.add_session("ses_target")
    daemon = daemons.start(tmp_path / "p.db", opencode_url=fake.url)
    cli = subprocess.run(
        [str(PIGEON_SEND), "--url", daemon.base_url, "--from", "ses_a", "--wait",
         "--timeout", WAIT_TIMEOUT, "ses_target", "hello"],
        capture_output=True, text=True, timeout=2 * PATIENCE_S, env=isolated_env(tmp_path / "home"),
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    msg_id = cli.stdout.strip()
    assert [c.msg_id for c in fake.prompt_calls("ses_target")] == [msg_id]


def test_pigeon_send_wait_reports_a_failure(
    tmp_path: Path, fake: FakeOpencode, daemons: DaemonFactory
) -> None:
    """pigeon-send --wait exits 1 with the reason when the message fails for good: here a
    session deleted after pigeond looked it up (a send to one it never had gets 404 at once)."""
    fake.add_session("ses_nobody")
    daemon = daemons.start(tmp_path / "p.db", opencode_url=fake.url)
    send(tcp(daemon), "ses_nobody", "while it was there")  # pigeond caches it as existing
    wait_until(lambda: delivered_ok(fake, "ses_nobody"), PATIENCE_S, "the first hand-off")
    fake.remove_session("ses_nobody")
    cli = subprocess.run(
        [str(PIGEON_SEND), "--url", daemon.base_url, "--from", "ses_a", "--wait",
         "--timeout", WAIT_TIMEOUT, "ses_nobody", "hello"],
        capture_output=True, text=True, timeout=2 * PATIENCE_S, env=isolated_env(tmp_path / "home"),
    )  # fmt: skip
    assert cli.returncode == 1
    assert "failed: session not found" in cli.stderr
