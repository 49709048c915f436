"""The shell commands of the user docs, as tests/test_docs_snippets.py tries them: every
```sh block of the README and the manual (in reading order) split into commands, each with
exactly one verdict in :data:`RULES`, and a way to run commands in one bash session as an
operator types them."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pytest

from tests.docs_pages import display, user_docs

SHELL_LANGS = ("sh", "bash", "shell", "console")
SESSION_TIMEOUT_S = 90.0


class Verdict(Enum):
    RUN = "run against a real pigeond"
    SQL = "run with sqlite3 on a pigeond database"
    DROP_IN = "written into a temporary home and verified"
    SYNTAX_ONLY = "syntax-checked only"


@dataclass(frozen=True)
class Rule:
    pattern: str  # matched at the start of the command
    verdict: Verdict
    reason: str = ""


RULES: tuple[Rule, ...] = (
    Rule(
        r"make (run|test|lint|unit|bench)\b",
        Verdict.SYNTAX_ONLY,
        "serves in the foreground until stopped, or runs the test suite this test is part of",
    ),
    Rule(r"make venv\b", Verdict.SYNTAX_ONLY, "makes the virtualenv this test runs from"),
    Rule(
        r"make docs\b",
        Verdict.SYNTAX_ONLY,
        "writes into the checkout; test_docs.py makes the same pages in memory and runs the"
        " same mkdocs build --strict into a temporary folder",
    ),
    Rule(
        r"make deb\b",
        Verdict.SYNTAX_ONLY,
        "builds the .deb, as test_packaging.py::test_deb_builds_installs_runs_and_purges does",
    ),
    Rule(
        r"sudo pigeond ",
        Verdict.SYNTAX_ONLY,
        "needs the installed /etc/pigeond/pigeond.toml; test_pigeond_cli.py::"
        "test_check_config_of_the_system_file_shows_the_service_database runs it over an"
        " overlaid /etc",
    ),
    Rule(
        r"sudo (?!pigeond )",
        Verdict.SYNTAX_ONLY,
        "changes the machine as root (package, units, users, /etc) and most need systemd as"
        " PID 1; tried by hand under a real systemd (../shared/systemd-ns)",
    ),
    Rule(r"sudoedit ", Verdict.SYNTAX_ONLY, "opens an editor on the installed package's file"),
    Rule(r"echo .*\| sudo tee ", Verdict.SYNTAX_ONLY, "writes a secret into root's /etc/pigeond"),
    Rule(
        r"(systemctl|journalctl|loginctl) ",
        Verdict.SYNTAX_ONLY,
        "needs systemd as PID 1 or a user manager, which the test machine does not run",
    ),
    Rule(
        r"(claude|codex) ",
        Verdict.SYNTAX_ONLY,
        "starts Claude Code or Codex, which need a model provider; the tests run the pinned"
        " releases offline against fake models (tests/e2e/test_claude_code_e2e.py,"
        " tests/e2e/test_codex_e2e.py)",
    ),
    Rule(r"export PATH=", Verdict.RUN),
    Rule(r"(pigeond|pigeon|pigeon-send|curl) ", Verdict.RUN),
    Rule(r"TOKEN=", Verdict.RUN),
    Rule(r"DB=", Verdict.SQL),
    Rule(r"sqlite3 ", Verdict.SQL),
    Rule(r"(mkdir -p|cat >) ~/\.config/systemd/user/", Verdict.DROP_IN),
)


# -- reading the docs --------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    line: int  # line of the block's first line of code, in its page
    lang: str
    text: str
    page: str = ""  # the page, relative to the checkout (README.md, docs/agents.md)


@dataclass(frozen=True)
class Command:
    line: int  # line where the command starts, in its page
    text: str
    page: str = ""

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text.splitlines()[0]}"


def code_blocks(text: str, page: str = "") -> list[Block]:
    """Every fenced block (indented ones too, their indent removed), with its language."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = re.fullmatch(r"( *)```(\w*)\s*", lines[i])
        if opening is None:
            i += 1
            continue
        indent, lang = len(opening.group(1)), opening.group(2)
        first_code_line = i + 2  # 1-based number of the line after the fence
        body: list[str] = []
        i += 1
        while lines[i].strip() != "```":
            body.append(lines[i][indent:])
            i += 1
        blocks.append(Block(first_code_line, lang, "\n".join(body) + "\n", page))
        i += 1
    return blocks


