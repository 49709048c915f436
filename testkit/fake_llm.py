"""A scripted, OpenAI-compatible fake LLM for the real ``opencode serve``.

opencode is configured with a provider ``fake`` (``@ai-sdk/openai-compatible``,
bundled in the opencode binary) whose ``baseURL`` is :attr:`FakeLLM.base_url`.
The server speaks just enough of the OpenAI API for opencode:

* ``POST /v1/chat/completions``: with ``"stream": true`` (what opencode sends)
  an SSE stream of ``chat.completion.chunk`` objects spread over
  :attr:`FakeLLM.delay_s` seconds; without it one JSON body after the delay.
  Inside :meth:`FakeLLM.turns_held` a main completion answers nothing until the
  block ends: a turn that lasts while a test sends what must arrive during it.
  The last chunk always carries a ``finish_reason`` (``stop``, or
  ``tool_calls`` after a tool call): without one opencode records the
  finish as ``unknown`` and calls the model again, forever.
* ``GET /v1/models``: the one model, ``fake-model``.

Every completion request is recorded as a :class:`Completion` with its start
and end (``time.monotonic()``, the test process's clock), its kind (``title``
for opencode's title generator, detected by its system prompt, else
``main``), the session it is for (opencode 1.15 and 1.18 send the session id
in ``x-session-affinity``; 1.18 also in ``x-session-id``), opencode's
``User-Agent`` (``opencode/<version> ...``) and the user texts it carried.
:meth:`FakeLLM.max_concurrent` counts overlapping requests live, in all or
for one session, so two agent turns of one session running in parallel show
up as a value above 1, even when they are aborted midway.

The reply text is :func:`ack_for` of the last user text, so a transcript shows
which prompt each assistant message answered.  A ``CALL <tool> <json>``
directive in the last user text makes the model call that tool instead (see
:mod:`testkit.tool_script`); the completion is then recorded with its
:class:`ToolCall`, and the next one, which answers the tool's result, with its
:class:`ToolResult`.  With :attr:`FakeLLM.echo_swarm` on, a last user text holding a
swarm envelope from another session (and no ``CALL``) is answered with a ``swarm_send``
back to its sender (:func:`~testkit.tool_script.echo_call`), when opencode offers that
tool: two such sessions message each other for ever.

Stdlib only; binds 127.0.0.1 on a free port; serves from a daemon thread.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

from testkit.completion import Completion, Kind, ack_for, classify, content_text, system_text
from testkit.fake_llm_http import CompletionHandler, CompletionServer, json_reply, stream_reply
from testkit.tool_script import (
    answer_text,
    echo_call,
    tool_call_in,
    tool_names,
    tool_result_in,
)

# the longest a held turn waits for its release (a test that failed inside turns_held)
HOLD_LIMIT_S = 120.0
TITLE_REPLY = "Fake session title"


class FakeLLM:
    """The fake model server; :meth:`start` it, :meth:`close` it.

    ``delay_s`` (one main completion), ``title_delay_s``, ``chunks`` and ``echo_swarm``
    may be changed between tests; a request reads them when it starts.
    """

    def __init__(self, *, delay_s: float = 0.3, title_delay_s: float = 0.05, chunks: int = 3):
        self.delay_s = delay_s
        self.title_delay_s = title_delay_s
        self.chunks = chunks
        self.echo_swarm = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._records: list[Completion] = []
        # Keyed by (kind, session) and by (kind, None) for every session together.
        self._in_flight: collections.Counter[tuple[Kind, str | None]] = collections.Counter()
        self._max_in_flight: collections.Counter[tuple[Kind, str | None]] = collections.Counter()
        self._generation = 0
        self._last_start = 0.0
        self._turns_released = threading.Event()
        self._turns_released.set()
        self._server: CompletionServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> FakeLLM:
        """Bind 127.0.0.1 on a free port and serve from a daemon thread."""
        if self._server is not None:
            raise RuntimeError("the fake LLM is already running")
        server = CompletionServer(("127.0.0.1", 0), CompletionHandler)
        server.answer = self._complete
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.name = "fake-llm"
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the socket (requests still streaming end with an error)."""
        server, self._server = self._server, None
        if server is None:
            return
        self._turns_released.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the fake LLM is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What opencode's provider ``baseURL`` must be: ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- what the tests read ---------------------------------------------------

    def reset(self) -> None:
        """Forget every record; the maxima restart from what is in flight now.

        A request that started before the reset is not recorded when it ends.
        """
        self._turns_released.set()
        with self._lock:
            self._generation += 1
            self._records.clear()
            self._max_in_flight = collections.Counter(+self._in_flight)
            self._changed.notify_all()

    def completions(
        self, kind: Kind | None = "main", session: str | None = None
    ) -> list[Completion]:
        """The finished requests of one kind (None: every kind), for one session if given.

        In order of their end.
        """
        with self._lock:
            return [
                r
                for r in self._records
                if (kind is None or r.kind == kind) and (session is None or r.session == session)
            ]

    def max_concurrent(self, kind: Kind = "main", session: str | None = None) -> int:
        """The most requests of ``kind`` (for ``session``, if given) in flight at once.

        Counted since the last reset.
        """
        with self._lock:
            return self._max_in_flight[(kind, session)]

    def in_flight(self, kind: Kind | None = "main") -> int:
        """Requests of ``kind`` (None: every kind) being answered right now."""
        with self._lock:
            kinds: tuple[Kind, ...] = ("main", "title") if kind is None else (kind,)
            return sum(self._in_flight[(k, None)] for k in kinds)

    @contextlib.contextmanager
    def turns_held(self) -> Iterator[None]:
        """Main completions that start in the block answer nothing until it ends: the turn
        runs (opencode shows the session busy) for as long as the test needs, on any
        machine, instead of for a delay the test must beat."""
        self._turns_released.clear()
        try:
            yield
        finally:
            self._turns_released.set()

    def wait_for(
        self, predicate: Callable[[FakeLLM], bool], timeout_s: float, what: str = "condition"
    ) -> None:
        """Block until ``predicate(self)`` holds (checked at every change and every 50 ms)."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"fake LLM: {what} not reached within {timeout_s:g} s "
                    f"(main done={len(self.completions('main'))}, "
                    f"in flight={self.in_flight(None)}, max main={self.max_concurrent('main')})"
                )
            with self._changed:
                self._changed.wait(timeout=min(remaining, 0.05))

    def wait_quiet(self, quiet_s: float, timeout_s: float) -> None:
        """Block until no request has been in flight, nor started, for ``quiet_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                busy = self._in_flight[("main", None)] + self._in_flight[("title", None)] > 0
                last = max((r.end for r in self._records), default=0.0)
                last = max(last, self._last_start)
            now = time.monotonic()
            if not busy and now - last >= quiet_s:
                return
            if now >= deadline:
                raise TimeoutError(
                    f"fake LLM still busy after {timeout_s:g} s "
                    f"(in flight={self.in_flight(None)}, done={len(self.completions(None))})"
                )
            time.sleep(min(0.05, max(deadline - now, 0.0)))

    # -- serving ---------------------------------------------------------------

    def _complete(self, handler: CompletionHandler, request: dict[str, Any]) -> None:
        raw_messages = request.get("messages")
        messages = [
            cast(dict[str, Any], m)
            for m in (raw_messages if isinstance(raw_messages, list) else [])
            if isinstance(m, dict)
        ]
        user_texts = tuple(
            content_text(m.get("content")) for m in messages if m.get("role") == "user"
        )
        last_user = user_texts[-1] if user_texts else ""
        kind = classify(messages)
        session = handler.headers.get("x-session-affinity") or handler.headers.get("x-session-id")
        keys: tuple[tuple[Kind, str | None], ...] = (
            ((kind, None), (kind, session)) if session else ((kind, None),)
        )
        reply = TITLE_REPLY if kind == "title" else ack_for(last_user)
        tool_result = tool_result_in(messages, content_text) if kind == "main" else None
        tool_call = None
        if tool_result is not None:
            reply = answer_text(tool_result)
        elif kind == "main" and messages and messages[-1].get("role") == "user":
            tool_call = tool_call_in(last_user)
            if tool_call is None and self.echo_swarm and "swarm_send" in tool_names(request):
                tool_call = echo_call(last_user)
        with self._lock:
            generation = self._generation
            delay = self.title_delay_s if kind == "title" else self.delay_s
            chunks = max(1, self.chunks)
            for key in keys:
                self._in_flight[key] += 1
                self._max_in_flight[key] = max(self._max_in_flight[key], self._in_flight[key])
            start = time.monotonic()
            self._last_start = start
            self._changed.notify_all()
        error: str | None = None
        try:
            if kind == "main":
                self._turns_released.wait(HOLD_LIMIT_S)
            if request.get("stream"):
                stream_reply(handler, reply, delay, chunks, tool_call)
            else:
                time.sleep(delay)
                json_reply(handler, reply)
        except OSError as exc:  # the client went away (opencode aborted the turn)
            error = repr(exc)
            handler.close_connection = True
        finally:
            record = Completion(
                kind=kind,
                session=session,
                user_agent=handler.headers.get("User-Agent", ""),
                start=start,
                end=time.monotonic(),
                user_texts=user_texts,
                last_user_text=last_user,
                last_role=str(messages[-1].get("role")) if messages else "",
                n_messages=len(messages),
                system_head=" ".join(system_text(messages).split())[:80],
                reply=reply,
                error=error,
                tools=tool_names(request),
                tool_call=tool_call,
                tool_result=tool_result,
                model=str(request.get("model", "")),
            )
            with self._lock:
                for key in keys:
                    self._in_flight[key] -= 1
                if generation == self._generation:
                    self._records.append(record)
                self._changed.notify_all()
