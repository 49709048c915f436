"""A stand-in ``opencode serve`` that answers at once: the far end of the hand-off benches.

    .venv/bin/python -m bench.standin_opencode --root DIR [--port 0] [--hold-ms 0]
        [--turn-ms 0] [--keep 256] [--record 0] [--cpu N]

It prints ``listening on PORT`` on stdout, then serves 127.0.0.1 until SIGTERM or
SIGINT.  One asyncio process with a small HTTP/1.1 parser of its own (keep-alive, no
framework), so that it is not what limits a bench: it speaks every call pigeond's
delivery makes (pigeond/delivery/opencode_client.py), in opencode 1.18's shapes:

* ``GET /session/<id>``: ``{"id", "directory"}``; any ``ses_...`` id exists, its
  directory is ``ROOT/sessions/<id>`` (made at the first lookup: pigeond stats it);
* ``POST /session/<id>/prompt_async``: 204 after ``--hold-ms`` (0: at once).  Like
  opencode it publishes, on ``GET /global/event``, the user message
  (``message.updated``, agent ``build``: what pigeond names in the next prompt) and
  ``session.status`` busy; ``--turn-ms`` after the 204 the turn ends: the
  assistant's reply (text "ACK", its ``parentID`` the prompt) joins the transcript,
  then ``session.status`` idle and ``session.idle``.  That is what pigeond's ``turn``
  delivery waits for (pigeond/delivery/turns.py), and what its receipts call answered;
* ``GET /session/<id>/message[?limit=N]``: the newest prompts and replies (``--keep``
  a session), each part cut to its first line, the envelope's opening tag, which is
  all the verifier looks at (pigeond/delivery/verifier.py, answers.py);
* ``GET /session/status`` (sessions whose turn runs), ``GET /agent``.

It checks the promise the benches are about.  A session has a hand-off *in flight*
from the moment a prompt arrives until its turn has ended (the idle events written),
and a *call* in flight until its 204 is written.  A prompt that arrives while its
session has either is counted (``turn_overlaps``, ``call_overlaps``), and the most
in flight at once for any one session is kept (``max_in_flight``).

``GET /_standin/stats`` answers these counts and the stand-in's CPU seconds;
``GET /_standin/received`` the ``[msg_id, time.monotonic()]`` of each prompted message
as it arrived (the first ``--record`` only: a bounded list); ``POST /_standin/phase``
with ``{"hold_ms", "turn_ms"}`` sets new times and starts the overlap counts, the most
in flight and the arrivals again, for a bench's next phase.  ``time.monotonic()`` is
CLOCK_MONOTONIC, one clock for every process of the machine, so a bench compares it
with its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SESSION_RE = re.compile(r"^/session/(ses_[A-Za-z0-9_-]{1,128})(/[a-z_]+)?$")
MSG_ID_RE = re.compile(r'^<swarm_message [^>]*\bmsg_id="([^"]*)"')
HEARTBEAT_S = 15.0
MAX_HEAD = 64 * 1024
MODEL = {"providerID": "standin", "modelID": "instant"}
AGENTS = json.dumps([{"name": "build"}, {"name": "plan"}]).encode()
REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 404: "Not Found"}


@dataclass
class Session:
    """One session's transcript (bounded) and what of it is in flight now."""

    id: str
    directory: str
    transcript: deque[dict[str, Any]]
    calls: int = 0  # prompt_async calls not answered yet
    hand_offs: int = 0  # prompts whose turn has not ended yet
    turns: deque[str] = field(default_factory=deque)  # user message ids whose turn runs


@dataclass
class Stats:
    prompts: int = 0
    messages: int = 0
    call_overlaps: int = 0
    turn_overlaps: int = 0
    max_in_flight: int = 0
    lookups: int = 0
    transcript_reads: int = 0
    status_polls: int = 0
    received: list[tuple[str, float]] = field(default_factory=list)


