"""What the kernel says about a local client process: whether it runs inside a coding agent,
and whether a person's terminal is its controlling terminal.

pigeond learns a Unix-socket client's pid from ``SO_PEERCRED``.  From ``/proc`` it then
reads the process and its ancestors.  A process that has an agent (opencode, Claude Code,
Codex) among its ancestors was started by that agent: its bash tool, its MCP server, its
plugin.  A process with a controlling terminal and no agent above it is a person's shell.

This is evidence, not proof: a same-user process can leave its parent (``setsid`` and a
double fork reparent it to init) and then looks like any other process.  The docs say
what this does and does not protect.  What it reads is bounded: at most
:data:`MAX_ANCESTORS` small files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

# The programs whose processes are coding agents, by the name the kernel gives them
# (``comm``, at most 15 characters) or the base name of their first arguments (a
# node or bun script started as ``node .../bin/opencode``).
AGENT_PROGRAMS: Final = frozenset({"opencode", "claude", "codex"})
# How far up the parent chain to look: deep enough for shell in tmux in ssh in an agent,
# and a bound on what one request costs.
MAX_ANCESTORS: Final = 32
PROC: Final = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcessView:
    """What ``/proc`` told about one client process and its ancestors."""

    pid: int
    sid: int  # its session id: processes of one terminal login (or one daemon) share it
    has_tty: bool  # a controlling terminal
    agent: str | None  # the agent program found at or above it, if any
    agent_pid: int | None

    @property
    def person(self) -> bool:
        """Started at a terminal and not by an agent: a person's shell."""
        return self.has_tty and self.agent is None


@dataclass(frozen=True, slots=True)
class _Stat:
    ppid: int
    sid: int
    tty_nr: int
    comm: str


def _stat(pid: int, proc: Path) -> _Stat | None:
    """Fields of ``/proc/<pid>/stat``; None when the process is gone or unreadable.

    ``comm`` is in parentheses and may itself hold ``)`` or spaces, so the fields are
    read after the last ``)``.
    """
    try:
        raw = (proc / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    head, sep, tail = raw.rpartition(b")")
    if not sep:
        return None
    comm = head.partition(b"(")[2].decode("utf-8", "replace")
    fields = tail.split()
    try:
        # after ")": state ppid pgrp session tty_nr ...
        return _Stat(ppid=int(fields[1]), sid=int(fields[3]), tty_nr=int(fields[4]), comm=comm)
    except (IndexError, ValueError):
        return None


def _agent_named(pid: int, comm: str, proc: Path) -> str | None:
    if comm in AGENT_PROGRAMS:
        return comm
    try:
        argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")[:2]
    except OSError:
        return None
    for arg in argv:
        name = arg.rsplit(b"/", 1)[-1].decode("utf-8", "replace")
        if name in AGENT_PROGRAMS:
            return name
    return None


def inspect_process(pid: int, proc: Path = PROC) -> ProcessView | None:
    """The view of ``pid``; None when it is gone, hidden (another pid namespace gives 0)
    or unreadable, which callers treat as knowing nothing."""
    if pid <= 0:
        return None
    own = _stat(pid, proc)
    if own is None:
        return None
    current, stat = pid, own
    for _ in range(MAX_ANCESTORS):
        agent = _agent_named(current, stat.comm, proc)
        if agent is not None:
            return ProcessView(pid, own.sid, own.tty_nr != 0, agent, current)
        if stat.ppid <= 1:
            break
        parent = _stat(stat.ppid, proc)
        if parent is None:
            break
        current, stat = stat.ppid, parent
    return ProcessView(pid, own.sid, own.tty_nr != 0, None, None)
