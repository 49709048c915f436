"""``pigeon install-plugin`` installs the plugin for the opencode it finds: 1.x or 2.x."""

from __future__ import annotations

from pathlib import Path

import pytest

from pigeond.cli.install_plugin import PLUGIN_FILE, bundled_plugin
from pigeond.cli.opencode_version import parse_major
from pigeond.cli.pigeon import main

PACKAGING = Path(__file__).resolve().parent.parent / "packaging" / "opencode-plugin"
V1 = (PACKAGING / "pigeond-swarm.js").read_bytes()
V2 = (PACKAGING / "pigeond-swarm-v2.js").read_bytes()


def opencode_on_path(tmp_path: Path, answer: str, code: int = 0) -> dict[str, str]:
    """An environment whose PATH has an ``opencode`` printing ``answer`` to --version."""
    folder = tmp_path / "bin"
    folder.mkdir()
    binary = folder / "opencode"
    binary.write_text(f"#!/bin/sh\nprintf '%s\\n' '{answer}'\nexit {code}\n")
    binary.chmod(0o755)
    return {"PATH": f"{folder}:/usr/bin:/bin", "XDG_CONFIG_HOME": str(tmp_path / "config")}


def test_the_package_ships_the_2x_plugin() -> None:
    """bundled_plugin(2) is packaging/opencode-plugin/pigeond-swarm-v2.js byte for byte."""
    assert bundled_plugin(2) == V2
    assert bundled_plugin(1) == V1


def test_opencode_2_gets_the_2x_plugin_in_its_plugins_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An opencode on PATH saying 2.3.0: the 2.x plugin, in opencode/plugins/."""
    env = opencode_on_path(tmp_path, "2.3.0")
    assert main(["install-plugin"], env) == 0
    target = tmp_path / "config" / "opencode" / "plugins" / PLUGIN_FILE
    assert target.read_bytes() == V2
    assert not (tmp_path / "config" / "opencode" / "plugin").exists()
    out = capsys.readouterr().out
    assert out.startswith(f"installed: {target}\n(the plugin for opencode 2.x: ")
    assert "--version says '2.3.0'" in out


def test_opencode_1_gets_the_1x_plugin(tmp_path: Path) -> None:
    """An opencode on PATH saying 1.18.33: the 1.x plugin, in opencode/plugin/."""
    env = opencode_on_path(tmp_path, "1.18.33")
    assert main(["install-plugin"], env) == 0
    assert (tmp_path / "config" / "opencode" / "plugin" / PLUGIN_FILE).read_bytes() == V1


def test_without_an_opencode_to_ask_the_1x_plugin_is_installed_and_said_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No opencode on PATH: the 1.x plugin, as before, and how to get the 2.x one."""
    assert main(["install-plugin", "--project", str(tmp_path)], {"PATH": "/nonexistent"}) == 0
    assert (tmp_path / ".opencode" / "plugin" / PLUGIN_FILE).read_bytes() == V1
    assert "(the plugin for opencode 1.x: no opencode on PATH to ask; --opencode-version 2" in (
        capsys.readouterr().out
    )


def test_an_answer_that_is_no_version_falls_back_to_1x_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An opencode whose --version fails or prints no version: 1.x, with what it answered."""
    env = opencode_on_path(tmp_path, "not a version", code=3)
    assert main(["install-plugin"], env) == 0
    assert (tmp_path / "config" / "opencode" / "plugin" / PLUGIN_FILE).read_bytes() == V1
    assert "--version answered 'not a version'" in capsys.readouterr().out


def test_the_option_wins_over_the_installed_opencode(tmp_path: Path) -> None:
    """--opencode-version 2 installs the 2.x plugin whatever opencode is on PATH."""
    env = opencode_on_path(tmp_path, "1.18.33")
    project = tmp_path / "project"
    project.mkdir()
    assert main(["install-plugin", "--project", str(project), "--opencode-version", "2"], env) == 0
    assert (project / ".opencode" / "plugins" / PLUGIN_FILE).read_bytes() == V2
    assert not (project / ".opencode" / "plugin").exists()


def test_the_option_can_ask_for_1x(tmp_path: Path) -> None:
    """--opencode-version 1 installs the 1.x plugin though opencode 2.x is on PATH."""
    env = opencode_on_path(tmp_path, "2.3.0")
    assert main(["install-plugin", "--opencode-version", "1"], env) == 0
    assert (tmp_path / "config" / "opencode" / "plugin" / PLUGIN_FILE).read_bytes() == V1


def test_a_version_without_a_plugin_is_a_usage_error(tmp_path: Path) -> None:
    """--opencode-version 3: argparse refuses it, exit 2, nothing written."""
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert main(["install-plugin", "--opencode-version", "3"], env) == 2
    assert list(tmp_path.iterdir()) == []


def test_the_2x_install_replaces_a_1x_copy_of_the_same_name(tmp_path: Path) -> None:
    """After an upgrade to opencode 2.x, installing again replaces the 1.x plugin in plugins/."""
    folder = tmp_path / ".opencode" / "plugins"
    folder.mkdir(parents=True)
    (folder / PLUGIN_FILE).write_bytes(V1)
    assert main(["install-plugin", "--project", str(tmp_path), "--opencode-version", "2"], {}) == 0
    assert (folder / PLUGIN_FILE).read_bytes() == V2


@pytest.mark.parametrize(
    ("answer", "major"),
    [("1.18.33", 1), ("2.3.0\n", 2), ("v2.0.18", 2), ("opencode 2.3.0", 2), ("0.0.0-beta", None),
     ("3.0.0", None), ("opencode", None), ("", None), ("build 12.1.18.33", None)],
)  # fmt: skip
def test_the_major_version_is_read_from_the_start_of_the_answer(
    answer: str, major: int | None
) -> None:
    """parse_major: 1 or 2 from the first version on the first line; anything else is none."""
    assert parse_major(answer) == major
