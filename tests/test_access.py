"""The trust boundary, in memory: who may call which route, and what a browser can do."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.address import UNIXAddress
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.http_headers import Headers

from pigeond.api.access import AccessPolicy, host_name
from pigeond.api.routes import SwarmRoutes
from pigeond.api.web import JsonApi, make_site
from pigeond.config import Config
from pigeond.storage import SwarmRepository
from pigeond.storage.database import InlineDatabase
from tests.http_helpers import json_body, raw_exchange, result_of, stub_client

TOKEN = "k" * 43
BASE = "http://127.0.0.1:4097"
SEND = {"from": "ses_sender", "to": "ses_target", "payload": "hi"}
JSON = {"Content-Type": "application/json"}
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def gated_api(repo: SwarmRepository, clock: Clock, **policy: Any) -> JsonApi:
    options: dict[str, Any] = {"own_uid": os.getuid(), "token": TOKEN} | policy
    routes = SwarmRoutes(InlineDatabase(repo), clock, Config())
    return routes.install(JsonApi(gate=AccessPolicy(**options)))


def call(
    api: JsonApi,
    method: str,
    path: str,
    headers: dict[str, str],
    body: Any = None,
    base: str = BASE,
) -> tuple[int, dict[str, Any], dict[str, list[str]]]:
    data = None if body is None else json.dumps(body).encode()
    client = stub_client(api)
    response = result_of(
        client.request(
            method, base + path, data=data, headers=Headers({k: [v] for k, v in headers.items()})
        )
    )
    content = result_of(response.content())
    raw_headers = {
        k.decode().lower(): [v.decode() for v in vs]
        for k, vs in response.headers.getAllRawHeaders()
    }
    return response.code, json.loads(content), raw_headers


@pytest.fixture
def api(repo: SwarmRepository, clock: Clock) -> JsonApi:
    return gated_api(repo, clock)


# -- the token on TCP ----------------------------------------------------------------------


def test_send_without_a_token_is_401(api: JsonApi, repo: SwarmRepository) -> None:
    """No credentials over TCP: 401 with a JSON error, and nothing stored."""
    status, body, headers = call(api, "POST", "/swarm/send", JSON, SEND)
    assert status == 401 and "bearer token" in body["error"]
    assert headers["www-authenticate"] == ['Bearer realm="pigeond"']
    assert repo.count_by_state() == {}


def test_wrong_token_is_401(api: JsonApi) -> None:
    """A token that is not the daemon's is refused like none."""
    headers = JSON | {"Authorization": "Bearer " + "x" * 43}
    assert call(api, "POST", "/swarm/send", headers, SEND)[0] == 401


def test_other_scheme_is_401(api: JsonApi) -> None:
    """The right secret under another scheme (Basic) is not a bearer token."""
    headers = JSON | {"Authorization": f"Basic {TOKEN}"}
    assert call(api, "POST", "/swarm/send", headers, SEND)[0] == 401


def test_right_token_is_accepted(api: JsonApi) -> None:
    """With the token the send is accepted."""
    assert call(api, "POST", "/swarm/send", JSON | BEARER, SEND)[0] == 202


@pytest.mark.parametrize(
    "path", ["/swarm/inbox?session=ses_target", "/swarm/message/msg_x", "/no/such/route"]
)
def test_reads_need_the_token_too(api: JsonApi, path: str) -> None:
    """Inbox, status and even unknown paths answer 401 without the token."""
    assert call(api, "GET", path, {})[0] == 401


def test_health_needs_no_token(api: JsonApi) -> None:
    """GET /health stays open, so a supervisor can probe without the secret."""
    status, body, _ = call(api, "GET", "/health", {})
    assert status == 200 and body["ok"] is True


def test_auth_none_lets_anyone_send(repo: SwarmRepository, clock: Clock) -> None:
    """auth = none (documented as unsafe) needs no token."""
    api = gated_api(repo, clock, token=None)
    assert call(api, "POST", "/swarm/send", JSON, SEND)[0] == 202


# -- what a browser can make -----------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_send_that_is_not_json_is_415(api: JsonApi, content_type: str) -> None:
    """A body a web page can POST cross-site without a preflight is refused with 415."""
    headers = BEARER | ({"Content-Type": content_type} if content_type else {})
    status, body, _ = call(api, "POST", "/swarm/send", headers, SEND)
    assert status == 415 and "application/json" in body["error"]


def test_json_with_a_charset_is_fine(api: JsonApi) -> None:
    """``application/json; charset=utf-8`` is JSON."""
    headers = BEARER | {"Content-Type": "application/json; charset=utf-8"}
    assert call(api, "POST", "/swarm/send", headers, SEND)[0] == 202


