"""The runtimes under the delivery seam's contract tests, each built as the daemon builds it,
with what a test needs of the server behind it.

* opencode 1.x: the runtime of a daemon wired by :func:`pigeond.service.wiring.build_daemon`
  (its ``arbiter.opencode``: the directory registry, the turn tracker fed by the event
  stream, the mode-aware prompter, the transcript reader), against the real opencode
  1.18.33 or 1.15.4, offline, with the fake model; the daemon's event stream runs, its
  arbiter does not (the tests hand off themselves);
* opencode 2.x: :class:`pigeond.delivery.opencode_dialect.SwitchingRuntime`, what the daemon builds
  for a 2.x server, against the stand-in 2.x server
  (:mod:`testkit.opencode_v2_standin`) and its echo model.

What a test reads of the server it reads raw (not through the runtime under test): the
inputs a session was given (:class:`Given`) and whether a turn runs.  The servers are
called on a thread, so the reactor, which the runtime runs on, never waits for them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from pigeond.config import Config
from pigeond.credentials import BasicAuth
from pigeond.delivery.runtime import AgentRuntime, TranscriptSource
from pigeond.service.wiring import build_daemon
from testkit.fake_llm import FakeLLM
from testkit.opencode_server import OpencodeServer
from testkit.opencode_v2_standin import USER, OpencodeV2StandIn
from testkit.polling import PATIENCE_S
from tests.opencode_v2_calls import PASSWORD, call

T = TypeVar("T")


def turn_delivery(url: str, **options: Any) -> Config:
    """The daemon's settings in these tests: turn delivery to ``url``, as the end-to-end
    tests run it, and ``options``."""
    return Config(
        opencode_url=url, delivery="turn", busy_window_s=3.0, status_poll_s=0.2,
        handoff_timeout_s=10.0, turn_timeout_s=PATIENCE_S, **options,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Given:
    """One text a session was given as input: the transcript entry it is in, and its kind
    (``user``: a person's prompt; ``synthetic``: text opencode added, or 2.x's synthetic
    input)."""

    entry: str
    kind: str
    text: str


class RuntimeUnderTest(Protocol):
    """A runtime on the seam, the transcripts it reads, and the server behind it."""

    name: str
    input_kind: str  # what kind of input a batch is given as (Given.kind)
    runtime: AgentRuntime
    transcripts: TranscriptSource

    async def create_session(self) -> str:
        """A new idle session on the server; its id."""
        ...

    async def given(self, session: str) -> list[Given]:
        """Every input text the session was given, oldest first, read raw from the server."""
        ...

    async def prompt(self, session: str, text: str) -> None:
        """A person's own prompt to the session, straight to the server, as their UI sends
        it (it starts a turn, or joins the running one)."""
        ...

    async def running(self, session: str) -> bool:
        """Whether the server says a turn of the session runs."""
        ...

    def turns_held(self, session: str) -> contextlib.AbstractContextManager[None]:
        """Turns of the session that start in the block do not end until it ends."""
        ...


async def until(check: Callable[[], Awaitable[T | None]], what: str) -> T:
    """Await ``check`` every 50 ms until it gives something truthy, and return that;
    AssertionError naming ``what`` after :data:`~testkit.polling.PATIENCE_S`
    (:func:`testkit.polling.wait_until` for a check the reactor answers)."""
    deadline = reactor.seconds() + PATIENCE_S
    while not (result := await check()):
        if reactor.seconds() >= deadline:
            raise AssertionError(f"timed out after {PATIENCE_S:g} s waiting for {what}")
        await deferLater(reactor, 0.05, lambda: None)
    return result


async def on_thread(call: Callable[..., T], *args: Any) -> T:
    """A blocking call to a server, made on a thread: the reactor goes on meanwhile."""
    result: T = await deferToThread(call, *args)
    return result


class OpencodeV1UnderTest:
    """opencode 1.x's runtime, as a daemon wires it, against a real opencode."""

    def __init__(self, server: OpencodeServer, llm: FakeLLM, tmp_path: Path) -> None:
        self.name = f"opencode-{server.version}"
        self.input_kind = "user"  # a prompt_async's text part
        self.server = server
        self.llm = llm
        self.directory = server.dirs["dirA"]
        config = turn_delivery(
            server.url, db=str(tmp_path / "p.db"), token_file=str(tmp_path / "token")
        )
        self.daemon = build_daemon(config, reactor)
        assert self.daemon.arbiter is not None and self.daemon.events is not None
        self.runtime: AgentRuntime = self.daemon.arbiter.opencode
        assert self.runtime.transcripts is not None
        self.transcripts: TranscriptSource = self.runtime.transcripts
        self.daemon.events.start()  # busy and idle, as the daemon learns them

    async def stop(self) -> None:
        await self.daemon.stop()

    async def create_session(self) -> str:
        return await on_thread(self.server.create_session, self.directory, "seam contract")

    async def given(self, session: str) -> list[Given]:
        messages = await on_thread(self.server.messages, session)
        given = []
        for message in messages:
            if message["info"].get("role") != "user":
                continue
            for part in message["parts"]:
                kind = "synthetic" if part.get("synthetic") else "user"
                if part.get("type") == "text":
                    given.append(Given(message["info"]["id"], kind, str(part.get("text", ""))))
        return given

    async def prompt(self, session: str, text: str) -> None:
        status = await on_thread(self.server.prompt_async, session, self.directory, text)
        assert status == 204, status

    async def running(self, session: str) -> bool:
        return session in await on_thread(self.server.status, self.directory)

    def turns_held(self, session: str) -> contextlib.AbstractContextManager[None]:
        return self.llm.turns_held()


