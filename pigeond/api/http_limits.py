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
  (:mod:`pigeond.api.site_limits`), so connections cost pigeond a bounded number
  of descriptors and /health keeps answering.

A refusal closes the connection after its answer; when the client may still be
sending (a 4xx for a malformed or oversized request), pigeond first reads and
drops what comes for a moment (a "lingering close"), because closing a socket
with unread data makes the kernel send a reset, and a client still writing would
see "connection reset" instead of the answer.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from twisted.internet import interfaces
from twisted.internet.interfaces import IDelayedCall, ITransport
from twisted.logger import Logger
from twisted.web import http

from pigeond.config import DEFAULTS

if TYPE_CHECKING:
    from pigeond.api.site_limits import LimitedSite

log = Logger()

# How long, and for how many bytes, a refused client may go on sending while the
# answer drains; then the connection is aborted.
LINGER_S = 2.0
LINGER_MAX_BYTES = 1024 * 1024
# After a refusal that does not linger, how long a client that reads nothing may
# keep the connection (and its descriptor) before it is aborted.
CLOSE_GRACE_S = 5.0
# Descriptors kept for everything but client connections (database, WAL, lock,
# listeners, epoll, connections to opencode...), when sizing how many 503 answers may
# be in the works at once (see LimitedSite).
RESERVED_FDS = 64
MIN_REFUSALS_OPEN = 8
# At the connection cap, a connection that has waited this long for its next request
# (idle, or still trickling one in) is closed to make room for the new one; younger
# ones are not, so a burst of fresh connections cannot push out requests on their way.
EVICT_AFTER_S = 1.0
# At the cap with none of them waiting that long, a new connection is served on probation
# for this long: if its whole request arrives meanwhile, it takes the place of the one
# that has waited longest for a request, however young (that one sent none, this one a
# whole one); else it gets the 503.  A client on the same machine sends its request as
# soon as it is connected, so /health answers at once right after a flood of connects.
PROBATION_S = 1.0
# Connections on probation at once, at most (see LimitedSite.probations_allowed).
PROBATIONS_AT_ONCE = 64
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


