"""``pigeon install-plugin``: the opencode plugin lands where opencode loads it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pigeond.cli.install_plugin import PLUGIN_FILE, bundled_plugin, bundled_skill
from pigeond.cli.pigeon import main
from pigeond.credentials import DEFAULT_URL, SYSTEM_SOCKET, address_order

SOURCE = Path(__file__).resolve().parent.parent / "packaging" / "opencode-plugin" / PLUGIN_FILE


def test_bundled_plugin_is_the_packaging_source() -> None:
    """The package ships packaging/opencode-plugin/pigeond-swarm.js byte for byte."""
    assert bundled_plugin() == SOURCE.read_bytes()


def test_global_install_goes_to_the_xdg_config_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--global writes $XDG_CONFIG_HOME/opencode/plugin/pigeond-swarm.js, mode 644."""
    code = main(["install-plugin", "--global"], {"XDG_CONFIG_HOME": str(tmp_path)})
    target = tmp_path / "opencode" / "plugin" / PLUGIN_FILE
    assert code == 0
    assert target.read_bytes() == SOURCE.read_bytes()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert capsys.readouterr().out.startswith(f"installed: {target}\n")


def test_global_is_the_default(tmp_path: Path) -> None:
    """With neither flag the plugin goes to the global folder."""
    assert main(["install-plugin"], {"XDG_CONFIG_HOME": str(tmp_path)}) == 0
    assert (tmp_path / "opencode" / "plugin" / PLUGIN_FILE).is_file()


def test_global_falls_back_to_home_config(tmp_path: Path) -> None:
    """No (or a relative) XDG_CONFIG_HOME: ~/.config/opencode/plugin."""
    assert main(["install-plugin"], {"HOME": str(tmp_path), "XDG_CONFIG_HOME": "rel"}) == 0
    assert (tmp_path / ".config" / "opencode" / "plugin" / PLUGIN_FILE).is_file()


def test_no_home_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a usable HOME or XDG_CONFIG_HOME it says so in one line, exit 2."""
    assert main(["install-plugin"], {}) == 2
    err = capsys.readouterr().err
    assert err == "pigeon: neither $XDG_CONFIG_HOME nor $HOME is an absolute path\n"


def test_project_install(tmp_path: Path) -> None:
    """--project DIR writes DIR/.opencode/plugin/pigeond-swarm.js."""
    assert main(["install-plugin", "--project", str(tmp_path)], {}) == 0
    assert (tmp_path / ".opencode" / "plugin" / PLUGIN_FILE).read_bytes() == SOURCE.read_bytes()


def test_missing_project_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A project folder that does not exist is named, exit 2, nothing written."""
    missing = tmp_path / "nope"
    assert main(["install-plugin", "--project", str(missing)], {}) == 2
    assert capsys.readouterr().err == f"pigeon: --project {missing}: no such directory\n"
    assert not missing.exists()


def test_global_and_project_together_is_a_usage_error(tmp_path: Path) -> None:
    """The two destinations exclude each other."""
    assert main(["install-plugin", "--global", "--project", str(tmp_path)], {}) == 2


def test_second_install_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Installing the same plugin again leaves the file alone."""
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    main(["install-plugin"], env)
    target = tmp_path / "opencode" / "plugin" / PLUGIN_FILE
    os.utime(target, (1_000_000, 1_000_000))
    capsys.readouterr()
    assert main(["install-plugin"], env) == 0
    skill = tmp_path / "opencode" / "skill" / "swarm-messaging" / "SKILL.md"
    assert capsys.readouterr().out == f"already up to date: {target}\nalready up to date: {skill}\n"
    assert target.stat().st_mtime == 1_000_000


def test_older_plugin_is_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An older copy is replaced whole, and the output says updated."""
    target = tmp_path / ".opencode" / "plugin" / PLUGIN_FILE
    target.parent.mkdir(parents=True)
    target.write_text("// an older pigeond plugin\n")
    assert main(["install-plugin", "--project", str(tmp_path)], {}) == 0
    assert target.read_bytes() == SOURCE.read_bytes()
    assert capsys.readouterr().out.startswith(f"updated: {target}\n")
    assert [p.name for p in target.parent.iterdir()] == [PLUGIN_FILE]  # no temporary left


def test_write_failure_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder that cannot be created: one line naming it, exit 1, no traceback."""
    (tmp_path / ".opencode").write_text("a file where a folder should be")
    assert main(["install-plugin", "--project", str(tmp_path)], {}) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"pigeon: cannot install the plugin into {tmp_path}/.opencode/plugin: ")
    assert err.count("\n") == 1


def test_copy_in_the_other_plugin_folder_is_pointed_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """opencode loads plugin/ and plugins/: a second copy would register each tool twice."""
    other = tmp_path / ".opencode" / "plugins" / PLUGIN_FILE
    other.parent.mkdir(parents=True)
    other.write_text("// an old copy\n")
    assert main(["install-plugin", "--project", str(tmp_path)], {}) == 0
    assert f"opencode also loads {other}: remove it" in capsys.readouterr().err


def test_install_says_where_the_tools_look_for_pigeond(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last line names every place the tools try, in the order clients try them."""
    assert main(["install-plugin", "--project", str(tmp_path)], {}) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (
        f"opencode loads it when it next starts; its tools reach pigeond at {address_order()},"
        " as opencode's environment has them"
    )
    places = ["$PIGEOND_URL", "$XDG_RUNTIME_DIR/pigeond/pigeond.sock", SYSTEM_SOCKET, DEFAULT_URL]
    assert [last.index(place) for place in places] == sorted(last.index(p) for p in places)


def test_the_plugin_looks_in_the_same_places() -> None:
    """The plugin's socket and TCP address are the ones the order names, and it tries
    PIGEOND_URL, then its sockets (the user's before the system's), then the TCP address."""
    source = SOURCE.read_text()
    assert f'const DEFAULT_URL = "{DEFAULT_URL}";' in source
    assert f'const SYSTEM_SOCKET = "{SYSTEM_SOCKET}";' in source
    chain = '(env.PIGEOND_URL || "").trim() || (await discoverSocket(env)) || DEFAULT_URL'
    assert chain in source
    discover = source[source.index("async function discoverSocket(env)") :]
    assert discover.index("env.XDG_RUNTIME_DIR") < discover.index("SYSTEM_SOCKET")


def test_the_skill_goes_beside_the_plugin(tmp_path: Path) -> None:
    """--project DIR also writes DIR/.opencode/skill/swarm-messaging/SKILL.md, mode 644."""
    assert main(["install-plugin", "--project", str(tmp_path)], {}) == 0
    skill = tmp_path / ".opencode" / "skill" / "swarm-messaging" / "SKILL.md"
    assert skill.read_bytes() == bundled_skill()
    assert stat.S_IMODE(skill.stat().st_mode) == 0o644
