"""What a connection may cost pigeond, and the JSON answer when it asks too much.

Twisted's ``HTTPChannel`` answers what it cannot parse with a bare ``400 Bad
Request`` and no body, closes a line longer than ``MAX_LENGTH`` with no answer
at all, and its only clock is an idle timeout that every byte resets: a client
trickling one byte every few seconds holds a connection (and a descriptor)
forever.  Here:

- every request Twisted refuses is answered as the API answers, ``{"error": ...}``
  with ``application/json``: 400 naming what was wrong (request line, a header,
  ``Content-Length``, ``Transfer-Encoding``, the chunked body), 414 for a request
  line and 431 for headers over Twisted's limits, 413 for a ``Content-Length``
  too long to even be a number we would read;
- a request must arrive whole (request line, headers and body) within
  ``request_timeout_s`` of its first byte (of the connection's opening, for the
  first request), whatever it trickles; then it gets 408 and the connection is
  closed.  Between requests the idle keep-alive timeout (``Site.timeOut``) rules;
- a site serves at most ``max_connections`` connections at once
  (:mod:`pigeond.api.connection_slots`), so connections cost pigeond a bounded number
  of descriptors and /health keeps answering.

A refusal closes the connection after its answer; when the client may still be
sending (a 4xx for a malformed or oversized request), pigeond first reads and
drops what comes for a moment (a "lingering close"), because closing a socket
with unread data makes the kernel send a reset, and a client still writing would
see "connection reset" instead of the answer.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from twisted.internet import interfaces
from twisted.internet.interfaces import IAddress, IDelayedCall, IReactorTime, ITransport
from twisted.logger import Logger
from twisted.web import http
from twisted.web.http_headers import Headers

from pigeond.api.connection_slots import Admission, ConnectionSlots
from pigeond.config import DEFAULTS
from pigeond.twisted_internals import HookedHTTPChannel

log = Logger()

# How long, and for how many bytes, a refused client may go on sending while the
# answer drains; then the connection is aborted.
LINGER_S = 2.0
LINGER_MAX_BYTES = 1024 * 1024
# After a refusal that does not linger, how long a client that reads nothing may
# keep the connection (and its descriptor) before it is aborted.
CLOSE_GRACE_S = 5.0
# A Content-Length with more digits than this is no length we would ever read
# (and int() refuses strings of more than 4300 digits with a ValueError).
MAX_LENGTH_DIGITS = 18

REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    413: b"Content Too Large",
    414: b"URI Too Long",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


def error_response(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 answer ``{"error": message}`` that closes the connection."""
    body = json.dumps({"error": message}, ensure_ascii=False).encode("utf-8") + b"\n"
    reason = REASONS.get(status) or http.RESPONSES.get(status, b"Error")
    return b"".join(
        [
            b"HTTP/1.1 %d %s\r\n" % (status, reason),
            b"content-type: application/json; charset=utf-8\r\n",
            b"cache-control: no-store\r\n",
            b"connection: close\r\n",
            b"content-length: %d\r\n" % len(body),
            b"\r\n",
            body,
        ]
    )


def abort(transport: ITransport) -> None:
    """Close at once, dropping what is unsent (every stream transport can; ``ITransport``
    does not declare it)."""
    abort = getattr(transport, "abortConnection", transport.loseConnection)
    abort()


class ChannelSite(Protocol):
    """What a :class:`LimitedChannel` needs of its site (``LimitedSite``)."""

    reactor: IReactorTime
    request_timeout_s: float
    timeOut: float | None
    slots: ConnectionSlots


