"""The TUI installs as ``pigeond_tui``, never as a top-level ``tui`` (a name other
distributions also install), though its folder in the checkout is still ``tui/``."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT_S = 300


def test_the_installed_pigeond_has_pigeond_tui_and_no_tui(tmp_path: Path) -> None:
    """Outside the checkout, ``pigeond_tui`` imports and ``tui`` is no package at all."""
    probe = (
        "import importlib.util as u;"
        " print(u.find_spec('tui') is None, u.find_spec('pigeond_tui.app') is not None)"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert found.stdout.split() == ["True", "True"]


@pytest.mark.slow
def test_the_wheel_has_only_pigeond_and_pigeond_tui_at_the_top(tmp_path: Path) -> None:
    """The wheel (built from the sdist, as ``make dist`` does) holds two top-level packages,
    the TUI's stylesheet, and a ``pigeon-tui`` that starts ``pigeond_tui.app:main``."""
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(tmp_path), str(REPO)],
        check=True, capture_output=True, timeout=BUILD_TIMEOUT_S,
    )  # fmt: skip
    [wheel] = tmp_path.glob("pigeond-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = zf.read(entry_points).decode()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"pigeond", "pigeond_tui"}
    assert "pigeond_tui/pigeon.tcss" in names
    assert "pigeon-tui = pigeond_tui.app:main" in scripts.splitlines()
