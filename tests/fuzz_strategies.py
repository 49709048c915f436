"""Hypothesis strategies for hostile HTTP requests to pigeond, shared by the fuzzers.

:func:`requests_to_routes` makes well-framed HTTP/1.1 requests whose every part is drawn
from what the API takes and what it must refuse (methods, paths, query parameters, the
gate's headers, send bodies), so both the gate and each handler see garbage.
:func:`hostile_bytes` breaks the HTTP itself: bad request lines and separators, bad
``Content-Length`` and chunked framing, long and many headers, raw random bytes.

Values are drawn from the field's own rule (model.py's patterns) as often as from garbage,
so that a request gets past the first check often enough to reach the later ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_from_bytes

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from pigeond.api.send_request import MAX_TTL_S
from pigeond.model import CHANNEL_RE, KINDS, MSG_ID_RE, PRIORITIES, SENDER_RE, SESSION_ID_RE


def bounded(max_examples: int) -> settings:
    """A fuzz run's settings: ``max_examples`` of them, the same ones every run (a failure in
    ``make test`` reproduces), no example database written into the checkout."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        # no "explain" phase: it replays a failure many times over, slowly for big requests
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def has_traceback(text: bytes) -> bool:
    """Python's traceback header, or one of its frame lines."""
    return b"Traceback (most recent call last)" in text or b'File "/' in text


# Strings that broke, or could break, something somewhere: empty, NUL, lone surrogates,
# bidi and BOM, pigeond's reserved names, one past each length limit, numbers of 5,000
# digits, cursors, path tricks.
NASTY_STRINGS = (
    "",
    " ",
    "\x00",
    "\ud800",
    "\udfff",
    "a\ud800b",
    "\u202e",
    "\ufeff",
    "\r\n",
    "pigeond",
    "PigeonD.notice",
    "pigeond_x",
    "ses_",
    "ses_" + "a" * 129,
    "msg_" + "a" * 129,
    "ses_a\n",
    "9" * 5000,
    "-1",
    "0",
    "1e3",
    "0x10",
    "cur_0",
    "cur_999999999999999999",
    "cur_" + "9" * 19,
    "../../etc/passwd",
    "%00",
    "%ff",
    "<swarm_message>",
    "null",
    "{}",
)

# A few fixed names, so sends collide (409), fill a target (429) and find what was stored.
SESSIONS = ("ses_a", "ses_b", "ses_target")
SENDERS = ("ses_sender", "bot-1", "ses_a")
MSG_IDS = ("msg_1", "msg_2", "msg_fuzz_3")


def nasty_text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(NASTY_STRINGS),
        st.text(max_size=30),
        st.text(st.characters(categories=["Cs", "Cc", "Zl", "Zp", "Cf"]), max_size=8),
    )


def _valid(pattern: Any, pool: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.sampled_from(pool) | st.from_regex(pattern, fullmatch=True)


VALID: dict[str, st.SearchStrategy[Any]] = {
    "from": _valid(SENDER_RE, SENDERS),
    "to": _valid(SESSION_ID_RE, SESSIONS),
    "channel": st.from_regex(CHANNEL_RE, fullmatch=True),
    "payload": st.text(min_size=1, max_size=200),
    "kind": st.sampled_from(KINDS),
    "priority": st.sampled_from(PRIORITIES),
    "reply_to": _valid(MSG_ID_RE, MSG_IDS),
    "msg_id": _valid(MSG_ID_RE, MSG_IDS),
    "ttl_s": st.integers(1, MAX_TTL_S),
}


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON value (NaN and infinities too, which Python's json reads), small."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=10**60, max_value=10**80),
        st.floats(),
        nasty_text(),
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(nasty_text(), inner, max_size=3)
        ),
        max_leaves=8,
    )


