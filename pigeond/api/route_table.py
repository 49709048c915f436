"""The API's one routing table: each route is a method and a path template, and each
``{name}`` segment of the template is handed to the handler as the argument ``name``.

A template is the path as pigeond/api/openapi.json writes it (``/swarm/channels/{channel}
/members/{session}``): literal segments, and parameters that each take one whole,
non-empty segment.  A path with a literal route wins over a template; two templates that
could match the same path are refused when the second is added, as is a handler that does
not take its template's parameters by name, so a wrong table fails at start, not at the
first request.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PARAMETER = re.compile(r"^\{([a-z_][a-z0-9_]*)\}$")
# a handler is called as handler(request, **parameters); it answers at once or is a coroutine
Handler = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Template:
    """A path template: its text, and each segment as a literal or a parameter's name."""

    text: str
    literals: tuple[bytes | None, ...]  # None where the segment is a parameter
    parameters: tuple[str, ...]  # the parameters' names, in the path's order

    @classmethod
    def parse(cls, text: str) -> Template:
        if not text.startswith("/"):
            raise ValueError(f"route {text!r} does not start with '/'")
        literals: list[bytes | None] = []
        parameters: list[str] = []
        for segment in text.split("/"):
            named = PARAMETER.fullmatch(segment)
            if named is not None:
                literals.append(None)
                parameters.append(named.group(1))
            elif "{" in segment or "}" in segment:
                raise ValueError(f"route {text!r}: a parameter is one whole segment, {{name}}")
            else:
                literals.append(segment.encode("ascii"))
        if len(set(parameters)) != len(parameters):
            raise ValueError(f"route {text!r} names a parameter twice")
        return cls(text, tuple(literals), tuple(parameters))

    def match(self, segments: list[bytes]) -> dict[str, bytes] | None:
        """The parameters' raw values in ``segments`` (the path split on ``/``), or None."""
        if len(segments) != len(self.literals):
            return None
        values = []
        for literal, segment in zip(self.literals, segments, strict=True):
            if literal is None:
                if not segment:
                    return None
                values.append(segment)
            elif literal != segment:
                return None
        return dict(zip(self.parameters, values, strict=True))

    def overlaps(self, other: Template) -> bool:
        """Whether some path matches both."""
        return len(self.literals) == len(other.literals) and all(
            a is None or b is None or a == b
            for a, b in zip(self.literals, other.literals, strict=True)
        )

    @property
    def shape(self) -> str:
        """The template with each parameter as ``{}``."""
        return "/".join("{}" if s is None else s.decode("ascii") for s in self.literals)


class RouteTable:
    """Every route of the API, by method and path template."""

    def __init__(self) -> None:
        self.literal: dict[bytes, dict[bytes, Handler]] = {}
        self.templated: dict[Template, dict[bytes, Handler]] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        """Route ``method`` on ``path`` to ``handler``, which takes the request and each of
        the template's parameters by name."""
        template = Template.parse(path)
        try:
            inspect.signature(handler).bind(None, **dict.fromkeys(template.parameters, ""))
        except TypeError as e:
            raise ValueError(f"{method} {path}: the handler does not take {e}") from e
        verb = method.encode("ascii")
        if not template.parameters:
            self.literal.setdefault(path.encode("ascii"), {})[verb] = handler
            return
        for other in self.templated:
            if other != template and other.overlaps(template):
                raise ValueError(f"route {path!r} overlaps route {other.text!r}")
        self.templated.setdefault(template, {})[verb] = handler

    def match(self, path: bytes) -> tuple[dict[bytes, Handler], dict[str, bytes]] | None:
        """The handlers by method for ``path``, with its parameters' raw values; None when
        no route has that path."""
        methods = self.literal.get(path)
        if methods is not None:
            return methods, {}
        segments = path.split(b"/")
        for template, methods in self.templated.items():
            values = template.match(segments)
            if values is not None:
                return methods, values
        return None

    def routes(self) -> set[tuple[str, str]]:
        """Every (method, path template) routed, parameters named."""
        literal = {(m.decode(), p.decode()) for p, ms in self.literal.items() for m in ms}
        templated = {(m.decode(), t.text) for t, ms in self.templated.items() for m in ms}
        return literal | templated

    def shapes(self) -> set[tuple[str, str]]:
        """Every (method, path) routed, with ``{}`` for each parameter."""
        literal = {(m.decode(), p.decode()) for p, ms in self.literal.items() for m in ms}
        templated = {(m.decode(), t.shape) for t, ms in self.templated.items() for m in ms}
        return literal | templated


__all__ = ["Handler", "RouteTable", "Template"]
