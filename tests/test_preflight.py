"""Directory preflight: missing directories hold delivery, unseeable ones do not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pigeond.delivery.preflight import directory_problem


def test_existing_directory_is_fine(tmp_path: Path) -> None:
    """A directory that exists is delivered to."""
    assert directory_problem(str(tmp_path)) is None


def test_deleted_directory_is_a_problem(tmp_path: Path) -> None:
    """A directory deleted from an existing parent is missing: hold the message."""
    problem = directory_problem(str(tmp_path / "gone"))
    assert problem is not None and "does not exist" in problem


def test_file_is_not_a_directory(tmp_path: Path) -> None:
    """A path that is a file is not a directory a session can run in."""
    (tmp_path / "f").write_text("x")
    problem = directory_problem(str(tmp_path / "f"))
    assert problem is not None and "not a directory" in problem


def test_path_through_a_file_is_missing(tmp_path: Path) -> None:
    """A path through a file (ENOTDIR) is missing."""
    (tmp_path / "f").write_text("x")
    assert directory_problem(str(tmp_path / "f" / "sub")) is not None


def test_permission_denied_is_not_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory pigeond may not look into is not missing: deliver as usual."""

    def denied(path: object) -> os.stat_result:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "stat", denied)
    assert directory_problem("/home/alice/project") is None


def test_hidden_by_sandbox_is_not_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ProtectHome= /home is an empty mount: a project below it is not missing."""
    real_stat = os.stat

    def sandboxed(path: object) -> os.stat_result:
        if str(path).startswith("/home/"):
            raise FileNotFoundError(2, "No such file or directory")
        return real_stat("/")

    monkeypatch.setattr(os, "stat", sandboxed)
    monkeypatch.setattr(os.path, "ismount", lambda path: str(path) == "/home")
    assert directory_problem("/home/alice/project") is None


def test_missing_below_an_ordinary_home_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """When /home is not a separate mount, a missing project under it is missing."""
    real_stat = os.stat

    def stat(path: object) -> os.stat_result:
        if str(path).startswith("/home/"):
            raise FileNotFoundError(2, "No such file or directory")
        return real_stat("/")

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os.path, "ismount", lambda path: False)
    assert directory_problem("/home/alice/project") is not None
