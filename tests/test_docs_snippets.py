"""Every shell command and SQL statement the user docs show, tried with this machine's tools.

The ```sh blocks of the README and of the manual's pages (docs/, in mkdocs.yml's nav
order: :func:`tests.docs_pages.user_docs`) are split into commands, and each command has
exactly one verdict in :data:`tests.docs_commands.RULES` (a new command without one fails
``test_every_docs_command_has_exactly_one_verdict``):

- ``RUN``: run in reading order, in one bash session (so ``export PATH=...`` and
  ``TOKEN=...`` carry over, as in an operator's shell), against a real pigeond that
  delivers to a fake opencode, in a temporary home; each must exit 0, and every curl
  answer must be JSON without an ``"error"`` (``/metrics``: Prometheus samples).
  The commands that act as a person (``pigeon name set``, ``pigeon channel join``, their
  ``curl --unix-socket`` counterparts) run at a pseudo-terminal (:func:`at_a_terminal`),
  as the docs tell an operator to run them.
- ``SQL``: the ``sqlite3`` commands run with the real sqlite3 CLI, and once more with
  Python's sqlite3 module standing in for it, on a database made by
  :func:`pigeond.storage.open_database` holding messages in the states they look for;
  their effects are asserted, and a running daemon delivers what the requeue queued.
- ``DROP_IN``: the checkout's user-unit drop-in is written into a temporary home and
  checked with ``systemd-analyze --user verify`` beside the user unit.
- ``SYNTAX_ONLY``: needs root, systemd as PID 1, or would run the test suite itself; the
  rule says why. Every block, these included, passes ``bash -n``.

Two rewrites, both deliberate: ``http://127.0.0.1:4097`` becomes the test daemon's address
(port 4097 may be taken on a shared machine), and the requeue's ``'msg_...'`` placeholder
becomes the failed message's id. The clients find the daemon as the docs say: over
``$XDG_RUNTIME_DIR/pigeond/pigeond.sock``, or with the token from ``~/.local/state``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pigeond.consent import Policy, held_reason
from pigeond.model import Hold
from pigeond.storage.repository import Accept
from testkit.daemon_process import DaemonProcess, isolated_env
from testkit.fake_opencode import FakeOpencode
from testkit.messages import new_message
from tests.docs_commands import (
    RULES,
    SESSION_TIMEOUT_S,
    Block,
    Command,
    Verdict,
    code_blocks,
    commands_with,
    docs_commands,
    matching_rules,
    run_in_one_shell,
    shell_blocks,
)
from tests.docs_pages import display, user_docs
from tests.operator_sql import DAY_MS, OperatorDb, opened, rows, run_sql_command, utc

REPO = Path(__file__).resolve().parent.parent
USER_UNIT = REPO / "systemd" / "user" / "pigeond.service"
VENV = Path(sys.executable).parent.parent

DOCS_URL = "http://127.0.0.1:4097"
DOCS_MSG_ID = "msg_mx61sqct_8cf15ecb"  # the msg_id the docs' examples show
DOCS_SESSIONS = ("ses_TARGET", "ses_B")  # the targets their commands send to
AGENT_SESSION = "ses_A"  # OPENCODE_SESSION_ID, as the plugin sets it in an agent's shell
DELIVERY_TIMEOUT_S = 15.0
# The commands that act as a person (a session's name, consent or channels, for anyone but
# the calling session): pigeond believes them only from a shell at a terminal, with no agent
# among its ancestors, over the Unix socket.  They run as the docs say to run them: at a
# terminal, a pseudo-terminal of `script` (util-linux) that is their controlling terminal.
# (A test run started by a coding agent's own shell has that agent above it: they get 403.)
AT_A_TERMINAL = re.compile(
    r"pigeon (name (set|release)|channel (join|leave)) "
    r"|curl .*--unix-socket .*/swarm/(names|channels/[^ ]+/members|policy/|release/)",
    re.S,
)


def at_a_terminal(command: Command) -> Command:
    """``command`` run at a terminal of its own, when it is one that acts as a person (its
    output, stderr too, is then what the terminal showed)."""
    if AT_A_TERMINAL.match(command.text) is None:
        return command
    text = f"script -qec {shlex.quote(command.text)} /dev/null"
    return Command(command.line, text, command.page)


def as_written(text: str) -> str:
    """A command's text as the docs show it (without :func:`at_a_terminal`'s `script`)."""
    if text.startswith("script -qec "):
        return shlex.split(text)[2]
    return text


def without_pigeond_on_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` whose PATH holds no folder of this checkout's commands (the virtualenv's
    bin): the README's own ``export PATH=...`` line (the first command run) must put them
    there.  The system's folders stay, bash's among them, even while the .deb test has
    put a pigeon-send into /usr/bin."""
    checkout_bin = Path(sys.executable).parent.resolve()
    folders = env.get("PATH", os.defpath).split(os.pathsep)
    kept = [f for f in folders if f and Path(f).resolve() != checkout_bin]
    return {**env, "PATH": os.pathsep.join(kept)}


