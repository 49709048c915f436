"""``pigeon-send`` (:func:`pigeond.cli.pigeon_send.main`) against a small stdlib HTTP server."""

from __future__ import annotations

import argparse
import io
import json
import re
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pigeond.cli import pigeon_args, pigeon_send
from pigeond.cli.daemon_http import URL_HELP
from pigeond.cli.pigeon_send import main, request_timeout_s
from pigeond.cli.pigeon_send_args import DEFAULT_RETRY_FOR_S, FORMS, build_parser
from pigeond.credentials import address_order
from tests.ports import closed_port

SESSION = "ses_sender01"
TARGET = "ses_target01"
MSG_ID = "msg_0123456789abcdef"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        parsed = json.loads(self.body.decode("utf-8"))
        assert isinstance(parsed, dict)
        return parsed


@dataclass
class FakeDaemon:
    """What the fake daemon records and how it answers."""

    url: str
    status: int = 202
    body: bytes = json.dumps({"accepted": True, "msg_id": MSG_ID}).encode()
    content_type: str = "application/json"
    requests: list[Recorded] = field(default_factory=list)
    # answers given before the standing one: (status, JSON body, extra headers)
    first: list[tuple[int, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    # how many requests, first, are read and then dropped: the connection closes unanswered
    drop: int = 0

    def answer(self, status: int, body: dict[str, Any] | str) -> None:
        self.status = status
        if isinstance(body, str):
            self.body, self.content_type = body.encode(), "text/plain"
        else:
            self.body, self.content_type = json.dumps(body).encode(), "application/json"

    @property
    def last(self) -> Recorded:
        assert len(self.requests) == 1, self.requests
        return self.requests[0]


def make_handler(daemon_ref: list[FakeDaemon]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            fake = daemon_ref[0]
            length = int(self.headers.get("content-length") or 0)
            fake.requests.append(
                Recorded(
                    "POST",
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                )
            )
            if fake.drop > 0:
                fake.drop -= 1
                self.close_connection = True
                return
            status, body, content_type = fake.status, fake.body, fake.content_type
            extra: dict[str, str] = {}
            if fake.first:
                status, answer, extra = fake.first.pop(0)
                body, content_type = json.dumps(answer).encode(), "application/json"
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[None]:
    """Run server.serve_forever in a thread for the duration of the block."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class _TCPServer(ThreadingHTTPServer):
    daemon_threads = True


class _UnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


@pytest.fixture
def fake() -> Iterator[FakeDaemon]:
    """A recording HTTP server on 127.0.0.1 with an ephemeral port."""
    ref: list[FakeDaemon] = []
    server = _TCPServer(("127.0.0.1", 0), make_handler(ref))
    ref.append(FakeDaemon(url=f"http://127.0.0.1:{server.server_address[1]}"))
    with serving(server):
        yield ref[0]


@contextmanager
def unix_daemon(path: Path) -> Iterator[FakeDaemon]:
    """The recording server on an AF_UNIX socket at ``path`` for the block."""
    ref: list[FakeDaemon] = []
    server = _UnixServer(str(path), make_handler(ref))
    ref.append(FakeDaemon(url=f"unix:{path}"))
    with serving(server):
        yield ref[0]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path, for sockets (a socket's path is under 108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="pgs") as short:
        yield Path(short)


@pytest.fixture
def unix_fake(short_dir: Path) -> Iterator[FakeDaemon]:
    """The same recording server on an AF_UNIX socket."""
    with unix_daemon(short_dir / "d.sock") as fake:
        yield fake


def send(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str] | None = None,
    stdin: io.StringIO | io.TextIOWrapper | None = None,
) -> tuple[int, str, str]:
    """Run pigeon-send's main with an explicit env; return (exit code, stdout, stderr)."""
    code = main(argv, env={} if env is None else env, stdin=stdin or io.StringIO(""))
    out, err = capsys.readouterr()
    return code, out, err


# --- accepted ----------------------------------------------------------------------


def test_accepted_prints_msg_id_and_exits_0(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 202 with a msg_id exits 0 and prints exactly the msg_id on stdout."""
    code, out, err = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "hello"])
    assert code == 0
    assert out == MSG_ID + "\n"
    assert err == ""


def test_posts_json_to_swarm_send(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """The message is POSTed as JSON to /swarm/send: from/to/payload and a msg_id made here."""
    send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "hello"])
    request = fake.last
    assert request.method == "POST"
    assert request.path == "/swarm/send"
    assert request.headers["content-type"] == "application/json"
    body = request.json()
    assert re.fullmatch(r"msg_[0-9a-z]+_[0-9a-f]{8}", body.pop("msg_id"))
    assert body == {"from": SESSION, "to": TARGET, "payload": "hello"}


def test_body_carries_every_option_as_given(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """--kind/--priority/--reply-to/--msg-id/--ttl are sent beside from/to/payload."""
    argv = [
        "--url",
        fake.url,
        "--from",
        SESSION,
        "--kind",
        "task.assign",
        "--priority",
        "urgent",
        "--reply-to",
        "msg_earlier",
        "--msg-id",
        "msg_mine_1",
        "--ttl",
        "120",
        TARGET,
        "do the thing ✓",
    ]
    code, _, _ = send(capsys, argv)
    assert code == 0
    assert fake.last.json() == {
        "from": SESSION,
        "to": TARGET,
        "payload": "do the thing ✓",
        "kind": "task.assign",
        "priority": "urgent",
        "reply_to": "msg_earlier",
        "msg_id": "msg_mine_1",
        "ttl_s": 120,
    }


@pytest.mark.parametrize("ttl", ["0", "-5", "soon"])
def test_bad_ttl_is_usage_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], ttl: str
) -> None:
    """--ttl must be a positive whole number of seconds; nothing is sent otherwise."""
    code, _, err = send(capsys, ["--url", fake.url, "--from", SESSION, "--ttl", ttl, TARGET, "x"])
    assert code == 2 and "Traceback" not in err
    assert fake.requests == []


@pytest.mark.parametrize(
    ("flags", "sent"),
    [
        (["--expects-reply"], {"expects_reply": True}),
        (["--no-expects-reply"], {"expects_reply": False}),
        (["--reply-within", "600"], {"reply_within_s": 600}),
        ([], {}),
    ],
)
def test_reply_flags_are_sent_as_given(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], flags: list[str], sent: dict[str, object]
) -> None:
    """--expects-reply / --no-expects-reply / --reply-within become the body's fields."""
    code, _, _ = send(capsys, ["--url", fake.url, "--from", SESSION, *flags, TARGET, "x"])
    body = fake.last.json()
    assert code == 0
    assert {k: v for k, v in body.items() if k in ("expects_reply", "reply_within_s")} == sent


@pytest.mark.parametrize("within", ["0", "-5", "soon"])
def test_bad_reply_within_is_usage_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], within: str
) -> None:
    """--reply-within must be a positive whole number of seconds; nothing is sent otherwise."""
    argv = ["--url", fake.url, "--from", SESSION, "--reply-within", within, TARGET, "x"]
    code, _, err = send(capsys, argv)
    assert code == 2 and "Traceback" not in err
    assert fake.requests == []


def test_url_path_prefix_is_kept(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """A --url with a path prefix posts to PREFIX/swarm/send."""
    send(capsys, ["--url", fake.url + "/pigeon/", "--from", SESSION, TARGET, "x"])
    assert fake.last.path == "/pigeon/swarm/send"


# --- sender ------------------------------------------------------------------------


def test_from_defaults_to_opencode_session_id(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --from the sender is $OPENCODE_SESSION_ID."""
    code, _, _ = send(capsys, ["--url", fake.url, TARGET, "hi"], {"OPENCODE_SESSION_ID": SESSION})
    assert code == 0
    assert fake.last.json()["from"] == SESSION


def test_from_flag_beats_opencode_session_id(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """--from wins over $OPENCODE_SESSION_ID."""
    env = {"OPENCODE_SESSION_ID": "ses_other"}
    send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "hi"], env)
    assert fake.last.json()["from"] == SESSION


@pytest.mark.parametrize("env", [{}, {"OPENCODE_SESSION_ID": ""}])
def test_missing_sender_is_usage_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], env: dict[str, str]
) -> None:
    """No --from and no (or empty) OPENCODE_SESSION_ID exits 2 without contacting the daemon."""
    code, out, err = send(capsys, ["--url", fake.url, TARGET, "hi"], env)
    assert code == 2
    assert out == ""
    assert "sender" in err
    assert fake.requests == []


# --- targets and payload ---------------------------------------------------------------


def test_channel_form_sends_channel_not_to(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """--channel NAME PAYLOAD sends 'channel' and no 'to'."""
    code, _, _ = send(capsys, ["--url", fake.url, "--from", SESSION, "--channel", "ops", "hey"])
    assert code == 0
    body = fake.last.json()
    assert body["channel"] == "ops"
    assert "to" not in body
    assert body["payload"] == "hey"


def test_dash_reads_payload_from_stdin(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """A payload of '-' is read whole from stdin, newlines included."""
    text = "line one\nline two ✓\n"
    code, _, _ = send(
        capsys, ["--url", fake.url, "--from", SESSION, TARGET, "-"], stdin=io.StringIO(text)
    )
    assert code == 0
    assert fake.last.json()["payload"] == text


def test_dash_with_channel_reads_stdin(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """--channel NAME - also reads the payload from stdin."""
    send(
        capsys,
        ["--url", fake.url, "--from", SESSION, "--channel", "ops", "-"],
        stdin=io.StringIO("from stdin"),
    )
    assert fake.last.json()["payload"] == "from stdin"


def test_stdin_not_utf8_is_usage_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stdin payload that is not UTF-8 exits 2 with a message, nothing sent."""
    stdin = io.TextIOWrapper(io.BytesIO(b"\xff\xfe bad"), encoding="utf-8")
    code, _, err = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "-"], stdin=stdin)
    assert code == 2
    assert "UTF-8" in err
    assert fake.requests == []


# --- rejected (4xx) --------------------------------------------------------------------


def test_400_exits_1_with_daemon_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 400 exits 1 and prints the daemon's error text on stderr, nothing on stdout."""
    fake.answer(400, {"error": "to must be a session id like ses_..."})
    code, out, err = send(capsys, ["--url", fake.url, "--from", SESSION, "bad", "x"])
    assert code == 1
    assert out == ""
    assert "to must be a session id like ses_..." in err
    assert "400" in err


def test_409_exits_1(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """A 409 (msg_id reused with other content) exits 1 even though the body has a msg_id."""
    fake.answer(409, {"error": "msg_id is already used", "msg_id": MSG_ID})
    code, out, err = send(
        capsys, ["--url", fake.url, "--from", SESSION, "--msg-id", MSG_ID, TARGET, "x"]
    )
    assert code == 1
    assert out == ""
    assert "msg_id is already used" in err


def test_4xx_plain_text_body_is_shown(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """A 4xx whose body is not JSON still exits 1 and shows the text."""
    fake.answer(413, "request body too large")
    code, _, err = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"])
    assert code == 1
    assert "request body too large" in err


# --- unavailable (exit 3) ----------------------------------------------------------


def test_500_exits_3_without_a_retry(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """A 500 exits 3 at once with the daemon's error on stderr: it is not tried again."""
    fake.answer(500, {"error": "internal error"})
    code, out, err = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"])
    assert (code, out) == (3, "")
    assert err == "pigeon-send: daemon error (500): internal error\n"
    assert len(fake.requests) == 1


def test_2xx_without_msg_id_is_not_success(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 2xx answer without a msg_id is not reported as accepted."""
    fake.answer(200, {"ok": True})
    code, out, _ = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"])
    assert code != 0
    assert out == ""


def test_connection_refused_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listening on the port exits 3 with 'unreachable' on stderr."""
    url = f"http://127.0.0.1:{closed_port()}"
    code, out, err = send(
        capsys, ["--url", url, "--retry-for", "0", "--from", SESSION, TARGET, "x"]
    )
    assert code == 3
    assert out == ""
    assert "unreachable" in err


def test_silent_server_times_out_with_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    """A daemon that accepts but never answers exits 3 after about --timeout seconds."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        code, out, _ = send(
            capsys, ["--url", url, "--timeout", "0.5", "--from", SESSION, TARGET, "x"]
        )
        elapsed = time.monotonic() - start
    assert code == 3
    assert out == ""
    assert 0.4 <= elapsed < 5.0


def test_missing_unix_socket_exits_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A unix: URL whose socket file does not exist exits 3."""
    url = f"unix:{tmp_path / 'absent.sock'}"
    code, _, err = send(capsys, ["--url", url, "--retry-for", "0", "--from", SESSION, TARGET, "x"])
    assert code == 3
    assert "unreachable" in err


# --- URL selection -------------------------------------------------------------------


def test_url_from_pigeond_url(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --url the daemon address comes from $PIGEOND_URL."""
    code, out, _ = send(capsys, ["--from", SESSION, TARGET, "x"], {"PIGEOND_URL": fake.url})
    assert code == 0
    assert out.strip() == MSG_ID
    assert len(fake.requests) == 1


def test_url_flag_beats_pigeond_url(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """--url wins over $PIGEOND_URL."""
    env = {"PIGEOND_URL": f"http://127.0.0.1:{closed_port()}"}
    code, _, _ = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"], env)
    assert code == 0
    assert len(fake.requests) == 1


def test_default_url_is_localhost_4097() -> None:
    """The built-in daemon URL is http://127.0.0.1:4097."""
    assert pigeon_send.DEFAULT_URL == "http://127.0.0.1:4097"


@pytest.mark.parametrize("env", [{}, {"PIGEOND_URL": ""}])
def test_no_url_uses_default(
    fake: FakeDaemon,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
) -> None:
    """Without --url and with PIGEOND_URL unset or empty, DEFAULT_URL is used."""
    monkeypatch.setattr(pigeon_send, "DEFAULT_URL", fake.url)
    code, _, _ = send(capsys, ["--from", SESSION, TARGET, "x"], env)
    assert code == 0
    assert len(fake.requests) == 1


def test_unix_url_works(unix_fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """--url unix:/path.sock talks HTTP over an AF_UNIX socket."""
    code, out, _ = send(capsys, ["--url", unix_fake.url, "--from", SESSION, TARGET, "over unix"])
    assert code == 0
    assert out.strip() == MSG_ID
    assert unix_fake.last.path == "/swarm/send"
    assert unix_fake.last.json()["payload"] == "over unix"


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1:1", "127.0.0.1:4097", "unix:", "http://127.0.0.1:99999", "http://"]
)
def test_bad_url_is_usage_error(capsys: pytest.CaptureFixture[str], url: str) -> None:
    """An --url that is not http(s)://HOST[:PORT] or unix:PATH exits 2 with no traceback."""
    code, out, err = send(capsys, ["--url", url, "--from", SESSION, TARGET, "x"])
    assert code == 2
    assert out == ""
    assert err.startswith("pigeon-send: ")
    assert "Traceback" not in err


# --- usage errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    "positional",
    [[], [TARGET], [TARGET, "a", "b"], ["--channel", "ops", TARGET, "x"], ["--channel", "ops"]],
)
def test_wrong_argument_count_is_usage_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], positional: list[str]
) -> None:
    """TO PAYLOAD (or --channel NAME PAYLOAD) with too few or too many arguments exits 2."""
    code, out, err = send(capsys, ["--url", fake.url, "--from", SESSION, *positional])
    assert code == 2
    assert out == ""
    assert err != ""
    assert fake.requests == []


def test_invalid_kind_is_usage_error(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """--kind not in the vocabulary exits 2 with argparse's message and no traceback."""
    code, out, err = send(
        capsys, ["--url", fake.url, "--from", SESSION, "--kind", "gossip", TARGET, "x"]
    )
    assert code == 2
    assert out == ""
    assert "gossip" in err
    assert "Traceback" not in err
    assert fake.requests == []


def test_invalid_priority_is_usage_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """--priority not in urgent/normal/low exits 2."""
    code, _, _ = send(
        capsys, ["--url", fake.url, "--from", SESSION, "--priority", "asap", TARGET, "x"]
    )
    assert code == 2
    assert fake.requests == []


@pytest.mark.parametrize("timeout", ["0", "-1", "soon"])
def test_bad_timeout_is_usage_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], timeout: str
) -> None:
    """A --timeout that is not a positive number exits 2."""
    code, _, _ = send(
        capsys, ["--url", fake.url, "--timeout", timeout, "--from", SESSION, TARGET, "x"]
    )
    assert code == 2
    assert fake.requests == []


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """--help prints usage on stdout and exits 0."""
    code, out, _ = send(capsys, ["--help"])
    assert code == 0
    assert "pigeon-send" in out


# --- the token and the flood guard --------------------------------------------------------

TOKEN = "t" * 43


def test_token_from_the_environment_is_sent_as_bearer(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """PIGEOND_TOKEN goes out as ``Authorization: Bearer`` over TCP."""
    send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"], env={"PIGEOND_TOKEN": TOKEN})
    assert fake.last.headers["authorization"] == f"Bearer {TOKEN}"


def test_token_from_the_named_file(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """PIGEOND_TOKEN_FILE names the file the token is read from."""
    token_file = tmp_path / "tok"
    token_file.write_text(TOKEN + "\n")
    env = {"PIGEOND_TOKEN_FILE": str(token_file)}
    send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"], env=env)
    assert fake.last.headers["authorization"] == f"Bearer {TOKEN}"


def test_token_from_the_default_location(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """With neither variable, the token beside the default database is used."""
    (tmp_path / "state" / "pigeond").mkdir(parents=True)
    (tmp_path / "state" / "pigeond" / "token").write_text(TOKEN)
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"], env=env)
    assert fake.last.headers["authorization"] == f"Bearer {TOKEN}"


def test_unreadable_token_file_is_a_usage_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A PIGEOND_TOKEN_FILE that is not there is named; nothing is sent."""
    env = {"PIGEOND_TOKEN_FILE": str(tmp_path / "missing")}
    code, _, err = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"], env=env)
    assert code == 2 and "missing does not exist" in err
    assert fake.requests == []


def test_no_token_over_a_unix_socket(
    unix_fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a Unix socket the peer is known to the kernel: the token stays home."""
    argv = ["--url", unix_fake.url, "--from", SESSION, TARGET, "x"]
    send(capsys, argv, env={"PIGEOND_TOKEN": TOKEN})
    assert "authorization" not in unix_fake.last.headers


def test_429_is_retried_with_the_same_msg_id(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 429 is waited out (Retry-After) and the same msg_id is sent again."""
    fake.first.append((429, {"error": "too many"}, {"Retry-After": "1"}))
    code, out, _ = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"])
    assert code == 0 and out.strip() == MSG_ID
    ids = [r.json()["msg_id"] for r in fake.requests]
    assert len(ids) == 2 and ids[0] == ids[1]


def test_429_beyond_the_retry_budget_is_exit_3(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """When Retry-After is longer than --retry-for allows, it stops: NOT sent, exit 3."""
    fake.first.append(
        (429, {"error": "sender ses_sender01 is over its rate"}, {"Retry-After": "60"})
    )
    argv = ["--url", fake.url, "--retry-for", "2", "--from", SESSION, TARGET, "x"]
    code, out, err = send(capsys, argv)
    assert (code, out) == (3, "")
    assert "NOT sent" in err and "over its rate" in err
    assert len(fake.requests) == 1


# --- an unreachable daemon: --retry-for ------------------------------------------------

PIGEON_SEND = Path(sys.executable).parent / "pigeon-send"


def test_a_daemon_that_comes_up_while_retrying_gets_the_message(short_dir: Path) -> None:
    """No socket yet: pigeon-send says it is trying again, and sends once the daemon is up."""
    path = short_dir / "late.sock"
    argv = [str(PIGEON_SEND), "--url", f"unix:{path}", "--retry-for", "60", "--from", SESSION]
    with subprocess.Popen(
        [*argv, TARGET, "late"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stderr is not None
        note = proc.stderr.readline()
        with unix_daemon(path) as fake:
            out, err = proc.communicate(timeout=60)
    assert note.startswith(f"pigeon-send: daemon at unix:{path} unreachable: ")
    assert note.endswith("; trying again for up to 60 s (--retry-for)\n")
    assert (proc.returncode, out, err) == (0, MSG_ID + "\n", "")
    assert [r.json()["payload"] for r in fake.requests] == ["late"]


def test_nothing_there_until_the_deadline_is_exit_3_saying_how_long(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Still no daemon at the end of --retry-for: exit 3, the tries and the time said."""
    url = f"unix:{tmp_path / 'absent.sock'}"
    code, out, err = send(
        capsys, ["--url", url, "--retry-for", "0.6", "--from", SESSION, TARGET, "x"]
    )
    note, last = err.splitlines()
    assert (code, out) == (3, "")
    assert note.endswith("; trying again for up to 0.6 s (--retry-for)")
    said = re.fullmatch(
        rf"pigeon-send: daemon at {re.escape(url)} unreachable: .*No such file or directory;"
        r" (\d+) tries over (\d+\.\d) s \(--retry-for 0\.6\); nothing was sent",
        last,
    )
    assert said is not None, last
    assert int(said[1]) >= 2 and float(said[2]) >= 0.6


def test_a_connection_dropped_before_the_answer_is_retried_with_the_same_msg_id(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """A daemon that read the send and closed without answering gets it again, same msg_id."""
    fake.drop = 1
    code, out, err = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"])
    ids = [r.json()["msg_id"] for r in fake.requests]
    assert (code, out) == (0, MSG_ID + "\n")
    assert "trying again" in err
    assert len(ids) == 2 and ids[0] == ids[1]


def test_a_503_is_retried_with_the_same_msg_id(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 503 (storage unavailable, too many connections) is tried again, same msg_id."""
    fake.first.append((503, {"error": "storage unavailable, nothing stored"}, {}))
    code, out, err = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"])
    ids = [r.json()["msg_id"] for r in fake.requests]
    assert (code, out) == (0, MSG_ID + "\n")
    assert err.startswith(f"pigeon-send: daemon at {fake.url} answered 503: storage unavailable")
    assert len(ids) == 2 and ids[0] == ids[1]


def test_a_503_until_the_deadline_is_exit_3_saying_how_long(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """A daemon answering 503 to the end: exit 3, its error and the tries said."""
    fake.answer(503, {"error": "storage unavailable, nothing stored"})
    argv = ["--url", fake.url, "--retry-for", "0.3", "--from", SESSION, TARGET, "x"]
    code, out, err = send(capsys, argv)
    said = re.fullmatch(
        r"pigeon-send: daemon error \(503\): storage unavailable, nothing stored;"
        r" (\d+) tries over (\d+\.\d) s \(--retry-for 0\.3\)",
        err.splitlines()[-1],
    )
    assert (code, out) == (3, "")
    assert said is not None, err
    assert int(said[1]) == len(fake.requests) >= 2 and float(said[2]) >= 0.3


def test_a_400_is_not_retried(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """A 4xx other than 429 is the daemon's final word: one try, exit 1."""
    fake.answer(400, {"error": "payload must not be empty"})
    code, _, err = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"])
    assert code == 1
    assert err == "pigeon-send: rejected (400): payload must not be empty\n"
    assert len(fake.requests) == 1


@pytest.mark.parametrize("given", ["-1", "3601", "soon"])
def test_a_bad_retry_for_is_a_usage_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """--retry-for is seconds from 0 to 3600; nothing is sent otherwise."""
    code, _, _ = send(
        capsys, ["--url", fake.url, "--retry-for", given, "--from", SESSION, TARGET, "x"]
    )
    assert code == 2
    assert fake.requests == []


def test_the_retry_default_is_the_plugins() -> None:
    """--retry-for defaults to what swarm_send retries for (PIGEOND_SEND_RETRY_S unset)."""
    plugin = (Path(__file__).resolve().parent.parent / "packaging" / "opencode-plugin"
              / "pigeond-swarm.js").read_text()  # fmt: skip
    [declared] = re.findall(r"^const DEFAULT_SEND_RETRY_S = (\d+);$", plugin, re.MULTILINE)
    assert float(declared) == DEFAULT_RETRY_FOR_S
    assert f"(default {declared}," in " ".join(build_parser().format_help().split())


# --- the help says what it does ---------------------------------------------------------


def form_argv(form: str) -> list[str]:
    """One of FORMS with its placeholders filled in."""
    sample = {"TO": TARGET, "PAYLOAD": "hello", "NAME": "ops"}
    return [sample.get(word, word) for word in form.split()]


@pytest.mark.parametrize("form", FORMS)
def test_each_form_of_the_usage_line_is_accepted(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    """Every command line the usage line offers sends a message."""
    code, out, _ = send(capsys, ["--url", fake.url, "--from", SESSION, *form_argv(form)])
    assert (code, out) == (0, MSG_ID + "\n")


def test_the_usage_line_offers_exactly_the_forms() -> None:
    """The usage line is the accepted forms, and nothing repeated (one TO PAYLOAD only)."""
    usage = build_parser().format_usage().replace("usage:", "").splitlines()
    assert [line.strip() for line in usage] == [f"pigeon-send [OPTION ...] {f}" for f in FORMS]


def test_msg_id_help_says_pigeon_send_makes_it(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """--msg-id's help says pigeon-send makes one, and the request carries one made here."""
    help_text = " ".join(build_parser().format_help().split())
    send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "x"])
    assert "(default: pigeon-send makes one, the same for every retry)" in help_text
    assert re.fullmatch(r"msg_[0-9a-z]+_[0-9a-f]{8}", fake.last.json()["msg_id"])


def url_helps(parser: argparse.ArgumentParser) -> list[str | None]:
    """The help of every --url in ``parser`` and its subcommands, however deep."""
    helps: list[str | None] = []
    for action in parser._actions:
        if "--url" in action.option_strings:
            helps.append(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                helps.extend(url_helps(sub))
    return helps


def test_every_url_option_says_the_order_clients_look_in() -> None:
    """pigeon-send's --url and every pigeon verb's say the one text, made from the order."""
    helps = url_helps(build_parser()) + url_helps(pigeon_args.build_parser())
    assert len(helps) >= 6  # pigeon-send, inbox, name set|release, channel join|leave
    assert set(helps) == {URL_HELP}
    assert URL_HELP.endswith(f"(default: {address_order()})")


@pytest.mark.parametrize(
    ("timeout", "wait", "each"),
    [(None, False, 10.0), (30.0, False, 30.0), (30.0, True, 10.0), (2.0, True, 2.0)],
)
def test_timeout_is_each_requests_and_with_wait_the_whole_waits(
    timeout: float | None, wait: bool, each: float
) -> None:
    """--timeout bounds one request (default 10); with --wait it is the whole wait and each
    request takes at most the default."""
    assert request_timeout_s(timeout, wait=wait) == each


def test_thread_is_sent_as_given(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """--thread names the thread the message belongs to."""
    send(capsys, ["--url", fake.url, "--from", SESSION, "--thread", "review:7", TARGET, "hi"])
    assert fake.last.json()["thread"] == "review:7"


def test_a_held_send_prints_its_msg_id_and_why(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 202 that says held: the msg_id on stdout (exit 0), "held: <reason>" on stderr."""
    reason = "thread thr_1 reached 12 hops without a person; a person must release it"
    fake.answer(202, {"accepted": True, "msg_id": MSG_ID, "thread": "thr_1",
                      "held": {"brake": "hops", "reason": reason}})  # fmt: skip
    code, out, err = send(capsys, ["--url", fake.url, "--from", SESSION, TARGET, "hi"])
    assert (code, out) == (0, MSG_ID + "\n")
    assert err.startswith(f"pigeon-send: held: {reason} (")


def test_steer_is_sent_with_urgent(fake: FakeDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """``--steer --priority urgent`` asks the daemon to steer."""
    code, _, _ = send(
        capsys,
        ["--url", fake.url, "--from", SESSION, "--priority", "urgent", "--steer", TARGET, "x"],
    )
    assert code == 0
    assert (fake.last.json()["priority"], fake.last.json()["steer"]) == ("urgent", True)


def test_steer_without_urgent_is_usage_error(
    fake: FakeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """--steer goes with --priority urgent only: otherwise exit 2, nothing sent."""
    code, _, err = send(capsys, ["--url", fake.url, "--from", SESSION, "--steer", TARGET, "x"])
    assert (code, fake.requests) == (2, [])
    assert "--steer goes with --priority urgent" in err