def shell_blocks() -> list[Block]:
    """Every shell block of the user docs, in reading order."""
    blocks = [b for p in user_docs() for b in code_blocks(p.read_text("utf-8"), display(p))]
    return [b for b in blocks if b.lang in SHELL_LANGS]


def _scan(line: str, quote: str) -> tuple[str, str, str | None]:
    """Follow one line's quoting: (quote still open, code without the comment, the
    delimiter of a here-document it opens, if any)."""
    i = 0
    code_end = len(line)
    heredoc = None
    while i < len(line):
        ch = line[i]
        if quote == "'":
            quote = "" if ch == "'" else quote
        elif quote == '"':
            if ch == "\\":
                i += 1
            elif ch == '"':
                quote = ""
        elif ch == "#" and (i == 0 or line[i - 1] in " \t;|&("):
            code_end = i
            break
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            i += 1
        elif line.startswith("<<", i) and not line.startswith("<<<", i):
            match = re.match(r"<<-?\s*(['\"]?)(\w+)\1", line[i:])
            if match is not None:
                heredoc = match.group(2)
        i += 1
    return quote, line[:code_end], heredoc


def split_commands(block: Block) -> list[Command]:
    """The block's commands: a line continued with ``\\``, an open quote or a
    here-document belongs to the command it continues; blank and comment lines part them."""
    commands: list[Command] = []
    current: list[str] = []
    start = 0
    quote = ""
    heredoc: str | None = None
    in_heredoc = False
    for offset, line in enumerate(block.text.splitlines()):
        if in_heredoc:
            current.append(line)
            if line.strip() == heredoc:
                in_heredoc = False
                commands.append(Command(start, "\n".join(current), block.page))
                current = []
            continue
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not current:
            start = block.line + offset
        current.append(line)
        quote, code, opened = _scan(line, quote)
        heredoc = opened or heredoc
        if quote or code.rstrip().endswith("\\"):
            continue
        if opened is not None:
            in_heredoc = True
            continue
        commands.append(Command(start, "\n".join(current), block.page))
        current = []
    assert not current, f"{block.page}:{start}: unterminated command {current!r}"
    return commands


def docs_commands() -> list[Command]:
    return [c for b in shell_blocks() for c in split_commands(b)]


def matching_rules(command: Command) -> list[Rule]:
    return [r for r in RULES if re.match(r.pattern, command.text)]


def commands_with(verdict: Verdict) -> list[Command]:
    return [c for c in docs_commands() if [r.verdict for r in matching_rules(c)] == [verdict]]


# -- running commands in one shell ------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    command: Command
    returncode: int | None  # None: the session was cut before it ran, or ended
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"{self.command}\n  exit {self.returncode}\n  stdout: {self.stdout!r}\n  " + (
            f"stderr: {self.stderr!r}"
        )


def run_in_one_shell(
    commands: Sequence[Command], env: Mapping[str, str], cwd: Path, timeout_s: float
) -> list[Outcome]:
    """Run the commands one after the other in a single bash, as an operator types them;
    each one's exit status and output are kept apart. The whole session is bounded."""
    out = Path(tempfile.mkdtemp(prefix="docs-out-"))  # never in cwd: it may be the checkout
    script = []
    for i, command in enumerate(commands):
        script.append("{ " + command.text)
        script.append(f'}} >"{out}/{i}.out" 2>"{out}/{i}.err" </dev/null; echo $? >"{out}/{i}.rc"')
    proc = subprocess.Popen(
        ["bash", "-c", "\n".join(script)],
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a command that hangs is killed with its children
    )
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the docs' commands did not finish within {timeout_s:g} s")
    assert stderr == "", f"bash itself complained: {stderr}"
    outcomes = []
    for i, command in enumerate(commands):
        rc = out / f"{i}.rc"
        outcomes.append(
            Outcome(
                command,
                int(rc.read_text()) if rc.exists() else None,
                (out / f"{i}.out").read_text() if rc.exists() else "",
                (out / f"{i}.err").read_text() if rc.exists() else "",
            )
        )
    shutil.rmtree(out)
    return outcomes