def send_objects() -> st.SearchStrategy[dict[str, Any]]:
    """A send body as a dict: a valid message (to a session or a channel, optional fields or
    not) with none, one or a few fields dropped or replaced by any JSON value, and maybe
    unknown fields; so some are stored and the rest break one rule or several."""
    target = st.one_of(
        st.fixed_dictionaries({"to": VALID["to"]}),
        st.fixed_dictionaries({"channel": VALID["channel"]}),
    )
    required = st.fixed_dictionaries({"from": VALID["from"], "payload": VALID["payload"]})
    optional = st.fixed_dictionaries(
        {}, optional={k: VALID[k] for k in ("kind", "priority", "reply_to", "msg_id", "ttl_s")}
    )
    valid = st.builds(lambda a, b, c: a | b | c, required, target, optional)
    field = st.sampled_from(list(VALID))
    change = st.tuples(field, st.none() | json_values())
    mutations: st.SearchStrategy[list[tuple[str, Any]]] = st.just([]) | st.lists(
        change, min_size=1, max_size=2
    )
    extra = st.dictionaries(nasty_text(), json_values(), max_size=2)

    def mutate(
        body: dict[str, Any], changes: list[tuple[str, Any]], more: dict[str, Any]
    ) -> dict[str, Any]:
        body = more | body
        for name, value in changes:
            if value is None:
                body.pop(name, None)
            else:
                body[name] = value
        return body

    return st.builds(mutate, valid, mutations, extra)


def _encode(obj: Any, how: str) -> bytes:
    if how == "ascii":
        return json.dumps(obj).encode("ascii")
    # lone surrogates become CESU-8 bytes: not UTF-8
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _huge_number(digits: int) -> bytes:
    return b'{"from": "ses_a", "to": "ses_b", "payload": "x", "ttl_s": ' + b"9" * digits + b"}"


def bodies() -> st.SearchStrategy[bytes]:
    """Send bodies: JSON objects of any fields (mostly), and bytes that are no such thing."""
    encoded = st.builds(_encode, send_objects(), st.sampled_from(["ascii", "utf-8"]))
    depth = st.integers(1, 100_000)
    broken = st.one_of(
        st.builds(lambda b, n: b[:n], encoded, st.integers(0, 40)),  # cut short
        st.builds(
            lambda b, i, x: b[:i] + x + b[i:],
            encoded,
            st.integers(0, 40),
            st.sampled_from([b"\x00", b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b'"']),
        ),
        st.builds(_encode, json_values(), st.just("ascii")),  # not an object
        depth.map(lambda n: b"[" * n),
        depth.map(lambda n: b'{"a":' * n),
        depth.map(lambda n: b"[" * n + b"]" * n),
        st.integers(60, 6000).map(_huge_number),
        st.binary(max_size=64),
    )
    # most get past the JSON parser (one_of draws its branches alike, and merges equal ones)
    return st.one_of(encoded, encoded.map(bytes), encoded.map(bytearray).map(bytes), broken)


# -- requests to the routes ----------------------------------------------------------------

