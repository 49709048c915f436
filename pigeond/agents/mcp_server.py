"""``pigeon-mcp``: pigeond's swarm tools for MCP clients (Claude Code, Codex), over stdio.

Built on the official ``mcp`` package's low-level server.  Who the tools act for is
fixed at start: ``CLAUDE_CODE_SESSION_ID`` (Claude Code gives every MCP server it starts
its session id), else ``--as @name`` (the member ``mcp_<name>``, which claims the name
at start), else nobody (swarm_send then needs ``from``).  ``--channel`` (Claude Code
only) pushes pigeond's hand-offs into the idle session (:mod:`pigeond.agents.channel`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.runner import serve_loop
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from pydantic import BaseModel

from pigeond import __version__
from pigeond.agents.channel import CHANNEL_METHOD, ChannelPoller
from pigeond.agents.daemon_link import Daemon, ToolError
from pigeond.agents.escaping import field
from pigeond.agents.identity import CLAUDE_SESSION_RE, member_of_name
from pigeond.agents.mcp_tools import Identity, Tools
from pigeond.agents.tool_specs import SPECS
from pigeond.credentials import SYSTEM_SOCKET

EXIT_USAGE = 2
CHANNEL_CAPABILITY = "claude/channel"


class ChannelNotification(BaseModel):
    """``notifications/claude/channel``: Claude Code's extension, which the SDK's typed
    notification union does not list; ``send_notification`` only dumps it."""

    method: Literal["notifications/claude/channel"] = CHANNEL_METHOD
    params: dict[str, Any]


class Peer:
    """The client, once it has spoken: where a push goes.  Set by a middleware from the
    first message after the handshake (either protocol era)."""

    def __init__(self) -> None:
        self.session: ServerSession | None = None
        self.ready = anyio.Event()

    async def middleware(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        if not self.ready.is_set() and ctx.method not in ("initialize", "server/discover"):
            self.session = ctx.session
            self.ready.set()
        return result

    async def push(self, text: str) -> None:
        await self.ready.wait()
        assert self.session is not None
        note = ChannelNotification(params={"content": text, "meta": {"from": "pigeond"}})
        await self.session.send_notification(cast(types.ServerNotification, note))


class PigeonServer(Server[Any]):
    """The low-level server with the channel capability declared when it is on."""

    def __init__(self, tools: Tools, *, channel: bool) -> None:
        super().__init__(
            "pigeon",
            version=__version__,
            instructions="pigeond's swarm: send and read messages between agent sessions.",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )
        self.tools = tools
        self.channel = channel

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        experimental = dict(experimental_capabilities or {})
        if self.channel:
            experimental[CHANNEL_CAPABILITY] = {}
        return super().create_initialization_options(
            notification_options, experimental or None, extensions
        )

    async def run(
        self,
        # the SDK's own types for these are in a private module (mcp.shared._stream_protocols)
        read_stream: Any,
        write_stream: Any,
        initialization_options: InitializationOptions,
        raise_exceptions: bool = False,
    ) -> None:
        """With the channel on, the handshake era only (``initialize``, where the capability
        above is declared): Claude Code 2.1.332 opens a 2026-07-28 connection
        (``server/discover``) whenever a server serves one, and on such a connection it
        drops channel notifications ("no unsolicited notification path").  Refused
        ``server/discover`` (method not found), it falls back to the handshake."""
        if not self.channel:
            await super().run(read_stream, write_stream, initialization_options, raise_exceptions)
            return
        async with self.lifespan(self) as lifespan_context:
            await serve_loop(
                self,
                read_stream,
                write_stream,
                lifespan_state=lifespan_context,
                init_options=initialization_options,
                raise_exceptions=raise_exceptions,
            )

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=name, description=description, input_schema=schema)
                for name, (description, schema) in SPECS.items()
            ]
        )

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        if name not in self.tools.table:
            return text_result(f"there is no tool {field(name)}", error=True)
        arguments = {} if params.arguments is None else params.arguments
        try:
            text = await anyio.to_thread.run_sync(
                self.tools.run, name, arguments, abandon_on_cancel=True
            )
        except ToolError as e:
            return text_result(str(e), error=True)
        return text_result(text)


def text_result(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)


# -- start -----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pigeon-mcp",
        description="pigeond's swarm tools (swarm_send, swarm_read, ...) as an MCP server on"
        " stdio, for Claude Code and Codex.",
    )
    parser.add_argument(
        "--as",
        dest="as_name",
        metavar="@NAME",
        help="act as the member mcp_NAME and claim the name NAME for it at start (for a"
        " client that gives no session id, such as Codex); ignored under Claude Code,"
        " whose session id (CLAUDE_CODE_SESSION_ID) is used",
    )
    parser.add_argument(
        "--channel",
        action="store_true",
        help="Claude Code only: push what pigeond hands this session into it while it is idle"
        " (notifications/claude/channel); start Claude Code with"
        " --dangerously-load-development-channels server:pigeon",
    )
    return parser


class UsageError(ValueError):
    pass


def identity_from(args: argparse.Namespace, env: Mapping[str, str]) -> Identity:
    claude = env.get("CLAUDE_CODE_SESSION_ID", "")
    name = None
    if args.as_name is not None:
        name = args.as_name[1:] if args.as_name.startswith("@") else args.as_name
        try:
            member = member_of_name(name)
        except ValueError as e:
            raise UsageError(f"--as: {e}") from e
    if claude:
        if not CLAUDE_SESSION_RE.fullmatch(claude):
            raise UsageError(
                f"CLAUDE_CODE_SESSION_ID={field(claude, 80)} is not a Claude Code session id"
            )
        if name is not None:
            print(
                f"pigeon-mcp: --as @{name} ignored: this is Claude Code session {claude}",
                file=sys.stderr,
            )
        return Identity(claude)
    if args.channel:
        raise UsageError("--channel needs a Claude Code session (CLAUDE_CODE_SESSION_ID)")
    return Identity(None) if name is None else Identity(member, name)


async def serve(server: PigeonServer, peer: Peer, poller: ChannelPoller | None) -> None:
    """Serve stdio until the client closes it; the poller (if any) beside it."""
    async with anyio.create_task_group() as group:
        if poller is not None:
            group.start_soon(poller.run)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        group.cancel_scope.cancel()


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    system_socket: str = SYSTEM_SOCKET,
) -> int:
    env = os.environ if env is None else env
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else 0
    try:
        identity = identity_from(args, env)
    except UsageError as e:
        print(f"pigeon-mcp: {e}", file=sys.stderr)
        return EXIT_USAGE
    tools = Tools(identity, env, system_socket)
    server = PigeonServer(tools, channel=args.channel)
    peer = Peer()
    server.middleware.append(peer.middleware)
    poller = None
    if args.channel:
        assert identity.session is not None

        def daemon() -> Daemon:
            return Daemon.from_env("channel", env, system_socket)

        poller = ChannelPoller(identity.session, daemon, peer.push)
    if identity.name is not None:
        with identity.lock:
            tools.claim("pigeon-mcp")
            if identity.claim_problem is not None:
                print(f"pigeon-mcp: {identity.claim_problem}", file=sys.stderr, flush=True)
    anyio.run(serve, server, peer, poller)
    return 0


def entry() -> None:
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