# -- the docs' text ---------------------------------------------------------------------


def test_every_docs_command_has_exactly_one_verdict() -> None:
    """Each command of every ```sh block matches one rule: run, SQL, drop-in or syntax only
    (with its reason), so no snippet goes untried without saying why."""
    commands = docs_commands()
    assert len(commands) >= 30, [str(c) for c in commands]
    ambiguous = {str(c): [r.pattern for r in matching_rules(c)] for c in commands}
    assert {c: rules for c, rules in ambiguous.items() if len(rules) != 1} == {}
    assert all(r.reason for r in RULES if r.verdict is Verdict.SYNTAX_ONLY)


@pytest.mark.parametrize("block", shell_blocks(), ids=lambda b: f"{b.page}:{b.line}")
def test_shell_block_passes_bash_syntax_check(block: Block) -> None:
    """``bash -n`` accepts the block as written."""
    result = subprocess.run(
        ["bash", "-n"], input=block.text, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", user_docs(), ids=display)
def test_every_sql_the_docs_show_is_in_a_shell_block_that_runs(path: Path) -> None:
    """No ```sql block and no inline SQL statement escape the SQL tests below."""
    text = path.read_text(encoding="utf-8")
    assert [b.line for b in code_blocks(text) if b.lang == "sql"] == []
    outside = re.sub(r"^( *)```.*?^\1```", "", text, flags=re.M | re.S)
    inline = re.findall(r"`([^`\n]+)`", outside)
    sql = re.compile(r"\b(SELECT\s+\S+.*\bFROM|UPDATE\s+\w+\s+SET|DELETE\s+FROM|INSERT\s+INTO)\b")
    assert [s for s in inline if sql.search(s)] == []


# -- RUN: against a real pigeond ---------------------------------------------------------


@dataclass(frozen=True)
class World:
    """A checkout-like folder with a running pigeond, as the docs' reader has."""

    work: Path  # the shell's folder: a `.venv` link to this virtualenv, nothing else
    home: Path
    runtime_dir: Path
    daemon: DaemonProcess

    def env(self) -> dict[str, str]:
        extra = {"XDG_RUNTIME_DIR": str(self.runtime_dir), "OPENCODE_SESSION_ID": AGENT_SESSION}
        env = without_pigeond_on_path(isolated_env(self.home, extra))
        # pigeon install-claude and install-codex write into the temporary home, never
        # into the folders a developer's own Claude Code or Codex settings name
        for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "CLAUDE_CODE_SESSION_ID"):
            env.pop(name, None)
        return env


def wait_until_handed_off(daemon: DaemonProcess, msg_id: str) -> None:
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    while True:
        status, body = daemon.request_json("GET", f"/swarm/message/{msg_id}")
        if status == 200 and body["state"] == "handed_off":
            return
        assert time.monotonic() < deadline, f"{msg_id} not handed off: {status} {body}"
        time.sleep(0.05)