ROUTE_PATHS = ("/swarm/send", "/swarm/inbox", "/health", "/openapi.json")
# Not "*": Twisted answers it itself, before the gate and JsonApi, a known finding that
# test_fuzz_routes.py::test_a_request_for_star_passes_the_gate holds on its own.
ODD_PATHS = (
    "/",
    "/swarm",
    "/swarm/",
    "/swarm/message/",
    "/swarm/message/msg_1/x",
    "/HEALTH",
    "/health/",
    "//health",
    "/health%00",
    "/swarm/%2e%2e/health",
    "http://127.0.0.1/health",
    "/openapi.json/",
)
METHODS = ("GET", "GET", "POST", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE")


def _pct(value: str) -> bytes:
    return quote_from_bytes(value.encode("utf-8", "surrogatepass"), safe="").encode("ascii")


def query_values() -> st.SearchStrategy[bytes]:
    """A query value, percent-encoded: any bytes arrive (``%ff``, ``%00``, CESU-8 surrogates)."""
    text = st.one_of(
        VALID["to"],
        VALID["msg_id"],
        st.sampled_from(["cur_0", "cur_1", "cur_2", "1", "10", "1000", "1001", "000000000010"]),
        st.integers().map(str),
        nasty_text(),
    )
    return text.map(_pct) | st.binary(max_size=8).map(lambda b: quote_from_bytes(b).encode())


def queries() -> st.SearchStrategy[bytes]:
    """An inbox query: mostly a valid session first, then any pairs (repeated keys too)."""
    key = st.sampled_from([b"session", b"since", b"since", b"limit", b"limit", b"x", b"", b"a%00"])
    pair = st.builds(lambda k, v: k + b"=" + v, key, query_values()) | key
    session = st.sampled_from(SESSIONS).map(lambda v: [b"session=" + v.encode()])
    # twice as often with a session as without (one_of merges equal branches: hence map)
    first: st.SearchStrategy[list[bytes]] = st.one_of(session, session.map(list), st.just([]))
    return st.builds(lambda a, b: b"&".join(a + b), first, st.lists(pair, max_size=3))


def message_targets() -> st.SearchStrategy[bytes]:
    """``/swarm/message/<id>``: stored ids, valid ones, anything percent-encoded."""
    return st.one_of(VALID["msg_id"], nasty_text()).map(lambda v: b"/swarm/message/" + _pct(v))


def targets() -> st.SearchStrategy[bytes]:
    """Any request target: a route, a msg_id path, an odd path; maybe a query string."""
    path = st.one_of(
        st.sampled_from(ROUTE_PATHS).map(str.encode),
        message_targets(),
        st.sampled_from(ODD_PATHS).map(str.encode),
        st.binary(max_size=12).map(lambda b: b"/" + quote_from_bytes(b).encode()),
    )
    return st.builds(
        lambda p, q, with_q: p + b"?" + q if with_q else p, path, queries(), st.booleans()
    )


def gate_headers(token: str) -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    """Host, Authorization, Content-Type and Origin: half the time all as the gate wants,
    else each drawn from what passes and what does not."""
    right = b"Bearer " + token.encode()
    host = st.sampled_from(
        [
            b"127.0.0.1",
            b"127.0.0.1:4097",
            b"localhost",
            b"[::1]:4097",
            b"LOCALHOST.",
            b"evil.example",
            b"",
            b"127.0.0.1.evil.example",
            None,
        ]
    )
    auth = st.sampled_from(
        [
            right,
            right,
            b"Bearer wrong",
            b"Basic " + token.encode(),
            b"bearer  " + right[7:],
            b"Bearer",
            b"",
            None,
        ]
    )
    ctype = st.sampled_from(
        [
            b"application/json",
            b"application/json; charset=utf-8",
            b"APPLICATION/JSON",
            b"text/plain",
            b"application/x-www-form-urlencoded",
            b"application/jsonx",
            b"",
            None,
        ]
    )
    origin = st.sampled_from([None, None, None, b"http://evil.example", b"null", b""])

    def assemble(*values: bytes | None) -> list[tuple[bytes, bytes]]:
        names = (b"Host", b"Authorization", b"Content-Type", b"Origin")
        return [
            (name, value) for name, value in zip(names, values, strict=True) if value is not None
        ]

    passing = st.just(assemble(b"127.0.0.1", right, b"application/json", None))
    return passing | st.builds(assemble, host, auth, ctype, origin)


def extra_headers() -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    """Mostly none; else headers the API does not read, with awkward values (no CR or LF)."""
    name = st.sampled_from([b"X-Fuzz", b"Accept", b"Cookie", b"User-Agent", b"X-\xff", b"Expect"])
    value = st.binary(max_size=20).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
    return st.just([]) | st.lists(st.tuples(name, value), min_size=1, max_size=3)


@dataclass(frozen=True)
class FuzzRequest:
    """One request as sent; ``to_bytes`` frames the body with Content-Length or chunks."""

    method: bytes
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    chunked: bool = False

    @property
    def path(self) -> str:
        """The path as JsonApi routes it: the target before ``?``, undecoded."""
        return self.target.split(b"?", 1)[0].decode("latin-1")

    def to_bytes(self) -> bytes:
        head = [self.method + b" " + self.target + b" HTTP/1.1"]
        head += [name + b": " + value for name, value in self.headers]
        if self.chunked:
            head.append(b"Transfer-Encoding: chunked")
            body = (
                b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in _chunks(self.body)) + b"0\r\n\r\n"
            )
        else:
            head.append(b"Content-Length: %d" % len(self.body))
            body = self.body
        return b"\r\n".join(head) + b"\r\n\r\n" + body


def _chunks(body: bytes, size: int = 7) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


