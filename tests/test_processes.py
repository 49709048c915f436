"""The caller behind a Unix-socket request, as /proc tells it (pigeond.processes, api.callers)."""

from __future__ import annotations

import os
from pathlib import Path

from pigeond.api.callers import TCP_CALLER, UNKNOWN_CALLER, caller_of_view
from pigeond.processes import MAX_ANCESTORS, ProcessView, inspect_process


def fake_process(
    proc: Path, pid: int, ppid: int, comm: str, *, sid: int = 7, tty: int = 0, argv0: str = ""
) -> None:
    """A /proc/<pid> with the stat fields pigeond reads (comm may hold ') ' like a real one)."""
    folder = proc / str(pid)
    folder.mkdir(parents=True)
    (folder / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {sid} {tty} -1 4194304 0 0\n")
    (folder / "cmdline").write_bytes((argv0 or comm).encode() + b"\0--flag\0")


def test_the_own_process_is_read_from_the_real_proc() -> None:
    """The test's own process: its session id as the kernel says, no agent above it."""
    view = inspect_process(os.getpid())
    assert view is not None and view.pid == os.getpid() and view.sid == os.getsid(0)


def test_a_process_an_agent_started_names_the_agent(tmp_path: Path) -> None:
    """A shell in opencode's bash tool is opencode's, though it has a terminal."""
    fake_process(tmp_path, 100, 1, "opencode", tty=34816)
    fake_process(tmp_path, 200, 100, "bash", tty=34816)
    fake_process(tmp_path, 300, 200, "pigeon-send", tty=34816)
    view = inspect_process(300, tmp_path)
    assert view == ProcessView(300, 7, True, "opencode", 100)
    assert not view.person


def test_an_agent_run_by_node_is_found_by_its_arguments(tmp_path: Path) -> None:
    """``node /usr/lib/node_modules/.bin/codex`` is Codex."""
    fake_process(tmp_path, 100, 1, "node", argv0="/usr/bin/node")
    (tmp_path / "100" / "cmdline").write_bytes(b"/usr/bin/node\0/x/bin/codex\0exec\0")
    fake_process(tmp_path, 200, 100, "pigeon-mcp")
    view = inspect_process(200, tmp_path)
    assert view is not None and view.agent == "codex" and view.agent_pid == 100


def test_a_terminal_without_an_agent_is_a_person(tmp_path: Path) -> None:
    """A shell at a terminal, its parents no agent, is a person's."""
    fake_process(tmp_path, 100, 1, "sshd: me@pts/2 (x) y", tty=0)
    fake_process(tmp_path, 200, 100, "bash", tty=34818, sid=200)
    fake_process(tmp_path, 300, 200, "pigeon-send", tty=34818, sid=200)
    view = inspect_process(300, tmp_path)
    assert view is not None and view.person and view.sid == 200


def test_no_terminal_and_no_agent_is_neither(tmp_path: Path) -> None:
    """A cron job is no person and no agent."""
    fake_process(tmp_path, 300, 1, "pigeon-send")
    view = inspect_process(300, tmp_path)
    assert view is not None and not view.person and view.agent is None


def test_a_gone_or_hidden_process_is_unknown(tmp_path: Path) -> None:
    """No /proc entry, or pid 0 (a peer in another pid namespace): nothing is known."""
    assert inspect_process(4242, tmp_path) is None
    assert inspect_process(0, tmp_path) is None


def test_the_ancestor_walk_is_bounded(tmp_path: Path) -> None:
    """An agent further up than MAX_ANCESTORS is not looked for."""
    depth = MAX_ANCESTORS + 5
    fake_process(tmp_path, 1000, 1, "opencode")
    for pid in range(1001, 1001 + depth):
        fake_process(tmp_path, pid, pid - 1, "sh")
    view = inspect_process(1000 + depth, tmp_path)
    assert view is not None and view.agent is None


def test_every_process_an_agent_started_is_one_caller() -> None:
    """Its plugin and its bash tool's pigeon-send are charged as the agent."""
    plugin = caller_of_view(ProcessView(100, 7, False, "opencode", 100), 100)
    shell = caller_of_view(ProcessView(300, 9, True, "opencode", 100), 300)
    assert plugin.key == shell.key == "agent:100"
    assert not shell.person and shell.describe() == "pid 300, started by opencode"


def test_a_person_is_charged_by_login_session() -> None:
    """Two pigeon-sends from one terminal share a caller; a person is marked."""
    first = caller_of_view(ProcessView(300, 200, True, None, None), 300)
    second = caller_of_view(ProcessView(301, 200, True, None, None), 301)
    assert first.key == second.key == "session:200" and first.person


def test_an_unreadable_peer_is_one_unknown_caller() -> None:
    """A peer /proc cannot tell about is neither person nor agent, and no TCP client."""
    caller = caller_of_view(None, 0)
    assert caller.key == UNKNOWN_CALLER and caller.key != str(TCP_CALLER) and not caller.person