@pytest.fixture
def world() -> Iterator[World]:
    """pigeond delivering to a fake opencode that knows the docs' sessions, its database
    and token where the docs say, its runtime socket in $XDG_RUNTIME_DIR, and the
    docs' example message already handed off (so `cur_1` and its msg_id exist)."""
    # under /tmp, short: the runtime socket's path must fit a Unix socket address
    work = Path(tempfile.mkdtemp(prefix="pgd-docs-", dir="/tmp"))
    try:
        home = work / "home"
        runtime_dir = work / "run"
        runtime_dir.mkdir(mode=0o700)
        (work / ".venv").symlink_to(VENV)
        with FakeOpencode(work) as fake:
            for session in DOCS_SESSIONS:
                fake.add_session(session)
            db = home / ".local" / "state" / "pigeond" / "pigeond.db"
            env = {"XDG_RUNTIME_DIR": str(runtime_dir)}
            with DaemonProcess(work, db, opencode_url=fake.url, env=env) as daemon:
                example = {
                    "from": "ses_me",
                    "to": "ses_TARGET",
                    "payload": "Please review PR 12",
                    "msg_id": DOCS_MSG_ID,
                }
                assert daemon.request_json("POST", "/swarm/send", example)[0] == 202
                wait_until_handed_off(daemon, DOCS_MSG_ID)
                yield World(work, home, runtime_dir, daemon)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_runnable_commands_exit_0_against_a_real_daemon(world: World) -> None:
    """The docs' pigeon, pigeon-send, pigeond and curl commands, in reading order, in one
    shell whose PATH is set by the README's `export` line: each exits 0, and curl gets JSON
    answers, never an error."""
    commands = [
        at_a_terminal(Command(c.line, c.text.replace(DOCS_URL, world.daemon.base_url), c.page))
        for c in commands_with(Verdict.RUN)
    ]
    assert commands[0].text.startswith("export PATH="), "the quick start must set PATH first"
    assert commands[0].page == "README.md", commands[0]
    outcomes = run_in_one_shell(commands, world.env(), world.work, SESSION_TIMEOUT_S)
    failed = [o.describe() for o in outcomes if o.returncode != 0]
    assert failed == [], "\n".join(failed)
    bad_answers = []
    for outcome in outcomes:
        text = as_written(outcome.command.text)
        if text.startswith("curl ") and "/metrics" in text:
            # Prometheus' text format: the grep must have found its samples
            if not outcome.stdout.startswith("pigeond_"):
                bad_answers.append(outcome.describe())
        elif text.startswith("curl "):
            try:
                answer = json.loads(outcome.stdout)
            except ValueError:
                answer = None
            if not isinstance(answer, dict) or "error" in answer:
                bad_answers.append(outcome.describe())
    assert bad_answers == [], "\n".join(bad_answers)
    assert sum(o.command.text.startswith("curl ") for o in outcomes) >= 5
    assert sum(o.command.text.startswith("pigeon-send ") for o in outcomes) >= 4


# -- SQL: the operator queries on a pigeond database -------------------------------------