class Standin:
    """The sessions, the event stream's clients, and the counts."""

    def __init__(self, root: Path, hold_s: float, turn_s: float, keep: int, record: int) -> None:
        self.root = root
        self.hold_s = hold_s
        self.turn_s = turn_s
        self.keep = keep
        self.record = record
        self.sessions: dict[str, Session] = {}
        self.streams: set[asyncio.Transport] = set()
        self.stats = Stats()
        self._next_message = 0

    def session(self, sid: str) -> Session:
        found = self.sessions.get(sid)
        if found is None:
            directory = self.root / "sessions" / sid
            directory.mkdir(parents=True, exist_ok=True)
            found = Session(sid, str(directory), deque(maxlen=self.keep))
            found.transcript.append(self._user_message(sid, ["(the person's first prompt)"]))
            self.sessions[sid] = found
        return found

    def _user_message(self, sid: str, texts: list[str]) -> dict[str, Any]:
        """A user message as ``GET /session/<id>/message`` and ``message.updated`` show it;
        its id ascends with time, as opencode's do (pigeond's ModeTracker relies on it)."""
        self._next_message += 1
        info = {"id": f"msg_{self._next_message:012d}", "sessionID": sid, "role": "user",
                "agent": "build", "model": MODEL}  # fmt: skip
        return {"info": info, "parts": [{"type": "text", "text": t} for t in texts]}

    def _reply(self, sid: str, parent: str) -> dict[str, Any]:
        """The assistant's reply to user message ``parent``, completed, as opencode 1.18
        writes it at the end of a turn."""
        self._next_message += 1
        now_ms = int(time.time() * 1000)
        info = {"id": f"msg_{self._next_message:012d}", "sessionID": sid, "role": "assistant",
                "parentID": parent, "finish": "stop", "time": {"created": now_ms,
                "completed": now_ms}}  # fmt: skip
        return {"info": info, "parts": [{"type": "text", "text": "ACK"}]}

    # -- the event stream ------------------------------------------------------------

    def publish(self, directory: str, kind: str, properties: dict[str, Any]) -> None:
        event = {"directory": directory, "payload": {"type": kind, "properties": properties}}
        data = b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
        chunk = f"{len(data):x}\r\n".encode() + data + b"\r\n"
        for transport in list(self.streams):
            if transport.is_closing():
                self.streams.discard(transport)
            else:
                transport.write(chunk)

    def heartbeat(self) -> None:
        self.publish("", "server.heartbeat", {})
        asyncio.get_running_loop().call_later(HEARTBEAT_S, self.heartbeat)

    # -- a prompt ------------------------------------------------------------------------

    def prompt(self, session: Session, body: bytes) -> None:
        """A prompt arrives: count it, keep its opening tags, start its turn."""
        now = time.monotonic()
        stats = self.stats
        if session.calls:
            stats.call_overlaps += 1
        if session.hand_offs:
            stats.turn_overlaps += 1
        session.calls += 1
        session.hand_offs += 1
        stats.max_in_flight = max(stats.max_in_flight, session.hand_offs, session.calls)
        texts = [
            str(p.get("text", "")).split("\n", 1)[0]
            for p in json.loads(body).get("parts", [])
            if isinstance(p, dict)
        ]
        stats.prompts += 1
        for text in texts:
            match = MSG_ID_RE.match(text)
            if match is not None:
                stats.messages += 1
                if len(stats.received) < self.record:
                    stats.received.append((match.group(1), now))
        message = self._user_message(session.id, texts)
        session.transcript.append(message)
        session.turns.append(message["info"]["id"])
        self.publish(session.directory, "message.updated", {"info": message["info"]})
        busy = {"sessionID": session.id, "status": {"type": "busy"}}
        self.publish(session.directory, "session.status", busy)

    def answered(self, session: Session) -> None:
        """The 204 is written: the call is over; the turn ends ``turn_s`` later."""
        session.calls -= 1
        loop = asyncio.get_running_loop()
        if self.turn_s > 0:
            loop.call_later(self.turn_s, self.turn_ended, session)
        else:
            self.turn_ended(session)

    def turn_ended(self, session: Session) -> None:
        """The turn's reply goes into the transcript (what pigeond's receipts look for:
        an assistant message whose parent is the prompt), then the session is idle."""
        if session.turns:
            session.transcript.append(self._reply(session.id, session.turns.popleft()))
        idle = {"sessionID": session.id, "status": {"type": "idle"}}
        self.publish(session.directory, "session.status", idle)
        self.publish(session.directory, "session.idle", {"sessionID": session.id})
        session.hand_offs -= 1

    def new_phase(self, settings: dict[str, Any]) -> None:
        """A bench's next phase: new hold and turn times; the overlap counts, the most in
        flight and the arrivals start again (the message counts go on)."""
        self.hold_s = float(settings.get("hold_ms", self.hold_s * 1000)) / 1000
        self.turn_s = float(settings.get("turn_ms", self.turn_s * 1000)) / 1000
        s = self.stats
        s.call_overlaps = s.turn_overlaps = s.max_in_flight = 0
        s.received = []

    def stats_json(self) -> dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        s = self.stats
        return {
            "prompts": s.prompts, "messages": s.messages, "call_overlaps": s.call_overlaps,
            "turn_overlaps": s.turn_overlaps, "max_in_flight": s.max_in_flight,
            "sessions": len(self.sessions), "lookups": s.lookups,
            "transcript_reads": s.transcript_reads, "status_polls": s.status_polls,
            "event_clients": len(self.streams), "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_rss_kb": usage.ru_maxrss,
        }  # fmt: skip


