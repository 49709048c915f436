"""The pieces the daemon's wiring is made of: periodic jobs, what delivery's health is,
the delivery policy and the access policy from a Config, how a listener is named, and
why there is no runtime socket."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace

from treq.client import HTTPClient
from twisted.internet.interfaces import IListeningPort, IReactorTCP, IReactorTime
from twisted.web.client import Agent, HTTPConnectionPool

from pigeond.api.access import AccessPolicy
from pigeond.api.routes import DELIVERY_OFF, DeliveryHealth
from pigeond.config import OPTION_BY_NAME, Config, default_runtime_socket, default_token_path
from pigeond.credentials import load_or_create_token
from pigeond.delivery.arbiter import Arbiter
from pigeond.delivery.events import EventStream
from pigeond.delivery.http_exchange import HttpExchange
from pigeond.delivery.opencode_client import OpencodeClient
from pigeond.delivery.opencode_v2_events import V2Events
from pigeond.delivery.reachability import Reach
from pigeond.delivery.transcript_reads import TranscriptReadWatch
from pigeond.model import Runtime


def both(first: Callable[[bool], None], second: Callable[[bool], None]) -> Callable[[bool], None]:
    """One callback telling two parts (the event stream's state: turns and permissions)."""

    def tell(value: bool) -> None:
        first(value)
        second(value)

    return tell


def delivery_health_of(
    arbiter: Arbiter | None, client: OpencodeClient | None, events: EventStream | None
) -> DeliveryHealth:
    """Delivery as /health, /metrics and the status line tell it."""
    if arbiter is None or client is None:
        return DELIVERY_OFF
    stream = "off" if events is None else ("connected" if events.connected else "down")
    reach = client.reachability
    # opencode answers, but reads of some session's transcript pass their deadline
    slow_reads = client.transcript_reads.problem(Runtime.OPENCODE)
    degraded = reach.state is Reach.OK and slow_reads is not None
    return DeliveryHealth(
        running=arbiter.running,
        ticking=arbiter.ticking_lately(),
        opencode="degraded" if degraded else reach.state.value,
        problem=slow_reads if degraded else None,
        transcripts_problem=client.transcript_reads.problem(),
        event_stream=stream,
        in_flight=len(arbiter.in_flight_targets()),
        unrecorded=len(arbiter.unrecorded()),
        unreachable_since_ms=None if reach.since is None else int(reach.since * 1000),
        unreachable_error=reach.last_error,
    )


def runtime_socket_warning(config: Config, env: Mapping[str, str], chosen: bool) -> str | None:
    """Why clients have no Unix socket, when it is only for want of a default: no
    ``runtime_socket`` was chosen (``chosen``: set by a flag, a variable or the file, even
    to none), none could be defaulted (no ``$XDG_RUNTIME_DIR``, not the system service) and
    ``listen`` is not a Unix socket itself.  A root shell, a container or ssh without
    logind has no ``$XDG_RUNTIME_DIR``; without this line nothing would say so."""
    if chosen or config.runtime_socket or default_runtime_socket(env):
        return None
    if config.listen.lower().startswith("unix:") or "domain=unix" in config.listen.lower():
        return None
    option = OPTION_BY_NAME["runtime_socket"]
    return (
        "no Unix socket: XDG_RUNTIME_DIR is not set (a root shell, a container, ssh without"
        " logind?), so runtime_socket has no default and clients need TCP and the token;"
        f" set runtime_socket ({option.flag}, {option.env_var}) to a socket path, or"
        " XDG_RUNTIME_DIR, to get one"
    )


def describe_address(port: IListeningPort) -> str:
    host = port.getHost()
    if hasattr(host, "port"):
        return f"{host.type.lower()}:{host.host}:{host.port}"  # type: ignore[attr-defined]
    name = getattr(host, "name", b"")
    return "unix:" + (name.decode() if isinstance(name, bytes) else str(name))


def access_policy(config: Config) -> tuple[AccessPolicy, list[str]]:
    """The request gate, with the bearer token made or loaded when ``auth = "token"``;
    also the lines to log once logging runs (never the token itself)."""
    token = None
    notes = []
    if config.auth == "token":
        path = config.token_file or default_token_path(config.db, os.environ)
        token, loosened = load_or_create_token(path)
        notes.append(f"auth: TCP clients need the bearer token kept in {path}")
        if loosened:
            notes.append(
                f"the token file {path} was readable by others; made it private"
                " again (delete it and restart to make a new token)"
            )
    else:
        notes.append("auth: none (UNSAFE: anyone who can connect can prompt your agents)")
    policy = AccessPolicy(
        own_uid=os.getuid(), token=token, allow_uids=config.allow_uids,
        allow_group=config.allow_group, allow_origins=config.allow_origins,
        allow_hosts=config.allow_hosts,
    )  # fmt: skip
    return policy, notes


def delivery_health_with_api(
    arbiter: Arbiter | None,
    client: OpencodeClient | None,
    events: EventStream | None,
    v2_events: V2Events | None = None,
) -> DeliveryHealth:
    """:func:`delivery_health_of`, and which API opencode speaks: a 2.x (its version, and
    its own event stream's state, ``v2_events``, not the 1.x one's), or one pigeond does
    not speak."""
    health = delivery_health_of(arbiter, client, events)
    if client is None or health is DELIVERY_OFF:
        return health
    if client.api.v2_version is not None:
        stream = "off" if v2_events is None else ("connected" if v2_events.connected else "down")
        return replace(health, opencode_version=client.api.v2_version, event_stream=stream)
    if client.api.problem is None:
        return health
    return replace(health, opencode="unsupported", problem=client.api.problem)


def connect_timeout_s(config: Config) -> float:
    """How long a connection to opencode may take to open: at most 10 s, and never longer
    than a whole call may."""
    return min(10.0, config.handoff_timeout_s)


def opencode_client(
    config: Config, reactor: IReactorTime, http: HTTPClient | None, reads: TranscriptReadWatch
) -> tuple[OpencodeClient, HTTPConnectionPool | None]:
    """The client of opencode (``http`` when a test passes one), and the connection pool
    made for it, which the daemon closes when it stops: persistent connections for the
    calls (a lean exchange for ``http://``; treq keeps the event stream), which the
    reactor makes: it must provide IReactorTCP too (a test's Clock passes ``http``)."""
    if http is not None:
        return OpencodeClient(
            http, config.opencode_url, reactor, config, auth=config.opencode_auth,
            transcript_reads=reads,
        ), None  # fmt: skip
    pool = HTTPConnectionPool(reactor, persistent=True)
    pool.maxPersistentPerHost = 16
    connect_timeout = connect_timeout_s(config)
    http = HTTPClient(Agent(reactor, pool=pool, connectTimeout=connect_timeout))
    exchange = None
    if config.opencode_url.startswith("http://"):
        exchange = HttpExchange(
            IReactorTCP(reactor), config.opencode_url, connect_timeout_s=connect_timeout,
            auth=config.opencode_auth,
        )  # fmt: skip
    client = OpencodeClient(
        http, config.opencode_url, reactor, config, auth=config.opencode_auth,
        exchange=exchange, transcript_reads=reads,
    )  # fmt: skip
    return client, pool