def requests_to_routes(token: str) -> st.SearchStrategy[FuzzRequest]:
    """Well-framed requests: half to a documented operation with its own kind of input, half
    any method to any target; with and without what the gate asks."""
    operation = st.one_of(
        bodies().map(lambda b: (b"POST", b"/swarm/send", b)),
        queries().map(lambda q: (b"GET", b"/swarm/inbox?" + q, b"")),
        message_targets().map(lambda t: (b"GET", t, b"")),
        st.sampled_from([(b"GET", b"/health", b""), (b"GET", b"/openapi.json", b"")]),
    )
    anything = st.tuples(
        st.sampled_from(METHODS).map(str.encode), targets(), st.just(b"") | bodies()
    )
    return st.builds(
        lambda mtb, gate, extra, chunked: FuzzRequest(
            mtb[0], mtb[1], (*gate, *extra), mtb[2], chunked
        ),
        operation | anything,
        gate_headers(token),
        extra_headers(),
        st.booleans(),
    )


def authorised_sends(token: str) -> st.SearchStrategy[FuzzRequest]:
    """``POST /swarm/send`` past the gate: only the body varies."""
    headers = (
        (b"Host", b"127.0.0.1"),
        (b"Authorization", b"Bearer " + token.encode()),
        (b"Content-Type", b"application/json"),
    )
    return st.builds(lambda b: FuzzRequest(b"POST", b"/swarm/send", headers, b), bodies())


# -- bytes that are not well-formed HTTP ----------------------------------------------------


@dataclass(frozen=True)
class HostileBytes:
    """Bytes for a raw socket.  ``whole``: they hold a whole request, framed so that the
    daemon must answer at once (else it may wait for more, and answer 408 later, or close).
    ``head``: a HEAD request, whose answer has no body."""

    data: bytes
    whole: bool
    head: bool = False


