"""``pigeon install-claude``: pigeond's parts merged into Claude Code's settings, and out again."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pigeond.cli import install_claude
from pigeond.cli.install_claude import Programs
from pigeond.cli.install_plugin import SKILL_NAME, bundled_skill

PIGEON = Path(sys.executable).parent / "pigeon"

# A person's own settings: hooks (on our events too), servers, keys we never touch.
THEIR_SETTINGS: dict[str, Any] = {
    "model": "opus",
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [{"type": "command", "command": "/bin/audit", "timeout": 5}],
            }
        ],
        "SessionStart": [
            {"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}
        ],
    },
    "permissions": {"allow": ["Bash(ls:*)"]},
    "enabledMcpjsonServers": ["theirs"],
    "env": {"FOO": "bar"},
}
THEIR_SERVERS: dict[str, Any] = {
    "mcpServers": {"theirs": {"command": "/usr/bin/their-server", "args": ["--x"]}},
    "numStartups": 3,
}


def programs(tmp_path: Path, folder: str = "bin") -> Programs:
    bin_dir = tmp_path / folder
    bin_dir.mkdir(exist_ok=True)
    return Programs(str(bin_dir / "pigeon-hook"), str(bin_dir / "pigeon-mcp"))


def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".claude").mkdir(parents=True)
    return root


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=4) + "\n", encoding="utf-8")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def install(root: Path, progs: Programs, uninstall: bool = False) -> int:
    return install_claude.run(str(root), uninstall, {}, progs)


def theirs_of_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings without our parts (our hook groups and the events only they hook,
    "pigeon" in the enabled list)."""
    out = json.loads(json.dumps(settings))
    for event, groups in list(out.get("hooks", {}).items()):
        kept = [g for g in groups if "pigeon-hook" not in json.dumps(g)]
        if kept:
            out["hooks"][event] = kept
        else:
            del out["hooks"][event]
    out["enabledMcpjsonServers"] = [s for s in out["enabledMcpjsonServers"] if s != "pigeon"]
    return dict(out)


def test_a_persons_settings_survive_install_reinstall_and_uninstall(tmp_path: Path) -> None:
    """Their hooks, servers and keys are unchanged (same JSON, same order) through install,
    re-install and uninstall; uninstall gives back exactly what was there."""
    root, progs = project(tmp_path), programs(tmp_path)
    settings, servers = root / ".claude" / "settings.local.json", root / ".mcp.json"
    write_json(settings, THEIR_SETTINGS)
    write_json(servers, THEIR_SERVERS)
    assert install(root, progs) == 0
    installed = read_json(settings)
    assert json.dumps(theirs_of_settings(installed)) == json.dumps(THEIR_SETTINGS)
    their_servers = read_json(servers)
    del their_servers["mcpServers"]["pigeon"]
    assert json.dumps(their_servers) == json.dumps(THEIR_SERVERS)
    before = {p: p.read_bytes() for p in (settings, servers)}
    assert install(root, progs) == 0
    assert {p: p.read_bytes() for p in before} == before
    assert install(root, progs, uninstall=True) == 0
    assert json.dumps(read_json(settings)) == json.dumps(THEIR_SETTINGS)
    assert json.dumps(read_json(servers)) == json.dumps(THEIR_SERVERS)


def test_install_writes_the_server_hooks_and_skill(tmp_path: Path) -> None:
    """The pigeon server, one hook per event by absolute path, the approval, the skill."""
    root, progs = project(tmp_path), programs(tmp_path)
    assert install(root, progs) == 0
    assert read_json(root / ".mcp.json") == {
        "mcpServers": {"pigeon": {"type": "stdio", "command": progs.mcp, "args": []}}
    }
    settings = read_json(root / ".claude" / "settings.local.json")
    commands = {
        event: [h["command"] for g in groups for h in g["hooks"]]
        for event, groups in settings["hooks"].items()
    }
    assert commands == {
        "SessionStart": [f"{progs.hook} session-start"],
        "UserPromptSubmit": [f"{progs.hook} prompt-submit"],
        "Stop": [f"{progs.hook} stop"],
    }
    assert settings["enabledMcpjsonServers"] == ["pigeon"]
    skill = root / ".claude" / "skills" / SKILL_NAME / "SKILL.md"
    assert skill.read_bytes() == bundled_skill()


