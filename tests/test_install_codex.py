"""``pigeon install-codex``: pigeon-mcp registered in Codex's config.toml, merged into a
person's own config (keys, tables and comments kept) and taken out again."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pigeond.cli import install_codex
from pigeond.cli.pigeon import main

MINE = """\
# my codex config
model = "o3"  # the model I like
approval_policy = "on-request"

[profiles.fast]
model = "gpt-5-mini"   # quick

# another server of mine
[mcp_servers.other]
command = "other-mcp"
args = ["--verbose"]
"""


def run(codex_home: Path, *args: str) -> int:
    return main(["install-codex", *args], {"CODEX_HOME": str(codex_home), "HOME": "/nonexistent"})


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "config.toml").write_text(MINE, encoding="utf-8")
    return tmp_path


def config(home: Path) -> str:
    return (home / "config.toml").read_text(encoding="utf-8")


def test_install_adds_the_server_and_keeps_everything_else(home: Path) -> None:
    """The person's text is kept byte for byte; the pigeon table follows it."""
    assert run(home, "--as", "@reviewer") == 0
    text = config(home)
    assert text.startswith(MINE)
    server = tomllib.loads(text)["mcp_servers"]["pigeon"]
    assert server == {
        "command": install_codex.pigeon_mcp_path(),
        "args": ["--as", "@reviewer"],
        "env_vars": list(install_codex.PASSED_THROUGH),
        "required": True,
        "default_tools_approval_mode": "approve",
    }
    assert Path(server["command"]).is_absolute()
    assert tomllib.loads(text)["mcp_servers"]["other"]["args"] == ["--verbose"]


def test_install_again_changes_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second install with the same name leaves the file as the first wrote it."""
    run(home, "--as", "reviewer")
    first = config(home)
    capsys.readouterr()
    assert run(home, "--as", "reviewer") == 0
    assert config(home) == first
    assert capsys.readouterr().out.startswith("already up to date: [mcp_servers.pigeon]")


def test_install_with_another_name_replaces_the_table(home: Path) -> None:
    """Re-installing as another member rewrites the pigeon table only."""
    run(home, "--as", "reviewer")
    run(home, "--as", "builder-2")
    parsed = tomllib.loads(config(home))
    assert parsed["mcp_servers"]["pigeon"]["args"] == ["--as", "@builder-2"]
    assert config(home).startswith(MINE)


def test_uninstall_gives_back_the_file_as_it_was(home: Path) -> None:
    """install then --uninstall: the person's config, byte for byte."""
    run(home, "--as", "reviewer")
    assert run(home, "--uninstall") == 0
    assert config(home) == MINE


def test_install_into_no_file_makes_one_and_uninstall_empties_it(tmp_path: Path) -> None:
    """Without a config.toml (nor its folder), install makes it; uninstall takes the table out."""
    codex_home = tmp_path / "codex"
    assert run(codex_home) == 0
    assert tomllib.loads(config(codex_home))["mcp_servers"]["pigeon"]["args"] == []
    assert run(codex_home, "--uninstall") == 0
    assert config(codex_home) == ""


def test_malformed_toml_is_one_line_and_the_file_is_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config Codex could not read either: exit 2, one line, nothing written."""
    broken = 'model = "x"\n[profiles\n'
    (tmp_path / "config.toml").write_text(broken, encoding="utf-8")
    assert run(tmp_path, "--as", "reviewer") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"pigeon: {tmp_path / 'config.toml'} is not valid TOML (")
    assert line.endswith("); nothing was changed")
    assert config(tmp_path) == broken


@pytest.mark.parametrize("bad", ["Reviewer", "@", "a b", "x" * 65])
def test_a_bad_name_is_a_usage_error(home: Path, bad: str) -> None:
    """--as takes a pigeond name; anything else writes nothing."""
    assert run(home, "--as", bad) == 2
    assert config(home) == MINE