def _framing_attacks(token: bytes) -> list[tuple[bytes, bytes, bool]]:
    """(headers, body, whole) pairs that attack the body's framing."""
    return [
        (b"Content-Length: -1\r\n", b"", True),
        (b"Content-Length: abc\r\n", b"", True),
        (b"Content-Length:  5\r\n", b"{}{}{", True),
        (b"Content-Length: 5, 5\r\n", b"", True),
        (b"Content-Length: +5\r\n", b"", True),
        (b"Content-Length: 0x10\r\n", b"", True),
        (b"Content-Length: 1e3\r\n", b"", True),
        (b"Content-Length: " + b"9" * 19 + b"\r\n", b"", True),
        (b"Content-Length: " + b"9" * 5000 + b"\r\n", b"", True),
        (b"Content-Length: 2\r\nContent-Length: 2\r\n", b"{}", True),
        (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n", True),
        (b"Transfer-Encoding: gzip\r\n", b"", True),
        (b"Transfer-Encoding: chunked, chunked\r\n", b"0\r\n\r\n", True),
        (b"Transfer-Encoding: chunked\r\n", b"zz\r\nhello\r\n0\r\n\r\n", True),
        (b"Transfer-Encoding: chunked\r\n", b"-5\r\nhello\r\n0\r\n\r\n", True),
        (b"Transfer-Encoding: chunked\r\n", b"2;ext=\xff\r\n{}\r\n0\r\n\r\n", True),
        (b"Transfer-Encoding: chunked\r\n", b"2\r\n{}XX0\r\n\r\n", True),
        (b"Transfer-Encoding: chunked\r\n", b"1" * 2000 + b"\r\n", True),
        (b"Transfer-Encoding: chunked\r\n", b"2\r\n{}\r\n0\r\nX-Trailer: \x00\r\n\r\n", True),
        # cut short: the daemon waits for the rest (a chunk of 2**80 bytes too: it reads and
        # drops what comes, past max_body_bytes, until the deadline)
        (b"Transfer-Encoding: chunked\r\n", b"ffffffffffffffffffff\r\n", False),
        (b"Content-Length: 100\r\n", b"{}", False),
        (b"Transfer-Encoding: chunked\r\n", b"10\r\nabc", False),
        (b"Transfer-Encoding: chunked\r\n", b"2\r\n{}\r\n", False),
        (b"Authorization: Bearer " + token + b"\r\nContent-Length: 10\r\n", b"", False),
    ]


BAD_METHODS = (b"GET", b"get", b"G\x00T", b"", b"GET GET", b"\xff\xfe", b"CONNECT")
# (not "*": see ODD_PATHS)
BAD_TARGETS = (b"/health", b"", b"health", b"/h\x00", b"/\xff", b"/ /")
BAD_VERSIONS = (b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/9.9", b"HTTP/1.1x", b"", b"http/1.1")
BAD_HEADER_LINES = (
    b"NoColon",
    b"Bad Name: x",
    b": empty-name",
    b"X-A: a\x00b",
    b" folded",
    b"X:\xff\xfe",
    b"Host: 127.0.0.1",
    b"Host: evil.example",
    b"Authorization: Bearer \x00",
)
GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def _sizes(authed: bytes) -> st.SearchStrategy[HostileBytes]:
    """Just over each size limit: a header line, the header count, the request line, the body."""
    return st.one_of(
        st.integers(16_000, 20_000).map(lambda n: GET_HEALTH + b"X-Long: " + b"a" * n + b"\r\n"),
        st.integers(490, 600).map(
            lambda n: GET_HEALTH + b"".join(b"X-%d: y\r\n" % i for i in range(n))
        ),
        st.integers(16_000, 20_000).map(
            lambda n: b"GET /" + b"a" * n + b" HTTP/1.1\r\nHost: x\r\n"
        ),
        st.integers(256 * 1024 - 10, 256 * 1024 + 4096).map(
            lambda n: authed + b"Content-Length: %d\r\n\r\n" % n + b"[" * n
        ),
    ).map(lambda head: HostileBytes(head if head.endswith(b"[") else head + b"\r\n", True))


def hostile_bytes(token: str) -> st.SearchStrategy[HostileBytes]:
    """Broken HTTP: request lines, separators, framing, sizes, raw bytes, pipelines; and
    well-framed requests to the routes (``requests_to_routes``) among them."""
    post = b"POST /swarm/send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    authed = post + b"Authorization: Bearer " + token.encode() + b"\r\n"
    framing = st.sampled_from(_framing_attacks(token.encode())).map(
        lambda h: HostileBytes(authed + h[0] + b"\r\n" + h[1], h[2])
    )
    request_line = st.builds(
        lambda m, t, v: HostileBytes(b"%s %s %s\r\nHost: 127.0.0.1\r\n\r\n" % (m, t, v), True),
        st.sampled_from(BAD_METHODS),
        st.sampled_from(BAD_TARGETS),
        st.sampled_from(BAD_VERSIONS),
    )
    bad_header = st.sampled_from(BAD_HEADER_LINES).map(
        lambda line: HostileBytes(GET_HEALTH + line + b"\r\n\r\n", True)
    )
    # lines not ended by CRLF: the daemon may wait for one
    separators = st.sampled_from([b"\n", b"\r", b"\r\r\n", b"\n\r"]).map(
        lambda sep: HostileBytes(
            sep.join([b"GET /health HTTP/1.1", b"Host: 127.0.0.1", b"", b""]), False
        )
    )
    pipelined = st.lists(
        st.sampled_from(
            [GET_HEALTH + b"\r\n", authed + b"Content-Length: 2\r\n\r\n{}", b"GARBAGE\r\n\r\n"]
        ),
        min_size=2,
        max_size=6,
    ).map(lambda parts: HostileBytes(b"".join(parts), True))
    raw = st.one_of(
        st.binary(max_size=300),
        st.binary(max_size=300).map(lambda b: b + b"\r\n\r\n"),
        st.binary(max_size=200).map(lambda b: GET_HEALTH + b"X: " + b + b"\r\n\r\n"),
        st.binary(max_size=200).map(lambda b: authed + b"\r\n" + b),
    ).map(lambda data: HostileBytes(data, False))
    routes = requests_to_routes(token).map(
        lambda r: HostileBytes(r.to_bytes(), True, r.method == b"HEAD")
    )
    return st.one_of(
        framing, request_line, bad_header, _sizes(authed), separators, pipelined, raw, routes
    )