@pytest.mark.parametrize("path", ["/swarm/send", "/health"])
def test_a_request_with_an_origin_is_403(api: JsonApi, path: str) -> None:
    """Only browsers send Origin: refused on every route, reads included."""
    headers = JSON | BEARER | {"Origin": "http://evil.example"}
    method = "POST" if path == "/swarm/send" else "GET"
    status, body, _ = call(api, method, path, headers, SEND if method == "POST" else None)
    assert status == 403 and "Origin" in body["error"]


def test_an_allowed_origin_passes(repo: SwarmRepository, clock: Clock) -> None:
    """An origin listed in allow_origins is accepted (with the token)."""
    api = gated_api(repo, clock, allow_origins=["http://localhost:3000"])
    headers = JSON | BEARER | {"Origin": "http://localhost:3000"}
    assert call(api, "POST", "/swarm/send", headers, SEND)[0] == 202


@pytest.mark.parametrize("path", ["/swarm/send", "/health"])
def test_a_foreign_host_is_421(api: JsonApi, path: str) -> None:
    """A DNS-rebound page names its own Host: 421 on every route."""
    method = "POST" if path == "/swarm/send" else "GET"
    body = SEND if method == "POST" else None
    status, answer, _ = call(api, method, path, JSON | BEARER, body, base="http://evil.example")
    assert status == 421 and "evil.example" in answer["error"]


@pytest.mark.parametrize(
    "base", ["http://localhost:4097", "http://127.0.0.1:4097", "http://127.9.9.9"]
)
def test_loopback_hosts_pass(api: JsonApi, base: str) -> None:
    """localhost and IPv4 loopback addresses are this daemon's names."""
    assert call(api, "GET", "/health", {}, base=base)[0] == 200


def test_ipv6_loopback_host_passes(repo: SwarmRepository, clock: Clock) -> None:
    """``[::1]:port`` is this daemon's name too."""
    site = make_site(gated_api(repo, clock), Config(max_body_bytes=1024))
    status, _, _ = raw_exchange(site, b"GET /health HTTP/1.1\r\nHost: [::1]:4097\r\n\r\n")
    assert status == 200


def test_allowed_host_passes(repo: SwarmRepository, clock: Clock) -> None:
    """A name in allow_hosts is accepted."""
    api = gated_api(repo, clock, allow_hosts=["pigeond.internal"])
    assert call(api, "GET", "/health", {}, base="http://pigeond.internal:4097")[0] == 200


@pytest.mark.parametrize(
    ("header", "name"),
    [("LocalHost:4097", "localhost"), ("[::1]:80", "::1"), ("example.com.", "example.com")],
)
def test_host_name_parsing(header: str, name: str) -> None:
    """Ports, case, IPv6 brackets and a trailing dot do not change the name."""
    assert host_name(header) == name


def test_missing_host_is_421(repo: SwarmRepository, clock: Clock) -> None:
    """An HTTP/1.0 request with no Host at all is refused too."""
    site = make_site(gated_api(repo, clock), Config(max_body_bytes=1024))
    status, _, body = raw_exchange(site, b"GET /health HTTP/1.0\r\n\r\n")
    assert status == 421 and "Host" in json_body(body)["error"]


# -- a header the gate decides on, twice ----------------------------------------------------

SEND_BODY = json.dumps(SEND).encode()
REPEATED = {
    "Host": b"Host: evil.com\r\nHost: 127.0.0.1\r\n",
    "Authorization": b"Authorization: Bearer %s\r\nAuthorization: Bearer %s\r\n"
    % (TOKEN.encode(), b"x" * 43),
    "Origin": b"Origin: http://a.example\r\nOrigin: http://b.example\r\n",
    "Content-Type": b"Content-Type: text/plain\r\nContent-Type: application/json\r\n",
}


def request_with(extra: bytes) -> bytes:
    """A send with the token and a JSON body, ``extra`` header lines added (each header
    ``extra`` names is left to ``extra`` alone)."""
    names = {line.split(b":")[0].lower() for line in extra.split(b"\r\n") if line}
    lines = [b"POST /swarm/send HTTP/1.1"]
    defaults = {
        b"host": b"Host: 127.0.0.1",
        b"authorization": f"Authorization: Bearer {TOKEN}".encode(),
        b"content-type": b"Content-Type: application/json",
    }
    lines += [line for name, line in defaults.items() if name not in names]
    lines.append(b"Content-Length: %d" % len(SEND_BODY))
    return b"\r\n".join(lines) + b"\r\n" + extra + b"\r\n" + SEND_BODY