def test_ours_come_after_theirs(tmp_path: Path) -> None:
    """On an event the person hooks too, their groups stay first, ours is appended."""
    root = project(tmp_path)
    write_json(root / ".claude" / "settings.local.json", THEIR_SETTINGS)
    progs = programs(tmp_path)
    install(root, progs)
    stop = read_json(root / ".claude" / "settings.local.json")["hooks"]["Stop"]
    assert stop[0] == THEIR_SETTINGS["hooks"]["Stop"][0]
    assert stop[1] == {"hooks": [{"type": "command", "command": f"{progs.hook} stop"}]}


def test_a_moved_install_is_updated_in_place(tmp_path: Path) -> None:
    """Installing from another folder replaces our entries where they are: none twice."""
    root = project(tmp_path)
    install(root, programs(tmp_path, "old"))
    new = programs(tmp_path, "new")
    install(root, new)
    settings = read_json(root / ".claude" / "settings.local.json")
    assert [g["hooks"][0]["command"] for g in settings["hooks"]["Stop"]] == [f"{new.hook} stop"]
    assert read_json(root / ".mcp.json")["mcpServers"]["pigeon"]["command"] == new.mcp


def test_a_path_with_spaces_is_quoted(tmp_path: Path) -> None:
    """A hook command with spaces in its path is quoted for the shell, and still ours."""
    root, progs = project(tmp_path), programs(tmp_path, "my bin")
    install(root, progs)
    stop = read_json(root / ".claude" / "settings.local.json")["hooks"]["Stop"]
    assert stop[0]["hooks"][0]["command"] == f"'{progs.hook}' stop"
    install(root, progs, uninstall=True)
    assert not (root / ".claude" / "settings.local.json").exists()


def test_uninstall_of_a_fresh_install_leaves_no_file(tmp_path: Path) -> None:
    """Files the install created hold only ours: uninstall removes them and the skill."""
    root, progs = project(tmp_path), programs(tmp_path)
    install(root, progs)
    install(root, progs, uninstall=True)
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert left == [".claude", ".claude/skills"]