class OpencodeV2UnderTest:
    """opencode 2.x's runtime, as the daemon builds it, against the 2.x stand-in."""

    name = "opencode-2.x-stand-in"
    input_kind = "synthetic"  # the stand-in has /synthetic, as 2.3.0 does

    def __init__(self, standin: OpencodeV2StandIn, url: str, tmp_path: Path) -> None:
        self.standin = standin
        self.url = url
        auth = BasicAuth(USER, PASSWORD, source="test")
        config = turn_delivery(
            url, opencode_auth=auth, db=str(tmp_path / "p.db"), token_file=str(tmp_path / "token")
        )
        self.daemon = build_daemon(config, reactor)
        assert self.daemon.arbiter is not None
        # the daemon's own opencode runtime: it finds the server to be a 2.x itself
        self.runtime: AgentRuntime = self.daemon.arbiter.opencode
        assert self.runtime.transcripts is not None
        self.transcripts: TranscriptSource = self.runtime.transcripts

    async def stop(self) -> None:
        await self.daemon.stop()

    async def create_session(self) -> str:
        status, created = await on_thread(call, self.url, "POST", "/api/session", {})
        assert status == 200, created
        return str(created["data"]["id"])

    async def given(self, session: str) -> list[Given]:
        path = f"/api/session/{session}/message?order=asc"
        status, answer = await on_thread(call, self.url, "GET", path)
        assert status == 200, answer
        return [
            Given(message["id"], message["type"], message["text"])
            for message in answer["data"]
            if message["type"] in ("user", "synthetic")
        ]

    async def prompt(self, session: str, text: str) -> None:
        body = {"prompt": {"text": text}}  # no delivery: the protocol's default, steer
        status, answer = await on_thread(
            call, self.url, "POST", f"/api/session/{session}/prompt", body
        )
        assert status == 200, answer

    async def running(self, session: str) -> bool:
        status, answer = await on_thread(call, self.url, "GET", "/api/session/active")
        assert status == 200, answer
        return session in answer["data"]

    def turns_held(self, session: str) -> contextlib.AbstractContextManager[None]:
        return self.standin.sessions[session].turns_held()


@contextlib.contextmanager
def standin_served() -> Iterator[tuple[OpencodeV2StandIn, str]]:
    """A 2.x stand-in on loopback, with the password the runtime is given; it and its URL."""
    standin = OpencodeV2StandIn(PASSWORD)
    with standin.serve() as url:
        yield standin, url


@contextlib.asynccontextmanager
async def stopped_after(
    under_test: OpencodeV1UnderTest | OpencodeV2UnderTest,
) -> AsyncIterator[RuntimeUnderTest]:
    """``under_test`` until the block ends, then stopped as the daemon stops it."""
    try:
        yield under_test
    finally:
        await under_test.stop()