def test_queued_per_target_query_lists_each_target_with_its_oldest(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The "queued per target" query shows ses_a with 2 queued since the first one came;
    the failed message's target and the channel message are not there."""
    outcome = run_sql_command(operator_db, sqlite_path, "AS queued")
    [row] = rows(outcome.stdout)
    assert row.split()[:2] == ["ses_a", "2"]
    assert utc(operator_db.hour_ago_ms) in row


def test_failed_query_lists_the_failed_message_with_its_reason(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The "failed messages" query shows the failed message, its target and last_error."""
    outcome = run_sql_command(operator_db, sqlite_path, "state = 'failed' ORDER BY")
    [row] = rows(outcome.stdout)
    assert row.split()[:3] == [operator_db.failed_id, "ses_b", "1"]
    assert operator_db.failed_error in row


def test_requeue_sql_makes_a_failed_message_queued_and_due_now(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The requeue UPDATE leaves the message queued, due now, attempts and error cleared,
    with a fresh time to live as long as its first one (as `pigeon requeue` does)."""
    before_ms = int(time.time()) * 1000
    run_sql_command(operator_db, sqlite_path, "SET state = 'queued'")
    after_ms = int(time.time() * 1000)
    with opened(operator_db.path) as repo:
        message = repo.get(operator_db.failed_id)
    assert message is not None
    assert (message.state, message.attempts, message.last_error) == ("queued", 0, None)
    assert message.next_retry_at is not None
    assert before_ms <= message.next_retry_at <= after_ms
    assert message.updated_at == message.next_retry_at
    assert message.expires_at == message.next_retry_at + DAY_MS
    assert message.verify_by is None


def test_a_message_requeued_by_the_docs_sql_is_delivered(
    operator_db: OperatorDb, tmp_path: Path
) -> None:
    """After the requeue SQL (real sqlite3), a pigeond started on the database hands the
    message to its target at once."""
    run_sql_command(operator_db, os.environ.get("PATH", os.defpath), "SET state = 'queued'")
    with FakeOpencode(tmp_path) as fake:
        fake.add_session("ses_b")
        with DaemonProcess(tmp_path, operator_db.path, opencode_url=fake.url) as daemon:
            wait_until_handed_off(daemon, operator_db.failed_id)
    assert [c.msg_id for c in fake.prompt_calls("ses_b")] == [operator_db.failed_id]


def test_in_doubt_query_lists_a_message_whose_hand_off_was_not_recorded(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The "messages in doubt" query shows a queued message with an intent, and only it."""
    with opened(operator_db.path) as repo:
        repo.mark_handoff_intents([(["msg_queued0"], operator_db.hour_ago_ms)])
    outcome = run_sql_command(operator_db, sqlite_path, "handoff_intent_at IS NOT NULL")
    [row] = rows(outcome.stdout)
    assert row.split()[:2] == ["msg_queued0", "ses_a"]
    assert utc(operator_db.hour_ago_ms) in row


def test_who_owes_whom_query_lists_outstanding_obligations(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The "who owes whom" query shows ses_a owing operator-test a reply, and only that."""
    with opened(operator_db.path) as repo:
        ask = new_message("ses_a", msg_id="msg_ask", sender="ses_boss", kind="task.assign")
        repo.accept_many([Accept(ask, operator_db.hour_ago_ms, reply_within_ms=60_000)])
        repo.mark_handed_off_many(["msg_ask"], operator_db.hour_ago_ms)
    outcome = run_sql_command(operator_db, sqlite_path, "FROM swarm_obligations o")
    [row] = rows(outcome.stdout)
    assert row.split()[:5] == ["ses_a", "msg_ask", "ses_boss", "open", "task.assign"]
    assert utc(operator_db.hour_ago_ms) in row


def test_send_again_sql_clears_the_intent_of_a_message_in_doubt(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The "send it again without looking" UPDATE leaves the message queued, not in doubt."""
    with opened(operator_db.path) as repo:
        repo.requeue(operator_db.failed_id, operator_db.hour_ago_ms)
        repo.mark_handoff_intents([([operator_db.failed_id], operator_db.hour_ago_ms)])
    run_sql_command(operator_db, sqlite_path, "SET handoff_intent_at = NULL")
    with opened(operator_db.path) as repo:
        message = repo.get(operator_db.failed_id)
    assert message is not None
    assert (message.state, message.handoff_intent_at) == ("queued", None)


# -- DROP_IN: the checkout's user unit ---------------------------------------------------


def test_checkout_drop_in_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """The docs' drop-in, written from the checkout, points ExecStart= and both
    ExecReload= at the checkout's pigeond, and `systemd-analyze --user verify` accepts
    the user unit with it (a /usr/bin/pigeond left in ExecReload= would fail it)."""
    home = tmp_path / "home"
    env = isolated_env(home)
    outcomes = run_in_one_shell(commands_with(Verdict.DROP_IN), env, REPO, SESSION_TIMEOUT_S)
    assert [o.returncode for o in outcomes] == [0, 0], "\n".join(o.describe() for o in outcomes)
    [written] = (home / ".config/systemd/user/pigeond.service.d").glob("*.conf")
    lines = written.read_text().splitlines()
    pigeond = f"{REPO}/.venv/bin/pigeond"
    assert [ln for ln in lines if ln.startswith("Exec")] == [
        "ExecStart=",
        f"ExecStart={pigeond}",
        "ExecReload=",
        f"ExecReload={pigeond} --check-config",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ]
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is missing: install Debian's systemd package")
    unit_dir = tmp_path / "units"
    (unit_dir / "pigeond.service.d").mkdir(parents=True)
    shutil.copyfile(USER_UNIT, unit_dir / "pigeond.service")
    shutil.copyfile(written, unit_dir / "pigeond.service.d" / written.name)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    result = subprocess.run(
        [analyze, "--user", "verify", "--man=no", str(unit_dir / "pigeond.service")],
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_LOG_COLOR": "0"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert [ln for ln in output.splitlines() if "pigeond" in ln] == []


def test_consent_query_lists_each_policy_with_its_held_count(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The "each session's consent" query shows ses_TARGET holding, with one held message."""
    with opened(operator_db.path) as repo:
        at = operator_db.hour_ago_ms
        repo.set_policy("ses_TARGET", Policy.HOLD, ("ses_lead",), at, "operator")
        held = held_reason("ses_TARGET", Policy.HOLD)
        message = new_message("ses_TARGET", msg_id="msg_held", sender="ses_a")
        repo.accept_many([Accept(message, operator_db.hour_ago_ms, held=held)])
    outcome = run_sql_command(operator_db, sqlite_path, "FROM swarm_policies p")
    [row] = rows(outcome.stdout)
    assert row.split()[:4] == ["ses_TARGET", "hold", '["ses_lead"]', "1"]
    assert utc(operator_db.hour_ago_ms) in row and row.split()[-1] == "operator"


def test_release_sql_makes_the_held_messages_due_and_keeps_the_policy(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The release UPDATE leaves the held message queued and due now; ses_TARGET still holds."""
    with opened(operator_db.path) as repo:
        repo.set_policy("ses_TARGET", Policy.HOLD, (), operator_db.hour_ago_ms, "operator")
        held = held_reason("ses_TARGET", Policy.HOLD)
        message = new_message("ses_TARGET", msg_id="msg_held", sender="ses_a")
        repo.accept_many([Accept(message, operator_db.hour_ago_ms, held=held)])
    run_sql_command(operator_db, sqlite_path, "AND hold_kind = 'consent';")
    with opened(operator_db.path) as repo:
        now_ms = int(time.time() * 1000)
        assert [m.msg_id for m in repo.ready_batch("ses_TARGET", now_ms, 10)] == ["msg_held"]
        assert repo.policy_of("ses_TARGET").policy is Policy.HOLD


def test_release_sql_leaves_what_a_brake_holds_held(
    operator_db: OperatorDb, sqlite_path: str
) -> None:
    """The consent release UPDATE never releases a message a conversation brake holds."""
    with opened(operator_db.path) as repo:
        repo.set_policy("ses_TARGET", Policy.HOLD, (), operator_db.hour_ago_ms, "operator")
        message = new_message("ses_TARGET", msg_id="msg_braked", sender="ses_a")
        hold = Hold("hops", "thread thr_x reached 12 hops without a person")
        repo.accept_many([Accept(message, operator_db.hour_ago_ms, None, brake_hold=hold)])
    run_sql_command(operator_db, sqlite_path, "AND hold_kind = 'consent';")
    with opened(operator_db.path) as repo:
        assert repo.ready_batch("ses_TARGET", int(time.time() * 1000), 10) == []
        assert [h.msg_id for h in repo.held_messages()] == ["msg_braked"]


def test_brake_held_sql_lists_what_a_brake_holds(operator_db: OperatorDb, sqlite_path: str) -> None:
    """The brake-held query lists the message a brake holds, with its brake, not a consent hold."""
    with opened(operator_db.path) as repo:
        repo.set_policy("ses_TARGET", Policy.HOLD, (), operator_db.hour_ago_ms, "operator")
        consent = new_message("ses_TARGET", msg_id="msg_consent", sender="ses_a")
        repo.accept_many(
            [Accept(consent, operator_db.hour_ago_ms, held=held_reason("ses_TARGET", Policy.HOLD))]
        )
        braked = new_message("ses_TARGET", msg_id="msg_braked", sender="ses_a")
        hold = Hold("repeat", "same again")
        repo.accept_many([Accept(braked, operator_db.hour_ago_ms, None, brake_hold=hold)])
    outcome = run_sql_command(operator_db, sqlite_path, "hold_kind = 'brake'")
    [row] = rows(outcome.stdout)
    assert row.split()[:2] == ["msg_braked", "ses_a"] and "repeat" in row.split()


def test_search_query_finds_messages_by_word(operator_db: OperatorDb, sqlite_path: str) -> None:
    """The full-text query finds the message that says "deploy", newest first, and no other."""
    with opened(operator_db.path) as repo:
        said = new_message("ses_a", msg_id="msg_deploy", sender="ses_boss", payload="Deploy now")
        repo.accept(said, operator_db.hour_ago_ms)
    outcome = run_sql_command(operator_db, sqlite_path, "swarm_search MATCH")
    [row] = rows(outcome.stdout)
    assert row.split()[:5] == ["msg_deploy", "queued", "ses_boss", "ses_a", "Deploy"]