@pytest.mark.parametrize(
    "text",
    ["{not json", "[]", '{"hooks": []}', '{"hooks": {"Stop": {}}}', '{"a": 1, "a": 2}',
     '{"enabledMcpjsonServers": "pigeon"}'],
    ids=["malformed", "not-an-object", "hooks-list", "event-object", "duplicate-key", "enabled"],
)  # fmt: skip
def test_a_malformed_settings_file_changes_nothing(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line naming the file, exit 1, and no file written or changed."""
    root = project(tmp_path)
    settings = root / ".claude" / "settings.local.json"
    settings.write_text(text, encoding="utf-8")
    assert install(root, programs(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(settings) in err and "nothing was changed" in err
    assert settings.read_text(encoding="utf-8") == text
    assert sorted(p.name for p in root.rglob("*")) == [".claude", "settings.local.json"]


def test_a_persons_own_server_named_pigeon_is_not_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An MCP server "pigeon" that does not run pigeon-mcp is refused, untouched."""
    root = project(tmp_path)
    servers = {"mcpServers": {"pigeon": {"command": "/opt/other/pigeon-server"}}}
    write_json(root / ".mcp.json", servers)
    assert install(root, programs(tmp_path)) == 1
    assert "does not run pigeon-mcp" in capsys.readouterr().err
    assert read_json(root / ".mcp.json") == servers


def test_new_files_modes(tmp_path: Path) -> None:
    """The project's .mcp.json is 0644 (shared); the person's settings 0600."""
    root = project(tmp_path)
    install(root, programs(tmp_path))
    names = (".mcp.json", ".claude/settings.local.json")
    modes = {name: stat.S_IMODE((root / name).stat().st_mode) for name in names}
    assert modes == {".mcp.json": 0o644, ".claude/settings.local.json": 0o600}


def test_an_existing_files_mode_is_kept(tmp_path: Path) -> None:
    """A settings file that exists keeps its mode."""
    root = project(tmp_path)
    settings = root / ".claude" / "settings.local.json"
    write_json(settings, {})
    settings.chmod(0o640)
    install(root, programs(tmp_path))
    assert stat.S_IMODE(settings.stat().st_mode) == 0o640


def test_a_symlinked_settings_file_stays_a_link(tmp_path: Path) -> None:
    """A settings file that links to a dotfiles repository is written through the link."""
    root = project(tmp_path)
    real = tmp_path / "dotfiles" / "claude-settings.json"
    write_json(real, THEIR_SETTINGS)
    (root / ".claude" / "settings.local.json").symlink_to(real)
    install(root, programs(tmp_path))
    assert (root / ".claude" / "settings.local.json").is_symlink()
    assert "pigeon-hook" in real.read_text(encoding="utf-8")


def test_user_scope_files(tmp_path: Path) -> None:
    """--user: ~/.claude.json gets the server (its other keys kept), ~/.claude/settings.json
    the hooks (no enabledMcpjsonServers), ~/.claude/skills the skill."""
    home = tmp_path / "home"
    write_json(home / ".claude.json", THEIR_SERVERS)
    (home / ".claude.json").chmod(0o600)
    progs = programs(tmp_path)
    assert install_claude.run(None, False, {"HOME": str(home)}, progs) == 0
    state = read_json(home / ".claude.json")
    assert state["numStartups"] == 3 and state["mcpServers"]["pigeon"]["command"] == progs.mcp
    settings = read_json(home / ".claude" / "settings.json")
    assert set(settings) == {"hooks"}
    assert (home / ".claude" / "skills" / SKILL_NAME / "SKILL.md").is_file()
    assert stat.S_IMODE((home / ".claude" / "settings.json").stat().st_mode) == 0o600
    assert install_claude.run(None, True, {"HOME": str(home)}, progs) == 0
    assert json.dumps(read_json(home / ".claude.json")) == json.dumps(THEIR_SERVERS)


def test_claude_config_dir_moves_the_user_scope(tmp_path: Path) -> None:
    """$CLAUDE_CONFIG_DIR holds .claude.json, settings.json and skills/, as in Claude Code."""
    config = tmp_path / "cfg"
    env = {"HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(config)}
    assert install_claude.run(None, False, env, programs(tmp_path)) == 0
    names = sorted(str(p.relative_to(config)) for p in config.rglob("*") if p.is_file())
    assert names == [".claude.json", "settings.json", f"skills/{SKILL_NAME}/SKILL.md"]


def run_pigeon(*args: str, path: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "HOME": "/nonexistent"}
    return subprocess.run(
        [str(PIGEON), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.mark.slow
def test_the_cli_names_the_scripts_by_absolute_path(tmp_path: Path) -> None:
    """pigeon install-claude finds pigeon-hook beside itself and pigeon-mcp there or on
    PATH, and writes their absolute paths."""
    root = project(tmp_path)
    extra = tmp_path / "extra"
    extra.mkdir()
    mcp = extra / "pigeon-mcp"
    mcp.write_text("#!/bin/sh\n", encoding="utf-8")
    mcp.chmod(0o755)
    beside = PIGEON.parent / "pigeon-mcp"
    expected_mcp = str(beside) if beside.exists() else str(mcp)
    done = run_pigeon("install-claude", "--project", str(root), path=f"{extra}:/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    assert read_json(root / ".mcp.json")["mcpServers"]["pigeon"]["command"] == expected_mcp
    stop = read_json(root / ".claude" / "settings.local.json")["hooks"]["Stop"]
    assert stop[0]["hooks"][0]["command"] == f"{PIGEON.parent / 'pigeon-hook'} stop"


@pytest.mark.slow
def test_the_cli_refuses_a_missing_project(tmp_path: Path) -> None:
    """--project naming no directory is a usage error (exit 2), one line."""
    done = run_pigeon("install-claude", "--project", str(tmp_path / "nope"), path="/usr/bin")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no such directory" in done.stderr
