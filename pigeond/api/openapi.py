"""The HTTP API's OpenAPI description: ``pigeond/api/openapi.json``, served at ``/openapi.json``.

The description is a file in the package, not built by code, because it is read by more
than the daemon: schemathesis fuzzes the API from it in ``make test``, a client generator
or a person reads it from the installed package, and a reviewer sees a change to the API's
contract as a diff of one file.  tests/test_openapi.py holds it to the code: its routes are
exactly those :meth:`pigeond.api.routes.SwarmRoutes.install` declares, and its patterns, enums
and bounds are those of :mod:`pigeond.model`, :mod:`pigeond.api.send_request` and the routes.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

OPENAPI_PATH = "/openapi.json"
RESOURCE_NAME = "openapi.json"


@cache
def openapi_text() -> str:
    """The packaged file, read once: it cannot change while the daemon runs."""
    return resources.files("pigeond.api").joinpath(RESOURCE_NAME).read_text(encoding="utf-8")


def openapi_document() -> dict[str, Any]:
    """The description, parsed anew for each caller, so no caller can change another's."""
    document: dict[str, Any] = json.loads(openapi_text())
    return document


__all__ = ["OPENAPI_PATH", "openapi_document", "openapi_text"]