class LimitedChannel(http.HTTPChannel):
    """An ``HTTPChannel`` with a whole-request deadline, JSON refusals, and a slot in
    its site's connection count.

    Hooks used: ``connectionMade``/``connectionLost`` (the slot, the timers),
    ``dataReceived`` (a request's first byte starts its deadline; LineReceiver's
    ``clearLineBuffer`` finds a pipelined request's first bytes),
    ``lineReceived`` and ``lineLengthExceeded`` (LineReceiver's: header size and
    count, checked before Twisted's own checks so they answer 431/414),
    ``headerReceived`` (notes what a bad header was, for the 400's text),
    ``allContentReceived``/``requestDone`` (a request has arrived / been
    answered), ``timeoutConnection`` (TimeoutMixin's idle timeout).  One private
    name: ``_respondToBadRequestAndDisconnect``, the single place where Twisted
    answers every request it cannot parse (request line, header syntax,
    Content-Length, Transfer-Encoding, chunked body); no public hook exists, and
    without it those answers have an empty body.
    """

    site: LimitedSite  # set by Site.buildProtocol
    # the deadline of the request being read: the site's value when the request began
    request_timeout_s: float = DEFAULTS.request_timeout_s

    _deadline: IDelayedCall | None = None
    _closer: IDelayedCall | None = None
    waiting_since = 0.0  # when it last began to wait for a request (opened, or answered)
    _serving = False  # a whole request has arrived and is being answered
    _refused = False  # an error answer went out; everything after it is dropped
    _counted = False  # holds one of the site's connection slots
    _evicted = False  # closed to make room, or on probation: counted among open refusals
    # beyond the cap, waiting for its whole request to take a slot (see PROBATION_S)
    on_probation = False
    _probation: IDelayedCall | None = None
    _dropped_bytes = 0
    _held: http.Request | None = None  # answered; its answer not yet sent
    _receiving = 0  # depth of dataReceived calls (Twisted replays pipelined data re-entrantly)
    # the request being read: its head's bytes and lines, and its length headers
    _head_bytes = 0
    _head_lines = 0
    _length_headers = 0
    # what the header being parsed is, should Twisted refuse it
    _problem: str | None = None

    # -- the connection ------------------------------------------------------------------

    def connectionMade(self) -> None:
        self.waiting_since = self.site.reactor.seconds()
        if self.on_probation:  # beyond the cap: a refusal until its request has come
            self._evicted = True
            self.site.refusals_open += 1
            self.site.probation_began(self)
            self._probation = self.site.reactor.callLater(PROBATION_S, self.end_probation)
        else:
            self._counted = True
            self.site.connection_opened(self)
        super().connectionMade()  # type: ignore[no-untyped-call]
        self._start_deadline()  # the first request's clock runs from the connection's opening

    def connectionLost(self, reason: Any = None) -> None:
        self._leave_probation()
        for call in (self._deadline, self._closer):
            if call is not None and call.active():
                call.cancel()
        self._deadline = self._closer = None
        if self._counted:
            self._counted = False
            self.site.connection_closed(self)
        if self._evicted:
            self._evicted = False
            self.site.refusals_open -= 1
        super().connectionLost(reason)  # type: ignore[no-untyped-call]

    def dataReceived(self, data: bytes) -> None:
        if self._refused:
            self._drop(data)
            return
        self._start_deadline_if_idle()  # the first byte of the next request
        self._receiving += 1
        try:
            super().dataReceived(data)  # type: ignore[no-untyped-call]
        finally:
            self._receiving -= 1
        if not self._receiving:
            self._watch_unfinished_request()

    def _watch_unfinished_request(self) -> None:
        """After pipelined requests answered within one read, the start of one more may
        wait in LineReceiver's buffer, a line not yet whole: its deadline runs from now.
        The bytes are taken back and fed again, to land where they were."""
        if self._deadline is not None or self._serving or self._refused or not self.persistent:
            return
        if not self.line_mode:
            return
        pending: bytes = self.clearLineBuffer()  # type: ignore[no-untyped-call]
        if pending:
            self._start_deadline()
            super().dataReceived(pending)  # type: ignore[no-untyped-call]

    # -- the request's deadline -----------------------------------------------------------

    def _start_deadline_if_idle(self) -> None:
        """A request begins: unless one is already timed or being answered, time it."""
        if self._deadline is None and not self._serving:
            self._start_deadline()

    def _start_deadline(self) -> None:
        self.request_timeout_s = self.site.request_timeout_s  # a reload applies to the next request
        self._deadline = self.site.reactor.callLater(self.request_timeout_s, self._request_too_slow)

    def _request_too_slow(self) -> None:
        self._deadline = None
        log.debug(
            "closing a connection whose request did not arrive within {s} s",
            s=self.request_timeout_s,
        )
        self._refuse(408, f"the request did not arrive within {self.request_timeout_s:g} s")

    def allContentReceived(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        if self.on_probation:
            self._leave_probation()
            if not self.site.make_room_for(self):  # every slot is answering a request
                self._refuse(503, "too many connections")
                return
            self._evicted, self._counted = False, True
            self.site.refusals_open -= 1
            self.site.connection_opened(self)
        self._serving = True
        self._head_bytes = self._head_lines = self._length_headers = 0
        super().allContentReceived()  # type: ignore[no-untyped-call]

    def requestDone(self, request: http.Request) -> None:
        if self._waitingForTransport and self.persistent:
            # Its answer still fills the send buffer: the client is not reading.  Twisted
            # would now parse the pipelined requests it buffered and queue their answers
            # too, without end; hold them (reading nothing more) until the buffer drains.
            # (HTTPChannel's own producer state: no public hook tells a full buffer.)
            self._held = request
            self._networkProducer.pauseProducing()
            if self._savedTimeOut:
                self.setTimeout(self._savedTimeOut)  # type: ignore[no-untyped-call]
            return
        # cleared first: a pipelined request that super() replays starts its own deadline
        self._serving = False
        self.waiting_since = self.site.reactor.seconds()
        if self._counted:
            self.site.connection_waiting(self)
        super().requestDone(request)  # type: ignore[no-untyped-call]

    def resumeProducing(self) -> None:
        """The send buffer drained: a held request is done now, and reading goes on."""
        super().resumeProducing()  # type: ignore[no-untyped-call]
        held, self._held = self._held, None
        if held is not None:
            self.requestDone(held)

    def timeoutConnection(self) -> None:
        """The idle timeout: silent between requests, 408 in the middle of one."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
            self._refuse(408, f"the request stalled: nothing arrived for {self.site.timeOut:g} s")
            return
        super().timeoutConnection()  # type: ignore[no-untyped-call]

    # -- the request head -------------------------------------------------------------------

    def lineReceived(self, line: bytes) -> None:
        if self._refused:
            return
        self._head_bytes += len(line)
        if self._head_bytes > self.totalHeadersSize:
            self._refuse(431, f"the request headers are larger than {self.totalHeadersSize} bytes")
            return
        if line and line[:1] not in b" \t":
            self._head_lines += 1
            if self._head_lines - 1 > self.maxHeaders:
                self._refuse(431, f"the request has more than {self.maxHeaders} headers")
                return
        if line:
            self._start_deadline_if_idle()  # a pipelined request, parsed from the same read
        self._problem = "the request line is malformed" if self._head_lines == 1 else None
        super().lineReceived(line)  # type: ignore[no-untyped-call]
        self._problem = None

    def lineLengthExceeded(self, line: bytes) -> None:
        if self._head_lines == 0:
            self._refuse(414, f"the request line is longer than {self.MAX_LENGTH} bytes")
        else:
            self._refuse(431, f"a request header line is longer than {self.MAX_LENGTH} bytes")

    def headerReceived(self, line: bytes) -> bool:
        name, _, value = line.partition(b":")
        name, value = name.lower(), value.strip(b" \t")
        self._problem = "a request header is malformed"
        if name == b"content-length" or (
            name == b"transfer-encoding" and value.lower() != b"identity"
        ):
            self._length_headers += 1
            if self._length_headers > 1:
                self._problem = (
                    "the request gives its length more than once (Content-Length and"
                    " Transfer-Encoding, or either twice)"
                )
            elif name == b"transfer-encoding":
                self._problem = "Transfer-Encoding must be chunked"
            elif value.isdigit() and len(value) > MAX_LENGTH_DIGITS:
                self._refuse(413, "the request body is larger than any this server reads")
                return False
            else:
                self._problem = "Content-Length must be a whole number of bytes"
        ok: bool = super().headerReceived(line)  # type: ignore[no-untyped-call]
        self._problem = None
        return ok

    # -- making room ----------------------------------------------------------------------

    @property
    def waiting(self) -> bool:
        """Waiting for a request (idle, or one still arriving), answering none."""
        return not self._serving and not self._refused and self._held is None

    def evict(self) -> None:
        """Give up its slot at once, counted as a refusal until it is closed, and close it
        with a 503 (the site is full)."""
        if self._counted:
            self._counted = False
            self._evicted = True
            self.site.refusals_open += 1
            self.site.connection_closed(self)
        self._refuse(503, "closed to make room for a new connection (too many connections)")

    def end_probation(self) -> None:
        """No whole request came within PROBATION_S: 503, too many connections (no
        lingering: it sent no request to read on)."""
        self._leave_probation()
        self._refuse(503, "too many connections", linger=False)

    def displace(self) -> None:
        """A newer connection takes its place on probation (in a flood of connects, the
        newest may be a client's): closed at once, without an answer, so its descriptor
        is free before the next connections are accepted (a 503 would hold it until the
        next turn of the reactor has written it, while a flood fills the refusals)."""
        self._leave_probation()
        self._refused = True
        if self.transport is not None:
            abort(self.transport)

    def _leave_probation(self) -> None:
        if not self.on_probation:
            return
        self.on_probation = False
        if self._probation is not None and self._probation.active():
            self._probation.cancel()
        self._probation = None
        self.site.probation_ended(self)

    # -- answers --------------------------------------------------------------------------

    def _respondToBadRequestAndDisconnect(self) -> None:
        # Private in Twisted, overridden on purpose: see the class docstring.
        if self.line_mode:
            message = self._problem or "the request is malformed"
        else:
            message = "the chunked request body is malformed"
        self._refuse(400, message)

    def _refuse(self, status: int, message: str, *, linger: bool = True) -> None:
        """Answer ``{"error": message}`` (unless an answer went out already) and close;
        ``linger``: read and drop what the client may still send for a moment first."""
        if self._refused:
            return
        self._refused = True
        # LineReceiver must not parse what followed the refused part
        self.clearLineBuffer()  # type: ignore[no-untyped-call]
        self.setTimeout(None)  # type: ignore[no-untyped-call]
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        transport = self.transport
        if transport is None:
            return
        log.debug("refused a request: {status} {message}", status=status, message=message)
        transport.write(error_response(status, message))
        half_closeable = interfaces.ITCPTransport(transport, None)
        consumer = interfaces.IConsumer(transport, None)
        if status == 408 or not linger or half_closeable is None or consumer is None:
            self.loseConnection()  # type: ignore[no-untyped-call]
            self._abort_in(CLOSE_GRACE_S)
            return
        # The client may still be sending: tell it we are done (FIN), then read and drop
        # what it sends for a moment (reading again if it was paused), then abort.
        consumer.unregisterProducer()
        reader = interfaces.IPushProducer(transport, None)
        if reader is not None:
            reader.resumeProducing()
        half_closeable.loseWriteConnection()
        self._abort_in(LINGER_S)

    def _abort_in(self, seconds: float) -> None:
        transport = self.transport
        if transport is not None:
            self._closer = self.site.reactor.callLater(seconds, abort, transport)

    def _drop(self, data: bytes) -> None:
        self._dropped_bytes += len(data)
        if self._dropped_bytes > LINGER_MAX_BYTES and self.transport is not None:
            abort(self.transport)


__all__ = [
    "LimitedChannel",
    "abort",
    "error_response",
]