@pytest.mark.parametrize("name", list(REPEATED))
def test_a_gated_header_given_twice_is_400(repo: SwarmRepository, clock: Clock, name: str) -> None:
    """Two of Host, Authorization, Origin or Content-Type: 400 naming it, nothing stored."""
    site = make_site(gated_api(repo, clock), Config())
    status, _, body = raw_exchange(site, request_with(REPEATED[name]))
    assert (status, json_body(body)["error"]) == (
        400, f"the request has more than one {name} header"
    )  # fmt: skip
    assert repo.count_by_state() == {}


def test_a_second_authorization_does_not_override_the_first(
    repo: SwarmRepository, clock: Clock
) -> None:
    """A wrong token then the right one is refused too, not read as the last one."""
    site = make_site(gated_api(repo, clock), Config())
    extra = f"Authorization: Bearer {'x' * 43}\r\nAuthorization: Bearer {TOKEN}\r\n".encode()
    assert raw_exchange(site, request_with(extra))[0] == 400


def test_the_same_request_with_each_header_once_is_accepted(
    repo: SwarmRepository, clock: Clock
) -> None:
    """The request the repeated-header tests start from is a good send."""
    site = make_site(gated_api(repo, clock), Config())
    assert raw_exchange(site, request_with(b""))[0] == 202


# -- Unix sockets: the peer's uid ----------------------------------------------------------


class UnixTransport(StringTransport):
    """An in-memory connection that says it came over a Unix socket, with a real peer."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(  # type: ignore[no-untyped-call]
            hostAddress=UNIXAddress(b"/run/p.sock"), peerAddress=UNIXAddress(None)
        )
        self._sock = sock

    def getHandle(self) -> socket.socket:
        return self._sock


@pytest.fixture
def socket_pair() -> Iterator[socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield ours
    ours.close()
    theirs.close()


def unix_exchange(api: JsonApi, sock: socket.socket, request: bytes) -> tuple[int, dict[str, Any]]:
    site = make_site(api, Config(max_body_bytes=64 * 1024))
    protocol = site.buildProtocol(UNIXAddress(None))
    assert protocol is not None
    transport = UnixTransport(sock)
    protocol.makeConnection(transport)
    protocol.dataReceived(request)
    raw: bytes = transport.value()  # type: ignore[no-untyped-call]
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json_body(body)


def unix_send(body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (
        b"POST /swarm/send HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )


def test_own_uid_on_a_unix_socket_needs_no_token(
    repo: SwarmRepository, clock: Clock, socket_pair: socket.socket
) -> None:
    """A peer with pigeond's own uid sends over a Unix socket without a token."""
    status, body = unix_exchange(gated_api(repo, clock), socket_pair, unix_send(SEND))
    assert status == 202, body


def test_another_uid_on_a_unix_socket_is_403(
    repo: SwarmRepository, clock: Clock, socket_pair: socket.socket
) -> None:
    """A peer whose uid is neither pigeond's nor allowed is refused, token or not."""
    api = gated_api(repo, clock, own_uid=os.getuid() + 12345)
    status, body = unix_exchange(api, socket_pair, unix_send(SEND))
    assert status == 403 and f"uid {os.getuid()}" in body["error"]
    assert repo.count_by_state() == {}


def test_allowed_uid_on_a_unix_socket_passes(
    repo: SwarmRepository, clock: Clock, socket_pair: socket.socket
) -> None:
    """A uid listed in allow_uids may send."""
    api = gated_api(repo, clock, own_uid=os.getuid() + 12345, allow_uids=[str(os.getuid())])
    assert unix_exchange(api, socket_pair, unix_send(SEND))[0] == 202


def test_allowed_group_on_a_unix_socket_passes(
    repo: SwarmRepository, clock: Clock, socket_pair: socket.socket
) -> None:
    """A member of allow_group (here by primary group) may send."""
    import grp

    group = grp.getgrgid(os.getgid()).gr_name
    api = gated_api(repo, clock, own_uid=os.getuid() + 12345, allow_group=group)
    assert unix_exchange(api, socket_pair, unix_send(SEND))[0] == 202


def test_reload_changes_the_allow_lists(repo: SwarmRepository, clock: Clock) -> None:
    """configure() applies new allow lists at once (a SIGHUP reload)."""
    policy = AccessPolicy(own_uid=os.getuid(), token=TOKEN)
    api = SwarmRoutes(InlineDatabase(repo), clock, Config()).install(JsonApi(gate=policy))
    assert call(api, "GET", "/health", {}, base="http://pigeond.internal")[0] == 421
    policy.configure(Config(allow_hosts=("pigeond.internal",)))
    assert call(api, "GET", "/health", {}, base="http://pigeond.internal")[0] == 200