class LimitedChannel(HookedHTTPChannel):
    """An ``HTTPChannel`` with a whole-request deadline, JSON refusals, and a place in its
    site's :class:`~pigeond.api.connection_slots.ConnectionSlots`.

    Hooks used: ``connectionMade``/``connectionLost`` (the slot, the timers),
    ``dataReceived`` (a request's first byte starts its deadline; LineReceiver's
    ``clearLineBuffer`` finds a pipelined request's first bytes),
    ``lineReceived`` and ``lineLengthExceeded`` (LineReceiver's: header size and
    count, checked before Twisted's own checks so they answer 431/414),
    ``headerReceived`` (notes what a bad header was, for the 400's text),
    ``allContentReceived``/``requestDone`` (a request has arrived / been
    answered), ``timeoutConnection`` (TimeoutMixin's idle timeout), and
    :meth:`~pigeond.twisted_internals.HookedHTTPChannel.refuse_bad_request`, where
    Twisted answers every request it cannot parse.  Its state has public names: in a
    subclass of a Twisted class, a private one could be Twisted's.
    """

    site: ChannelSite  # set by Site.buildProtocol
    admission = Admission.SERVE  # set by LimitedSite.buildProtocol
    # the deadline of the request being read: the site's value when the request began
    request_timeout_s: float = DEFAULTS.request_timeout_s

    deadline: IDelayedCall | None = None
    closer: IDelayedCall | None = None
    serving = False  # a whole request has arrived and is being answered
    refused = False  # an error answer went out; everything after it is dropped
    dropped_bytes = 0
    held: http.Request | None = None  # answered; its answer not yet sent
    receiving = 0  # depth of dataReceived calls (Twisted replays pipelined data re-entrantly)
    # the request being read: its head's bytes and lines, and its length headers
    head_bytes = 0
    head_lines = 0
    length_headers = 0
    # what the header being parsed is, should Twisted refuse it
    problem: str | None = None
    # the connection's two ends, asked of the socket once rather than for every request
    host_address: IAddress | None = None
    peer_address: IAddress | None = None

    # -- the connection ------------------------------------------------------------------

    def connectionMade(self) -> None:
        self.site.slots.connected(self, self.admission)
        super().connectionMade()  # type: ignore[no-untyped-call]
        self.start_deadline()  # the first request's clock runs from the connection's opening

    def connectionLost(self, reason: Any = None) -> None:
        for call in (self.deadline, self.closer):
            if call is not None and call.active():
                call.cancel()
        self.deadline = self.closer = None
        self.site.slots.closed(self)
        super().connectionLost(reason)  # type: ignore[no-untyped-call]

    def getHost(self) -> IAddress:
        """This end's address, which a connection keeps: read once (each request asks)."""
        self.host_address = self.host_address or super().getHost()  # type: ignore[no-untyped-call]
        return self.host_address

    def getPeer(self) -> IAddress:
        self.peer_address = self.peer_address or super().getPeer()  # type: ignore[no-untyped-call]
        return self.peer_address

    def dataReceived(self, data: bytes) -> None:
        if self.refused:
            self.drop(data)
            return
        self.start_deadline_if_idle()  # the first byte of the next request
        self.receiving += 1
        try:
            super().dataReceived(data)  # type: ignore[no-untyped-call]
        finally:
            self.receiving -= 1
        if not self.receiving:
            self.watch_unfinished_request()

    def watch_unfinished_request(self) -> None:
        """After pipelined requests answered within one read, the start of one more may
        wait in LineReceiver's buffer, a line not yet whole: its deadline runs from now.
        The bytes are taken back and fed again, to land where they were."""
        if self.deadline is not None or self.serving or self.refused or not self.persistent:
            return
        if not self.line_mode:
            return
        pending: bytes = self.clearLineBuffer()  # type: ignore[no-untyped-call]
        if pending:
            self.start_deadline()
            super().dataReceived(pending)  # type: ignore[no-untyped-call]

    # -- the request's deadline -----------------------------------------------------------

    def start_deadline_if_idle(self) -> None:
        """A request begins: unless one is already timed or being answered, time it."""
        if self.deadline is None and not self.serving:
            self.start_deadline()

    def start_deadline(self) -> None:
        self.request_timeout_s = self.site.request_timeout_s  # a reload applies to the next request
        self.deadline = self.site.reactor.callLater(self.request_timeout_s, self.request_too_slow)

    def request_too_slow(self) -> None:
        self.deadline = None
        log.debug(
            "closing a connection whose request did not arrive within {s} s",
            s=self.request_timeout_s,
        )
        self.refuse(408, f"the request did not arrive within {self.request_timeout_s:g} s")

    def allContentReceived(self) -> None:
        if self.deadline is not None and self.deadline.active():
            self.deadline.cancel()
        self.deadline = None
        if not self.site.slots.request_arrived(self):  # on probation, every slot answering
            self.refuse(503, "too many connections")
            return
        self.serving = True
        self.head_bytes = self.head_lines = self.length_headers = 0
        super().allContentReceived()  # type: ignore[no-untyped-call]

    def requestDone(self, request: http.Request) -> None:
        if self.send_buffer_full() and self.persistent:
            # Its answer still fills the send buffer: the client is not reading.  Twisted
            # would now parse the pipelined requests it buffered and queue their answers
            # too, without end; hold them (reading nothing more) until the buffer drains.
            self.held = request
            self.hold_reading()
            return
        # cleared first: a pipelined request that super() replays starts its own deadline
        self.serving = False
        self.site.slots.waiting_again(self)
        super().requestDone(request)  # type: ignore[no-untyped-call]

    def resumeProducing(self) -> None:
        """The send buffer drained: a held request is done now, and reading goes on."""
        super().resumeProducing()  # type: ignore[no-untyped-call]
        held, self.held = self.held, None
        if held is not None:
            self.requestDone(held)

    def timeoutConnection(self) -> None:
        """The idle timeout: silent between requests, 408 in the middle of one."""
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
            self.refuse(408, f"the request stalled: nothing arrived for {self.site.timeOut:g} s")
            return
        super().timeoutConnection()  # type: ignore[no-untyped-call]

    # -- the request head -------------------------------------------------------------------

    def lineReceived(self, line: bytes) -> None:
        if self.refused:
            return
        self.head_bytes += len(line)
        if self.head_bytes > self.totalHeadersSize:
            self.refuse(431, f"the request headers are larger than {self.totalHeadersSize} bytes")
            return
        if line:
            if line[:1] not in b" \t":
                self.head_lines += 1
                if self.head_lines - 1 > self.maxHeaders:
                    self.refuse(431, f"the request has more than {self.maxHeaders} headers")
                    return
            if self.deadline is None and not self.serving:
                self.start_deadline()  # a pipelined request, parsed from the same read
        self.problem = "the request line is malformed" if self.head_lines == 1 else None
        super().lineReceived(line)  # type: ignore[no-untyped-call]
        self.problem = None

    def lineLengthExceeded(self, line: bytes) -> None:
        if self.head_lines == 0:
            self.refuse(414, f"the request line is longer than {self.MAX_LENGTH} bytes")
        else:
            self.refuse(431, f"a request header line is longer than {self.MAX_LENGTH} bytes")

    def headerReceived(self, line: bytes) -> bool:
        self.problem = "a request header is malformed"
        # only Content-Length and Transfer-Encoding give a length (a line that begins
        # with neither letter is no such header: most of a request's lines)
        if line[:1] in b"cCtT" and not self.length_header(line):
            return False
        ok: bool = super().headerReceived(line)  # type: ignore[no-untyped-call]
        self.problem = None
        return ok

    def length_header(self, line: bytes) -> bool:
        """Note a header that gives the body's length, and what Twisted would refuse in it;
        False when it is refused here (a length longer than any we would read)."""
        name, _, value = line.partition(b":")
        name, value = name.lower(), value.strip(b" \t")
        if name == b"content-length" or (
            name == b"transfer-encoding" and value.lower() != b"identity"
        ):
            self.length_headers += 1
            if self.length_headers > 1:
                self.problem = (
                    "the request gives its length more than once (Content-Length and"
                    " Transfer-Encoding, or either twice)"
                )
            elif name == b"transfer-encoding":
                self.problem = "Transfer-Encoding must be chunked"
            elif value.isdigit() and len(value) > MAX_LENGTH_DIGITS:
                self.refuse(413, "the request body is larger than any this server reads")
                return False
            else:
                self.problem = "Content-Length must be a whole number of bytes"
        return True

    # -- the answer's head -------------------------------------------------------------------

    def writeHeaders(
        self, version: bytes, code: bytes, reason: bytes, headers: Headers | Any
    ) -> None:
        """The status line and headers as one piece: Twisted hands the transport each name,
        separator and value apart (some 30 pieces an answer, each checked there)."""
        if not isinstance(headers, Headers):
            super().writeHeaders(version, code, reason, headers)  # type: ignore[no-untyped-call]
            return
        head = [version, b" ", code, b" ", reason, b"\r\n"]
        for name, values in headers.getAllRawHeaders():
            for value in values:
                head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        if self.transport is not None:
            self.transport.write(b"".join(head))

    # -- what the slots ask of it (pigeond.api.connection_slots.Connection) ----------------

    @property
    def waiting(self) -> bool:
        """Waiting for a request (idle, or one still arriving), answering none."""
        return not self.serving and not self.refused and self.held is None

    def evict(self) -> None:
        self.refuse(503, "closed to make room for a new connection (too many connections)")

    def refuse_at_cap(self) -> None:
        """No whole request came within its probation: no lingering, it sent no request
        to read on."""
        self.refuse(503, "too many connections", linger=False)

    def displace(self) -> None:
        """Closed without an answer, so its descriptor is free before the next connections
        are accepted (a 503 would hold it until the next turn of the reactor has written
        it, while a flood fills the refusals)."""
        self.refused = True
        if self.transport is not None:
            abort(self.transport)

    def close_when_sent(self) -> None:
        if self.transport is not None:
            self.transport.loseConnection()

    # -- answers --------------------------------------------------------------------------

    def refuse_bad_request(self) -> None:
        if self.line_mode:
            message = self.problem or "the request is malformed"
        else:
            message = "the chunked request body is malformed"
        self.refuse(400, message)

    def refuse(self, status: int, message: str, *, linger: bool = True) -> None:
        """Answer ``{"error": message}`` (unless an answer went out already) and close;
        ``linger``: read and drop what the client may still send for a moment first."""
        if self.refused:
            return
        self.refused = True
        # LineReceiver must not parse what followed the refused part
        self.clearLineBuffer()  # type: ignore[no-untyped-call]
        self.setTimeout(None)  # type: ignore[no-untyped-call]
        if self.deadline is not None and self.deadline.active():
            self.deadline.cancel()
        self.deadline = None
        transport = self.transport
        if transport is None:
            return
        log.debug("refused a request: {status} {message}", status=status, message=message)
        transport.write(error_response(status, message))
        half_closeable = interfaces.ITCPTransport(transport, None)
        consumer = interfaces.IConsumer(transport, None)
        if status == 408 or not linger or half_closeable is None or consumer is None:
            self.loseConnection()  # type: ignore[no-untyped-call]
            self.abort_in(CLOSE_GRACE_S)
            return
        # The client may still be sending: tell it we are done (FIN), then read and drop
        # what it sends for a moment (reading again if it was paused), then abort.
        consumer.unregisterProducer()
        reader = interfaces.IPushProducer(transport, None)
        if reader is not None:
            reader.resumeProducing()
        half_closeable.loseWriteConnection()
        self.abort_in(LINGER_S)

    def abort_in(self, seconds: float) -> None:
        transport = self.transport
        if transport is not None:
            self.closer = self.site.reactor.callLater(seconds, abort, transport)

    def drop(self, data: bytes) -> None:
        self.dropped_bytes += len(data)
        if self.dropped_bytes > LINGER_MAX_BYTES and self.transport is not None:
            abort(self.transport)


__all__ = [
    "LimitedChannel",
    "abort",
    "error_response",
]
