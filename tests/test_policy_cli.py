"""``pigeon policy``: list, show, set and release each session's consent, from the
database, escaped like every field."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from pigeond.cli.pigeon import main
from pigeond.cli.pigeon_args import build_parser
from pigeond.consent import POLICIES, Policy, held_reason
from pigeond.storage import SwarmRepository, open_database
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import NOW_MS

B = "ses_b"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """ses_b holds one message from ses_a."""
    path = tmp_path / "pigeond.db"
    repo = SwarmRepository(open_database(path))
    repo.set_policy(B, Policy.HOLD, (), NOW_MS, B)
    held = held_reason(B, Policy.HOLD)
    repo.accept_many([Accept(new_message(B, msg_id="msg_held", sender="ses_a"), NOW_MS, held=held)])
    repo.close()
    return path


def run(capsys: pytest.CaptureFixture[str], db: Path, *argv: str) -> tuple[int, str, str]:
    code = main([*argv[:2], "--db", str(db), *argv[2:]], env={}, now_ms=NOW_MS + 60_000)
    out, err = capsys.readouterr()
    return code, out, err


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of ``name`` among ``parser``'s subcommands."""
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: argparse.ArgumentParser = sub.choices[name]
    return found


def reopen(db: Path) -> SwarmRepository:
    return SwarmRepository(open_database(db))


def test_the_choices_are_the_declared_policies() -> None:
    """``pigeon policy set`` offers exactly pigeond.consent.POLICIES."""
    set_parser = subcommand(subcommand(build_parser(), "policy"), "set")
    [choice] = [a for a in set_parser._actions if a.dest == "policy"]
    assert tuple(choice.choices or ()) == POLICIES


def test_ls_lists_every_policy_with_its_held_count(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """The table shows the session, its policy and how many messages it holds."""
    code, out, _ = run(capsys, db, "policy", "ls")
    header, row = out.splitlines()
    assert code == 0 and header.split()[:3] == ["session", "policy", "held"]
    assert row.split()[:3] == [B, "hold", "1"]


def test_set_writes_the_policy_and_applies_it(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """``set ... accept`` releases the held message and says so."""
    code, out, _ = run(capsys, db, "policy", "set", B, "accept")
    assert (code, out) == (0, f"{B} accept: 0 held, 1 released\n")
    repo = reopen(db)
    assert [m.msg_id for m in repo.ready_batch(B, NOW_MS + 60_000, 10)] == ["msg_held"]
    repo.close()


def test_set_records_the_operator_and_the_allow_list(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """``--allow`` replaces the list; the row says the operator set it; a held message
    whose sender was never verified stays held (an allow-list admits verified senders)."""
    run(capsys, db, "policy", "set", B, "refuse", "--allow", "ses_a")
    code, out, _ = run(capsys, db, "policy", "show", B, "--json")
    shown = json.loads(out)
    assert code == 0
    assert (shown["policy"], shown["allow"], shown["updated_by"]) == (
        "refuse",
        ["ses_a"],
        "operator",
    )
    assert shown["held"] == 1  # ses_a's held message is unverified: the list does not admit it


def test_release_releases_and_keeps_the_policy(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """``release`` makes the held messages due; the session still holds."""
    code, out, _ = run(capsys, db, "policy", "release", B)
    assert (code, out) == (0, f"{B}: 1 released\n")
    repo = reopen(db)
    assert repo.policy_of(B).policy is Policy.HOLD
    repo.close()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (("policy", "set", "nobody", "hold"), "SESSION must match"),
        (("policy", "set", B, "hold", "--allow", "bad name"), "each allow entry must match"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], db: Path, argv: tuple[str, ...], error: str
) -> None:
    """A bad session or allow entry is a one-line error, exit 2, nothing written."""
    code, _, err = run(capsys, db, *argv)
    assert code == 2 and err.startswith("pigeon: ") and error in err and err.count("\n") == 1


def test_an_unknown_policy_is_a_usage_error(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """argparse refuses a policy outside the choices, exit 2."""
    code, _, err = run(capsys, db, "policy", "set", B, "maybe")
    assert code == 2 and "invalid choice" in err


def test_fields_are_escaped(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """A hostile updated_by written by hand shows escaped, never raw."""
    repo = reopen(db)
    repo.connection.execute("UPDATE swarm_policies SET updated_by = ?", ("x\x1b[2J",))
    repo.close()
    _, out, _ = run(capsys, db, "policy", "ls")
    assert "\x1b" not in out and "\\x1b[2J" in out


def test_set_steer_allows_steering_and_keeps_it(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """``--steer`` allows steering; a later ``set`` without it keeps it; ``show --json``
    and the table say so."""
    code, out, _ = run(capsys, db, "policy", "set", B, "hold", "--steer")
    assert (code, out) == (0, f"{B} hold, steering allowed: 0 held, 0 released\n")
    run(capsys, db, "policy", "set", B, "accept")
    _, shown, _ = run(capsys, db, "policy", "show", B, "--json")
    assert json.loads(shown)["steer"] is True
    _, table, _ = run(capsys, db, "policy", "ls")
    header, row = table.splitlines()
    assert row.split()[header.split().index("steer")] == "on"
    run(capsys, db, "policy", "set", B, "accept", "--no-steer")
    assert not reopen(db).policy_of(B).steer
