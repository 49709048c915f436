"""Twisted's private parts are used in one module, pigeond/twisted_internals.py, which lists
each; any other use, by import or by a subclass's name with a leading ``_``, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from pigeond.twisted_internals import INTERNALS
from tests.twisted_privates import private_twisted_uses

REPO = Path(__file__).resolve().parent.parent
INTERNALS_MODULE = REPO / "pigeond" / "twisted_internals.py"


def shipped_sources() -> list[Path]:
    return sorted([*(REPO / "pigeond").rglob("*.py"), *(REPO / "tui").rglob("*.py")])


def test_only_the_internals_module_uses_twisted_s_private_names() -> None:
    """No module but pigeond/twisted_internals.py imports, reaches or overrides a private
    Twisted name, nor gives a subclass of a Twisted class a name with a leading ``_``."""
    found = [
        f"{path.relative_to(REPO)}:{use}"
        for path in shipped_sources()
        if path != INTERNALS_MODULE
        for use in private_twisted_uses(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_the_internals_module_uses_exactly_the_names_it_lists() -> None:
    """Each private name the internals module touches is in INTERNALS, and each listed one
    is touched there."""
    used = {use.name for use in private_twisted_uses(INTERNALS_MODULE.read_text("utf-8"))}
    assert used == {internal.name for internal in INTERNALS}


def test_each_internal_says_why_and_what_would_replace_it() -> None:
    """Every listed internal has a reason and an upstream replacement, in words."""
    assert all(len(i.why) > 20 and len(i.upstream) > 10 for i in INTERNALS)


SUBCLASS_OVERRIDE = """
from twisted.web import http

class Channel(http.HTTPChannel):
    def _respondToBadRequestAndDisconnect(self):
        pass
"""
SUBCLASS_READ = """
from twisted.web.http import HTTPChannel

class Channel(HTTPChannel):
    def requestDone(self, request):
        return self._waitingForTransport
"""
SUBCLASS_OF_SUBCLASS = """
from twisted.web.resource import Resource

class Api(Resource):
    pass

class Leaf(Api):
    _private_state = 0
"""
SUBCLASS_OF_AN_IMPORTED_SUBCLASS = """
from pigeond.api.http_limits import LimitedChannel

class Channel(LimitedChannel):
    def refuse_bad_request(self):
        super()._respondToBadRequestAndDisconnect()
"""
PRIVATE_IMPORT = """
from twisted.web._newclient import Response
"""
PRIVATE_NAME_IMPORT = """
from twisted.internet.tcp import _SocketCloser
"""
MODULE_ATTRIBUTE = """
from twisted.internet import tcp

tcp._reservedFD.reserve()
"""


@pytest.mark.parametrize(
    ("source", "name"),
    [
        (SUBCLASS_OVERRIDE, "_respondToBadRequestAndDisconnect"),
        (SUBCLASS_READ, "_waitingForTransport"),
        (SUBCLASS_OF_SUBCLASS, "_private_state"),
        (SUBCLASS_OF_AN_IMPORTED_SUBCLASS, "_respondToBadRequestAndDisconnect"),
        (PRIVATE_IMPORT, "Response"),
        (PRIVATE_NAME_IMPORT, "_SocketCloser"),
        (MODULE_ATTRIBUTE, "_reservedFD"),
    ],
)
def test_each_way_to_a_private_name_is_found(source: str, name: str) -> None:
    """An override, a read through self or super(), a private name of a subclass of a
    subclass, a private module or name imported, a module's private attribute: each found."""
    assert [use.name for use in private_twisted_uses(source)] == [name]


def test_private_names_outside_twisted_subclasses_are_not_twisted_s() -> None:
    """A class that derives from no Twisted class keeps its private names; a dunder in a
    Twisted subclass is no private name."""
    source = """
from twisted.web.resource import Resource

class Plain:
    def _helper(self):
        return self._state

class Api(Resource):
    def __init__(self):
        super().__init__()
"""
    assert private_twisted_uses(source) == []
