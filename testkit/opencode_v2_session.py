"""The session model behind the opencode 2.x stand-in (:mod:`testkit.opencode_v2_standin`).

Written from the 2.x protocol, not from its code: inputs are admitted durably and
idempotently (the same id with the same body is the same input and the same receipt; the
same id with another body is a conflict), a ``queue`` input runs as a turn of its own
after the running one, in order, and a ``steer`` input is read at the running turn's next
step boundary (so steers sent together merge into one turn, ahead of every queued input).
Never two turns at once.  The "model" is a function of the turn's input texts, and each
step takes ``step_s`` seconds, so a test can put inputs in while a turn runs.

Thread-safe: the HTTP handler threads admit, one runner thread per session runs the
turns, and every change is published to an :class:`EventHub` (which may drop it).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

Model = Callable[[Sequence[str]], str]
"""What the stand-in's model answers to a turn's input texts (in the order it read them)."""

MODEL_REF = {"id": "stand-in-model", "providerID": "stand-in"}
AGENT = "build"
HOLD_LIMIT_S = 120.0
"""The longest a held turn waits for its release (a test that failed inside
:meth:`StandInSession.turns_held`)."""


def echo_model(texts: Sequence[str]) -> str:
    """The default model: it answers each input it read, in order."""
    return "\n".join(f"echo: {text}" for text in texts)


class AdmissionConflict(Exception):
    """An input id was admitted before with another body."""


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Input:
    """One admitted input: a person's prompt (``user``) or ``synthetic`` input."""

    id: str
    kind: str
    text: str
    delivery: str
    wakes: bool
    """False for ``resume: false``: admitted, but it does not start a turn on its own."""
    seq: int
    created_ms: int
    body: str
    """The request body, canonical JSON: what a re-admission must repeat exactly."""

    def receipt(self, session_id: str) -> dict[str, Any]:
        """The admission receipt the prompt route answers (and the inbox lists)."""
        return {
            "admittedSeq": self.seq,
            "id": self.id,
            "sessionID": session_id,
            "prompt": {"text": self.text},
            "delivery": self.delivery,
            "timeCreated": self.created_ms,
        }


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn the model ran: the inputs it read, in order, and what it answered."""

    input_ids: tuple[str, ...]
    answer: str


class EventHub:
    """The volatile event stream: each subscriber gets a bounded queue, and a subscriber
    whose queue is full is dropped (its stream ends); nothing is replayed to anyone."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._subscribers: list[Subscriber] = []
        self._ids = itertools.count(1)

    def subscribe(self) -> Subscriber:
        subscriber = Subscriber(self._capacity)
        with self._lock:
            self._subscribers.append(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

    def readers(self) -> int:
        """How many readers the stream has now (a test waits for pigeond's)."""
        with self._lock:
            return len(self._subscribers)

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        event = {"id": f"evt_{next(self._ids):08d}", "type": kind, "data": data}
        with self._lock:
            for subscriber in list(self._subscribers):
                if not subscriber.offer(event):
                    self._subscribers.remove(subscriber)


class Subscriber:
    """One reader of the event stream, as seen from the server."""

    def __init__(self, capacity: int) -> None:
        self._events: collections.deque[dict[str, Any]] = collections.deque()
        self._capacity = capacity
        self._ready = threading.Condition()
        self.dropped = False

    def offer(self, event: dict[str, Any]) -> bool:
        with self._ready:
            if len(self._events) >= self._capacity:
                self.dropped = True
                self._ready.notify_all()
                return False
            self._events.append(event)
            self._ready.notify_all()
            return True

    def next(self, timeout_s: float) -> dict[str, Any] | None:
        """The next event, or None after ``timeout_s`` or once dropped (then see
        :attr:`dropped`)."""
        with self._ready:
            self._ready.wait_for(lambda: self._events or self.dropped, timeout_s)
            return self._events.popleft() if self._events and not self.dropped else None


@dataclass
class StandInSession:
    """One 2.x session: its inbox of pending inputs, its transcript and its turns."""

    id: str
    directory: str
    events: EventHub
    model: Model
    step_s: float
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    admitted: dict[str, Input] = field(default_factory=dict)
    pending: list[Input] = field(default_factory=list)
    admission_requests: collections.Counter[str] = field(default_factory=collections.Counter)
    """How many times each input id was sent for admission (retries included)."""
    running: bool = False
    created_ms: int = field(default_factory=_now_ms)
    _seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False
    _released: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._released.set()

    @contextlib.contextmanager
    def turns_held(self) -> Iterator[None]:
        """A turn's steps in the block do not end until it ends: the turn runs (the session
        busy, its inputs read, no answer) for as long as the test needs, on any machine,
        instead of for a ``step_s`` the test must beat."""
        self._released.clear()
        try:
            yield
        finally:
            self._released.set()

    @contextlib.contextmanager
    def tool_running(
        self, name: str, arguments: dict[str, Any], output: str = "done"
    ) -> Iterator[str]:
        """The running turn's model calls tool ``name`` with ``arguments``: while the block
        runs (the tool executing), the transcript's newest step holds the tool part
        ``running``; after it, the part is ``completed`` with ``output`` and the step ends
        with ``finish: "tool-calls"`` (the turn goes on).  The call's id is yielded.  Waits
        for a turn to run (one held by :meth:`turns_held`, so that it outlasts the block)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.running, HOLD_LIMIT_S):
                raise RuntimeError(f"no turn of {self.id} ran to call {name} in")
            index = len(self.messages)
            step = _tool_step(index + 1, name, arguments)
            self.messages.append(step)
        try:
            yield step["content"][0]["id"]
        finally:
            with self._changed:  # a new dict: a reader may be encoding the old one
                self.messages[index] = _tool_step_completed(step, output)
                self._changed.notify_all()

    def admit(
        self, kind: str, input_id: str | None, text: str, delivery: str, wakes: bool, body: Any
    ) -> Input:
        """Admit an input once: the same id and body again is the same input."""
        canonical = json.dumps(body, sort_keys=True)
        with self._changed:
            seq = next(self._seq)
            input_id = input_id or f"msg_{seq:012d}"
            self.admission_requests[input_id] += 1
            known = self.admitted.get(input_id)
            if known is not None:
                if known.body != canonical or known.kind != kind:
                    raise AdmissionConflict(input_id)
                return known
            admitted = Input(input_id, kind, text, delivery, wakes, seq, _now_ms(), canonical)
            self.admitted[input_id] = admitted
            self.pending.append(admitted)
            self._changed.notify_all()
        self.events.publish(
            "session.next.prompt.admitted",
            {
                "timestamp": admitted.created_ms,
                "sessionID": self.id,
                "messageID": admitted.id,
                "prompt": {"text": text},
                "delivery": delivery,
            },
        )
        return admitted

    def cancel(self, input_id: str) -> None:
        """Drop a pending input; a delivered or unknown one is a no-op."""
        with self._changed:
            self.pending = [i for i in self.pending if i.id != input_id]

    def switch(self, input_id: str, delivery: str) -> bool:
        """Change a pending input's delivery; False when it is not pending."""
        with self._changed:
            for index, pending in enumerate(self.pending):
                if pending.id == input_id:
                    wakes = pending.wakes or delivery == "steer"
                    self.pending[index] = dataclasses.replace(
                        pending, delivery=delivery, wakes=wakes
                    )
                    self._changed.notify_all()
                    return True
            return False

    def busy(self) -> bool:
        """A turn runs, or an input waits that will start one (the runner may not have
        woken yet): what ``/api/session/active`` reports as running."""
        with self._changed:
            return self.running or any(i.wakes for i in self.pending)

    def turn_running(self) -> bool:
        """A turn runs: its first inputs are read (``busy`` is true earlier, as soon as an
        input waits that will start one, when a steer sent now would still start it)."""
        with self._changed:
            return self.running

    def transcript(self) -> list[dict[str, Any]]:
        with self._changed:
            return list(self.messages)

    def inbox(self) -> list[Input]:
        with self._changed:
            return list(self.pending)

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until no turn runs and nothing waiting would start one."""
        with self._changed:
            return self._changed.wait_for(lambda: not self.busy(), timeout_s)

    def run_forever(self) -> None:
        """The runner thread: one turn at a time, until :meth:`close`."""
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._closed or any(i.wakes for i in self.pending))
                if self._closed:
                    return
                self.running = True
                read = self._start()
                self._changed.notify_all()  # a test waiting for the turn to run
            self.events.publish(
                "session.status", {"sessionID": self.id, "status": {"type": "busy"}}
            )
            self._run_turn(read)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._released.set()  # a held turn's runner ends too

    def _start(self) -> list[Input]:
        """What a new turn reads first (under the lock): every pending steer, else the
        first queued input."""
        steers = self._steers()
        if steers:
            return steers
        first = self.pending.pop(0)
        self.messages.append(self._user_message(first))
        return [first]

    def _steers(self) -> list[Input]:
        """Every pending steer, now read by the running turn (under the lock)."""
        steers = [i for i in self.pending if i.delivery == "steer"]
        for item in steers:
            self.pending.remove(item)
            self.messages.append(self._user_message(item))
        return steers

    def _run_turn(self, read: list[Input]) -> None:
        """Steps until one ends with no steer waiting; then the turn's one answer."""
        while True:
            time.sleep(self.step_s)
            self._released.wait(HOLD_LIMIT_S)
            with self._changed:
                steered = self._steers()
                if steered:
                    read.extend(steered)
                    continue
                answer = self.model([i.text for i in read])
                self.messages.append(self._assistant_message(answer))
                self.turns.append(Turn(tuple(i.id for i in read), answer))
                self.running = False
                self._changed.notify_all()
                break
        self.events.publish("session.idle", {"sessionID": self.id})

    def _user_message(self, item: Input) -> dict[str, Any]:
        message: dict[str, Any] = {
            "id": item.id,
            "time": {"created": item.created_ms},
            "text": item.text,
            "type": item.kind,
        }
        if item.kind == "synthetic":
            message["sessionID"] = self.id
        return message

    def _assistant_message(self, answer: str) -> dict[str, Any]:
        number = len(self.turns) + 1
        return {
            "id": f"msg_assistant_{number:06d}",
            "time": {"created": _now_ms(), "completed": _now_ms()},
            "type": "assistant",
            "agent": AGENT,
            "model": dict(MODEL_REF),
            "content": [{"type": "text", "id": f"prt_{number:06d}", "text": answer}],
            "finish": "stop",
        }


def _tool_step(number: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An assistant step calling one tool, still running (``SessionMessageAssistant`` with
    a ``SessionMessageAssistantTool`` part in ``SessionMessageToolStateRunning``)."""
    created = _now_ms()
    state = {"status": "running", "input": dict(arguments), "structured": {}, "content": []}
    return {
        "id": f"msg_assistant_tool_{number:06d}",
        "time": {"created": created},
        "type": "assistant",
        "agent": AGENT,
        "model": dict(MODEL_REF),
        "content": [
            {
                "type": "tool",
                "id": f"call_{number:06d}",
                "name": name,
                "state": state,
                "time": {"created": created, "ran": created},
            }
        ],
    }


def _tool_step_completed(step: dict[str, Any], output: str) -> dict[str, Any]:
    """``step`` once its tool returned ``output``: the part ``completed``, the step ended."""
    done = _now_ms()
    [part] = step["content"]
    state = {
        "status": "completed",
        "input": part["state"]["input"],
        "structured": {"text": output},
        "content": [{"type": "text", "text": output}],
    }
    completed = {**part, "state": state, "time": {**part["time"], "completed": done}}
    time = {**step["time"], "completed": done}
    return {**step, "time": time, "content": [completed], "finish": "tool-calls"}
