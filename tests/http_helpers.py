"""In-memory HTTP for tests: treq's StubTreq, a raw-bytes driver for our own Site, and
requests to a daemon built on a ``Clock`` as its clients make them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from treq.client import HTTPClient
from treq.testing import StubTreq
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.resource import IResource
from twisted.web.server import Site

from pigeond.credentials import read_token

if TYPE_CHECKING:
    from pigeond.service.daemon import Daemon

T = TypeVar("T")

API = "http://127.0.0.1:4097"
"""Where an in-memory client says it sends its requests (StubTreq ignores it)."""


def stub_client(resource: IResource) -> HTTPClient:
    """treq's in-memory client for a resource, typed as the real client it mimics."""
    return cast(HTTPClient, StubTreq(resource))


def result_of(d: Deferred[T]) -> T:
    """The result of a Deferred that must already have fired successfully."""
    results: list[T] = []
    failures: list[Failure] = []
    d.addCallbacks(results.append, failures.append)
    if failures:
        failures[0].raiseException()
    assert results, "the Deferred has not fired"
    return results[0]


def failure_of(d: Deferred[Any]) -> Failure:
    """The Failure of a Deferred that must already have failed."""
    failures: list[Failure] = []
    d.addErrback(failures.append)
    assert failures, "the Deferred has not failed"
    return failures[0]


def raw_exchange(site: Site, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Feed raw request bytes to the site's protocol; return status, headers, body."""
    protocol = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
    assert protocol is not None
    transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
    protocol.makeConnection(transport)
    protocol.dataReceived(request)
    raw = transport.value()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    protocol.connectionLost(Failure(ConnectionError("test done")))
    return int(status_line.split()[1]), headers, body


def json_body(body: bytes) -> Any:
    return json.loads(body.decode("utf-8"))


def client_headers(daemon: Daemon) -> Headers:
    """What a client of ``daemon`` sends besides its request: JSON as the body type, and
    the bearer token the daemon keeps beside its database."""
    token = read_token(Path(daemon.config.db).parent / "token")
    return Headers({"Content-Type": ["application/json"], "Authorization": [f"Bearer {token}"]})


def daemon_call(
    daemon: Daemon, method: str, path: str, body: Any = None, *, token: bool = True
) -> tuple[int, Any]:
    """One request to the daemon's API, in memory (with its token unless ``token`` is
    false); the status and the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    headers = client_headers(daemon) if token else None
    api = stub_client(daemon.site.resource)
    response = result_of(api.request(method, API + path, data=data, headers=headers))
    return int(response.code), json.loads(result_of(response.content()))
