"""The swarm tools as pigeon-mcp runs them: each takes the model's arguments, asks pigeond
and returns the text the model reads, or raises a ToolError (the tool's error).

Blocking calls (the server runs each in a worker thread); wording and behaviour follow
the opencode plugin's tools, with the caller's identity from pigeon-mcp's start
(:class:`Identity`) where opencode gives the plugin its session.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any
from urllib.parse import quote, urlencode

from pigeond.agents import tool_args
from pigeond.agents.daemon_link import READ_RETRY_S, Daemon, RateLimited, ToolError, Unreachable
from pigeond.agents.daemon_link import refused as refused_by
from pigeond.agents.escaping import field
from pigeond.agents.identity import MCP_PREFIX
from pigeond.agents.rendering import (
    DEFAULT_READ_LIMIT,
    counted,
    fitting_count,
    held_line,
    history_view,
    page_items,
    render_channels,
    render_fan_out,
    render_inbox,
    render_members,
    render_owed,
    render_status,
    search_view,
)
from pigeond.cli.daemon_http import DaemonAnswer
from pigeond.credentials import SYSTEM_SOCKET

WAIT_PATH = "/swarm/agent/wait"


@dataclass
class Identity:
    """Who the tools act for: a Claude Code session, an ``mcp_<name>`` member, or nobody
    (then swarm_send needs 'from' and the tools of one's own inbox say what is missing).
    ``claim_problem`` says why the name of ``--as`` is not this member's (yet)."""

    session: str | None
    name: str | None = None
    claim_problem: str | None = None
    lock: threading.Lock = dataclass_field(default_factory=threading.Lock, repr=False)

    @property
    def is_member(self) -> bool:
        return self.session is not None and self.session.startswith(MCP_PREFIX)


NO_IDENTITY = (
    "pigeon-mcp knows no session of yours: it runs outside Claude Code (no"
    " CLAUDE_CODE_SESSION_ID) and was started without --as @name"
)


class Tools:
    """The eight tools for one identity; ``env`` is where the daemon and token are found."""

    def __init__(
        self, identity: Identity, env: Mapping[str, str], system_socket: str = SYSTEM_SOCKET
    ) -> None:
        self.identity = identity
        self.env = env
        self.system_socket = system_socket
        self.table: dict[str, Callable[[object], str]] = {
            "swarm_send": self.send,
            "swarm_read": self.read,
            "swarm_status": self.status,
            "swarm_name": self.name,
            "swarm_channel": self.channel,
            "swarm_policy": self.policy,
            "swarm_owed": self.owed,
            "swarm_search": self.search,
        }

    def run(self, tool: str, args: object) -> str:
        """The tool's text; ToolError for what the model must be told went wrong."""
        try:
            text = self.table[tool](args)
        except (Unreachable, RateLimited) as e:  # swarm_send words its own
            raise ToolError(f"{tool}: {e}") from e
        note = self.claim_note(tool)
        return text if note is None else f"{note}\n{text}"

    # -- identity --------------------------------------------------------------

    def daemon(self, tool: str) -> Daemon:
        return Daemon.from_env(tool, self.env, self.system_socket)

    def claim(self, tool: str) -> None:
        """Claim ``--as``'s name for this member; on failure ``claim_problem`` says why."""
        identity = self.identity
        if identity.name is None or identity.session is None:
            return
        try:
            answer = self.daemon(tool).call(
                tool, "POST", "/swarm/names", {"name": identity.name, "session": identity.session}
            )
        except ToolError as e:
            identity.claim_problem = f"cannot claim @{identity.name}: {e}"
            return
        if answer.status == 200:
            identity.claim_problem = None
        elif answer.status == 409:
            holder = field(answer.body.get("session") or "another session")
            identity.claim_problem = (
                f"the name {identity.name} is held by {holder}, a live session: messages to"
                f" @{identity.name} reach it, not you (start pigeon-mcp with another --as)"
            )
        else:
            why = field(answer.body.get("error") or f"HTTP {answer.status}", 300)
            identity.claim_problem = f"pigeond refused to give you @{identity.name}: {why}"

    def claim_note(self, tool: str) -> str | None:
        """Claim the name again if it failed before; the line that says it still failed."""
        identity = self.identity
        with identity.lock:
            if identity.claim_problem is not None:
                self.claim(tool)
            problem = identity.claim_problem
        return None if problem is None else f"(pigeon-mcp: {problem})"

    def session(self, tool: str) -> str:
        if self.identity.session is None:
            raise ToolError(f"{tool}: {NO_IDENTITY}, so there is no inbox of yours to use")
        return self.identity.session

    # -- the tools ---------------------------------------------------------------

    def send(self, raw: object) -> str:
        tool = "swarm_send"
        send = tool_args.parse_send(raw)
        own = self.identity.session
        if own is None and send.sender is None:
            raise ToolError(f"{tool}: {NO_IDENTITY}: pass 'from' (who is sending)")
        if own is not None and send.sender is not None and send.sender != own:
            raise ToolError(f"{tool}: 'from' is yours, {own}: leave it out")
        sender = own if own is not None else send.sender
        daemon = self.daemon(tool)
        msg_id = "msg_tool_" + uuid.uuid4().hex
        body = {**send.body(), "from": sender, "msg_id": msg_id}
        try:
            answer = daemon.call(tool, "POST", "/swarm/send", body, budget_s=daemon.send_retry_s)
        except Unreachable as e:
            raise ToolError(
                f"{tool}: the message was NOT sent: {e}. Check that the pigeond service runs;"
                " calling swarm_send again is safe."
            ) from e
        except RateLimited as e:
            raise ToolError(
                f"{tool}: the message was NOT sent: {e}. Calling swarm_send again later is safe"
                " (the same call never sends twice)."
            ) from e
        why = field(answer.body.get("error"), 500) if answer.body.get("error") else None
        if answer.status == 404 and send.to is not None and send.to.startswith("@"):
            raise ToolError(
                f"{tool}: the message was NOT sent: {why or f'nobody holds {send.to}'}. Check the"
                " name (or ask its session to claim it with swarm_name); nothing was queued."
            )
        if answer.status == 404 and send.to is not None:
            raise ToolError(
                f"{tool}: the message was NOT sent: {why or f'no session {send.to}'}. Check the"
                " session id (a typo, or a session that was deleted); nothing was queued."
            )
        if answer.status == 403 and answer.body.get("policy"):
            raise ToolError(
                f"{tool}: the message was NOT sent: {why}. The target does not take messages"
                " from you now; nothing was queued."
            )
        if answer.status != 202:
            raise refused_by(tool, answer)
        held = answer.body.get("held")
        if isinstance(held, dict):  # a conversation brake holds it for a person
            return held_line(msg_id, held)
        if send.channel is not None and isinstance(answer.body.get("deliveries"), list):
            return render_fan_out(msg_id, send.channel, answer.body)
        state = "queued"
        try:
            status = daemon.once(tool, "GET", f"/swarm/message/{msg_id}", None, 5.0)
            if status.status == 200 and status.body.get("state"):
                state = field(status.body["state"])
        except ToolError:
            pass  # the message is on disk; its state is only a courtesy
        unchecked = (
            " (opencode could not be asked whether the session exists; it waits in the queue)"
            if send.to is not None and answer.body.get("target_checked") is False
            else ""
        )
        where = f"to {send.to}" if send.to is not None else f"on channel {send.channel}"
        return f"sent {msg_id} {where}: {state}{unchecked}"

    def get(self, tool: str, path: str) -> DaemonAnswer:
        return self.daemon(tool).call(tool, "GET", path)

    def read(self, raw: object) -> str:
        tool = "swarm_read"
        since, limit = tool_args.parse_read(raw)
        session = self.session(tool)
        due = self.take_due(tool, session) if self.identity.is_member else []
        query = {"session": session, "limit": str(limit)}
        if since is not None:
            query["since"] = since
        answer = self.get(tool, f"/swarm/inbox?{urlencode(query)}")
        if answer.status != 200:
            raise refused_by(tool, answer)
        inbox = render_inbox(answer.body, since, limit)
        owed = self.get(tool, f"/swarm/owed?{urlencode({'session': session})}")
        if owed.status == 404:  # a daemon older than owed replies: the inbox alone
            lines = []
        elif owed.status != 200:
            lines = [f"(owed replies not listed: HTTP {owed.status})"]
        else:
            lines = render_owed(owed.body)
        return "\n".join([*due, *lines, inbox])

    def take_due(self, tool: str, session: str) -> list[str]:
        """What pigeond hands this member now (POST /swarm/agent/wait, wait_s 0): its
        envelopes, exactly as pigeond wrote them, before the inbox."""
        answer = self.daemon(tool).call(tool, "POST", WAIT_PATH, {"session": session, "wait_s": 0})
        if answer.status == 404:  # a daemon without the route: the inbox alone
            return []
        if answer.status != 200:
            why = field(answer.body.get("error") or f"HTTP {answer.status}", 300)
            return [f"(messages due to you not taken now: {why})"]
        text, ids = answer.body.get("text"), answer.body.get("msg_ids")
        if not isinstance(text, str) or not text:
            return []
        count = len(ids) if isinstance(ids, list) else 0
        return [
            f"handed to you now, {counted(count, 'message')}:",
            text,
            "(end of what was handed to you now)",
        ]

    def status(self, raw: object) -> str:
        tool = "swarm_status"
        msg_id = tool_args.parse_status(raw)
        answer = self.get(tool, f"/swarm/message/{msg_id}")
        if answer.status == 404:
            raise ToolError(f"{tool}: pigeond has no message {msg_id}")
        if answer.status != 200:
            raise refused_by(tool, answer)
        return render_status(answer.body)

    def name(self, raw: object) -> str:
        tool = "swarm_name"
        name = tool_args.parse_name(raw)
        session = self.session(tool)
        answer = self.daemon(tool).call(
            tool, "POST", "/swarm/names", {"name": name, "session": session}
        )
        if answer.status == 409:
            holder = field(answer.body.get("session") or "another session")
            raise ToolError(
                f"{tool}: the name {name} is held by {holder}, a live session; choose another name"
            )
        if answer.status != 200:
            raise refused_by(tool, answer)
        released = answer.body.get("released")
        gave_up = f" (you gave up {field(released)})" if released else ""
        if self.identity.name is not None:
            with self.identity.lock:
                self.identity.name, self.identity.claim_problem = name, None
        return f'you are now {name}: others reach you with swarm_send to "@{name}"{gave_up}'

    def policy(self, raw: object) -> str:
        tool = "swarm_policy"
        wanted = tool_args.parse_policy(raw)
        session = self.session(tool)
        daemon = self.daemon(tool)
        path = quote(session, safe="")
        lines = []
        if wanted.policy is not None:
            body: dict[str, Any] = {"policy": wanted.policy, "by": session}
            if wanted.allow is not None:
                body["allow"] = wanted.allow
            if wanted.steer is not None:
                body["steer"] = wanted.steer
            answer = daemon.call(tool, "PUT", f"/swarm/policy/{path}", body)
            if answer.status != 200:
                raise refused_by(tool, answer)
            b = answer.body
            steering = "; urgent messages may steer your running turn" if b.get("steer") else ""
            lines.append(
                f"your policy is now {field(b.get('policy'))}{steering}:"
                f" {field(b.get('held'))} message(s) held, {field(b.get('released'))} released"
            )
        if wanted.release:
            answer = daemon.call(tool, "POST", f"/swarm/release/{path}", {})
            if answer.status != 200:
                raise refused_by(tool, answer)
            lines.append(
                f"released {field(answer.body.get('released'))} held message(s): they come in"
                " your next turn"
            )
        answer = daemon.call(tool, "GET", f"/swarm/policy/{path}")
        if answer.status != 200:
            raise refused_by(tool, answer)
        allow = answer.body.get("allow")
        allowed = (
            ", ".join(field(a) for a in allow) if isinstance(allow, list) and allow else "nobody"
        )
        lines.append(
            f"policy: {field(answer.body.get('policy'))}; always let through: {allowed};"
            f" steering: {'allowed' if answer.body.get('steer') else 'off'};"
            f" held now: {field(answer.body.get('held'))}"
        )
        return "\n".join(lines)

    def channel(self, raw: object) -> str:
        tool = "swarm_channel"
        action, channel, since = tool_args.parse_channel(raw)
        session = self.session(tool)
        daemon = self.daemon(tool)

        def refused(what: str, answer: DaemonAnswer) -> ToolError:
            return refused_by(tool, answer, what, max_bytes=300)

        members = f"/swarm/channels/{channel}/members"
        if action == "join":
            answer = daemon.call(tool, "POST", members, {"session": session})
            if answer.status not in (200, 201):
                raise refused(f"cannot join {channel}", answer)
            count = counted(answer.body.get("members"), "member")
            if answer.body.get("joined") is False:
                return f"you are a member of {channel} already ({count})"
            return (
                f"you joined {channel} ({count}): every message sent to it from now reaches you"
                f' as your own copy; swarm_send with channel "{channel}" reaches the other members'
            )
        if action == "leave":
            answer = daemon.call(tool, "DELETE", f"{members}/{quote(session, safe='')}")
            if answer.status == 404:
                return f"you are not a member of {channel}: nothing changed"
            if answer.status != 200:
                raise refused(f"cannot leave {channel}", answer)
            return (
                f"you left {channel}: its new messages no longer reach you (copies already"
                " queued for you still come)"
            )
        if action == "history":
            assert channel is not None
            view = history_view(channel)

            def page(limit: int) -> Mapping[str, Any]:
                query = {"limit": str(limit)} | ({"since": since} if since else {})
                answer = daemon.call(tool, "GET", f"/swarm/channel/{channel}?{urlencode(query)}")
                if answer.status != 200:
                    raise refused(f"cannot read {channel}", answer)
                return answer.body

            found = page(DEFAULT_READ_LIMIT)
            messages = found.get("messages")
            messages = messages if isinstance(messages, list) else []
            fit = fitting_count(page_items(messages, view))
            # a history pages by cur_N only: when not all fit, ask for those that do
            if fit < len(messages):
                found = page(fit)
            return render_inbox(found, since, DEFAULT_READ_LIMIT, view)
        if channel is None:
            answer = daemon.call(tool, "GET", f"/swarm/channels?{urlencode({'session': session})}")
            if answer.status != 200:
                raise refused("cannot list your channels", answer)
            return render_channels(answer.body.get("channels"))
        answer = daemon.call(tool, "GET", f"/swarm/channels/{channel}")
        if answer.status != 200:
            raise refused(f"cannot list {channel}", answer)
        return render_members(channel, answer.body, session)

    def owed(self, raw: object) -> str:
        tool = "swarm_owed"
        tool_args.parse_owed(raw)
        session = self.session(tool)
        answer = self.get(tool, f"/swarm/owed?{urlencode({'session': session})}")
        if answer.status != 200:
            raise refused_by(tool, answer)
        lines = render_owed(answer.body)
        return "\n".join(lines) if lines else "you owe no reply, and nobody owes you one"

    def search(self, raw: object) -> str:
        tool = "swarm_search"
        query, limit = tool_args.parse_search(raw)
        session = self.session(tool)
        params = urlencode({"q": query, "session": session, "limit": str(limit)})
        answer = self.get(tool, f"/swarm/search?{params}")
        if answer.status != 200:
            raise refused_by(tool, answer)
        return render_inbox(answer.body, None, limit, search_view(query))


__all__ = ["READ_RETRY_S", "Identity", "ToolError", "Tools"]