class Connection(asyncio.Protocol):
    """One client connection: requests one after the other (no pipelining needed)."""

    def __init__(self, standin: Standin) -> None:
        self.standin = standin
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a held prompt_async is waiting for its answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.standin.streams.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while not self.busy and self._one_request():
            pass

    def _one_request(self) -> bool:
        """Serve the request at the head of the buffer if it is whole; whether one was."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                self._close()
            return False
        head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        method, target = head[0].split(" ")[:2]
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in head[1:])}
        length = int(headers.get("content-length", "0"))
        if len(self.buffer) < end + 4 + length:
            return False
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        self.route(method, target, body)
        return True

    def route(self, method: str, target: str, body: bytes) -> None:
        path, _, query = target.partition("?")
        standin = self.standin
        if method == "GET" and path == "/global/event":
            self._open_stream()
        elif method == "GET" and path == "/session/status":
            standin.stats.status_polls += 1
            busy = {s.id: {"type": "busy"} for s in standin.sessions.values() if s.hand_offs}
            self.send_json(200, busy)
        elif method == "GET" and path == "/agent":
            self.send(200, AGENTS)
        elif method == "GET" and path == "/_standin/stats":
            self.send_json(200, standin.stats_json())
        elif method == "GET" and path == "/_standin/received":
            self.send_json(200, standin.stats.received)
        elif method == "POST" and path == "/_standin/phase":
            standin.new_phase(json.loads(body or b"{}"))
            self.send_json(200, standin.stats_json())
        else:
            self._session_route(method, path, query, body)

    def _session_route(self, method: str, path: str, query: str, body: bytes) -> None:
        match = SESSION_RE.match(path)
        if match is None:
            self.send_json(404, {"name": "NotFoundError", "data": {"message": "no such route"}})
            return
        session = self.standin.session(match.group(1))
        sub = match.group(2)
        if method == "GET" and sub is None:
            self.standin.stats.lookups += 1
            self.send_json(200, {"id": session.id, "directory": session.directory})
        elif method == "GET" and sub == "/message":
            self.standin.stats.transcript_reads += 1
            limit = int(query[6:]) if query.startswith("limit=") else 0
            transcript = list(session.transcript)
            self.send_json(200, transcript[-limit:] if limit else transcript)
        elif method == "POST" and sub == "/prompt_async":
            self.standin.prompt(session, body)
            if self.standin.hold_s > 0:
                self.busy = True
                asyncio.get_running_loop().call_later(self.standin.hold_s, self._answer, session)
            else:
                self._answer(session)
        else:
            self.send_json(404, {"name": "NotFoundError", "data": {"message": "no such route"}})

    def _answer(self, session: Session) -> None:
        self.send(204, b"")
        self.standin.answered(session)
        if self.busy:
            self.busy = False
            self.data_received(b"")  # a request that came meanwhile

    def _open_stream(self) -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        self.standin.streams.add(self.transport)
        self.standin.publish("", "server.connected", {})

    def send_json(self, status: int, body: Any) -> None:
        self.send(status, json.dumps(body, separators=(",", ":")).encode())

    def send(self, status: int, body: bytes) -> None:
        assert self.transport is not None
        kind = b"content-type: application/json\r\n" if status != 204 else b""
        length = b"" if status == 204 else b"content-length: %d\r\n" % len(body)
        line = f"HTTP/1.1 {status} {REASONS.get(status, 'Other')}\r\n".encode()
        self.transport.write(line + kind + length + b"\r\n" + body)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def serve(args: argparse.Namespace) -> None:
    standin = Standin(args.root, args.hold_ms / 1000, args.turn_ms / 1000, args.keep, args.record)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(standin), "127.0.0.1", args.port)
    port = server.sockets[0].getsockname()[1]
    print(f"listening on {port}", flush=True)
    standin.heartbeat()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    server.close()
    for transport in list(standin.streams):
        transport.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--root", type=Path, required=True, help="sessions' directories go here")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--hold-ms", type=float, default=0.0, help="delay before each 204")
    parser.add_argument("--turn-ms", type=float, default=0.0, help="turn length after the 204")
    parser.add_argument("--keep", type=int, default=256, help="prompts kept per transcript")
    parser.add_argument("--record", type=int, default=0, help="arrivals kept for /received")
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to a CPU")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
