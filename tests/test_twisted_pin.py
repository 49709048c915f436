"""The Twisted pigeond runs on is the one pyproject.toml pins, and it still has every
private part pigeond/twisted_internals.py lists."""

from __future__ import annotations

import inspect
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from pigeond.twisted_internals import INTERNALS, Internal

REPO = Path(__file__).resolve().parent.parent


def twisted_requirement() -> Requirement:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    [twisted] = [r for r in map(Requirement, project["dependencies"]) if r.name == "twisted"]
    return twisted


def has(internal: Internal) -> bool:
    """On the class, or set on its instances by one of its methods (``self._x = ...``)."""
    return hasattr(internal.owner, internal.name) or any(
        f"self.{internal.name} =" in inspect.getsource(cls)
        for cls in internal.owner.__mro__
        if cls.__module__.startswith("twisted.")
    )


def test_the_installed_twisted_is_inside_the_pinned_range() -> None:
    """pyproject.toml bounds Twisted on both sides, and the installed release is inside."""
    specifier = twisted_requirement().specifier
    assert {s.operator for s in specifier} >= {">=", "<"}
    assert Version(version("twisted")) in specifier


def test_the_installed_twisted_has_every_internal_pigeond_uses() -> None:
    """Each private name the internals module lists exists on the installed Twisted."""
    assert [f"{i.owner.__qualname__}.{i.name}" for i in INTERNALS if not has(i)] == []


def test_an_internal_twisted_no_longer_has_is_noticed() -> None:
    """The check finds a listed name gone from Twisted (here one that never existed)."""
    gone = Internal(INTERNALS[0].owner, "_noSuchPart", "a test", "nothing")
    assert not has(gone)
