"""The v2 types published in npm ``@opencode-ai/sdk`` (pinned), read from their TypeScript.

The SDK ships generated declarations (``dist/v2/gen/types.gen.d.ts``) and the client
that uses them (``dist/v2/gen/sdk.gen.js``).  It is installed once into the test cache
as the agent CLIs are (:mod:`testkit.npm_install`).  :class:`SdkTypes` reads what the
drift test needs from that text: each route's method (from the client's
``.post({ url: "/api/..." })`` calls), its request body and its responses, and checks a
JSON value against a declared type: a field the type does not declare, a required field
missing, or a primitive of the wrong kind is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.npm_install import NpmInstallError, NpmTool, ensure_installed

SDK_VERSION = "1.19.6"
GEN = Path("node_modules") / "@opencode-ai" / "sdk" / "dist" / "v2" / "gen"
GEN_FILES = ("types.gen.d.ts", "sdk.gen.js", "sdk.gen.d.ts")


class SdkInstallError(NpmInstallError):
    """npm is missing, or the install of the SDK failed."""


SDK = NpmTool(
    package="@opencode-ai/sdk",
    folder="opencode-sdk",
    marker="pigeond-opencode-sdk.json",
    project="pigeond-opencode-sdk",
    error=SdkInstallError,
    program=GEN / "types.gen.d.ts",
)

_EXPORT = re.compile(r"^export type (\w+) = (.*)$")
_CALL = re.compile(r"\.(?:sse\.)?(get|post|put|patch|delete)\(\{\s*url: \"([^\"]+)\"")
_RESULT = re.compile(r"(?:RequestResult|ServerSentEventsResult)<(\w+)Responses")
_MEMBER = re.compile(r"^(\"[^\"]+\"|\[key: string\]|\w+)(\?)?: (.*)$", re.S)
_PRIMITIVES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "number": (int, float),
    "boolean": bool,
}


def ensure_sdk_types() -> SdkTypes:
    """``@opencode-ai/sdk@SDK_VERSION`` installed (once); its v2 types, read."""
    gen = ensure_installed(SDK, SDK_VERSION).parent
    texts = [(gen / name).read_text(encoding="utf-8") for name in GEN_FILES]
    return SdkTypes(*texts)


@dataclass(frozen=True, slots=True)
class Operation:
    """One route as the SDK declares it."""

    method: str
    url: str
    data: str
    """The name of its ``…Data`` type (``…Responses`` holds its answers)."""


class SdkTypes:
    """The exported types of ``types.gen.d.ts`` and the routes of ``sdk.gen.js``."""

    def __init__(self, declarations: str, client: str, client_declarations: str) -> None:
        self.types: dict[str, str] = {}
        lines = declarations.splitlines()
        index = 0
        while index < len(lines):
            match = _EXPORT.match(lines[index])
            index += 1
            if match is None:
                continue
            body = [match.group(2)]
            while not body[-1].endswith(";") or _depth("\n".join(body)) > 0:
                body.append(lines[index])
                index += 1
            self.types[match.group(1)] = "\n".join(body).rstrip(";")
        self.operations = self._operations(client, client_declarations)

    def _operations(self, client: str, client_declarations: str) -> list[Operation]:
        """The client's calls paired, in order, with its methods' declared results; each
        pair is checked (the ``…Data`` type must name the same url), so a change in the
        generated layout fails here rather than pairing the wrong types."""
        calls = _CALL.findall(client)
        results = _RESULT.findall(client_declarations)
        if len(calls) != len(results):
            raise ValueError(f"{len(calls)} client calls but {len(results)} declared results")
        operations = []
        for (method, url), prefix in zip(calls, results, strict=True):
            declared = re.search(
                r'^    url: "([^"]+)";$', self.types.get(prefix + "Data", ""), re.M
            )
            if declared is None or declared.group(1) != url:
                raise ValueError(f"{prefix}Data does not declare the url {url} the client calls")
            operations.append(Operation(method.upper(), url, prefix))
        return operations

    def operation(self, method: str, url: str) -> Operation:
        """The one operation the client calls with ``method`` on ``url``."""
        found = {op for op in self.operations if op.method == method and op.url == url}
        if len(found) != 1:
            raise LookupError(f"the SDK declares {len(found)} operations {method} {url}")
        return found.pop()

    def fields(self, expression: str) -> dict[str, bool]:
        """The fields of an object type: name → required."""
        members = _members(self._resolve(expression))
        return {name: not optional for name, (optional, _) in members.items()}

    def member(self, expression: str, name: str) -> str:
        """The type of one field of an object type."""
        return _members(self._resolve(expression))[name][1]

    def body(self, operation: Operation) -> dict[str, bool]:
        return self.fields(self.member(operation.data + "Data", "body"))

    def answer(self, operation: Operation, status: int) -> str:
        """The declared type of an answer with ``status`` (a success or an error)."""
        table = "Responses" if status < 400 else "Errors"
        return self.member(operation.data + table, str(status))

    def errors(self, value: Any, expression: str, path: str = "$") -> list[str]:
        """Where ``value`` differs from the declared type (empty when it conforms)."""
        expression = self._resolve(expression)
        branches = _split(expression, "|")
        if len(branches) > 1:
            if isinstance(value, dict) and isinstance(value.get("type"), str):
                tagged = f'"{value["type"]}"'
                branches = [b for b in branches if self._tag(b) == tagged] or branches
            results = [self.errors(value, branch, path) for branch in branches]
            return [] if [] in results else min(results, key=len)
        if expression.startswith("Array<") and expression.endswith(">"):
            if not isinstance(value, list):
                return [f"{path}: not an array"]
            return [
                e
                for i, item in enumerate(value)
                for e in self.errors(item, expression[6:-1], f"{path}[{i}]")
            ]
        if expression.startswith("{"):
            return self._object_errors(value, _members(expression), path)
        return _leaf_errors(value, expression, path)

    def _object_errors(
        self, value: Any, members: dict[str, tuple[bool, str]], path: str
    ) -> list[str]:
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        errors: list[str] = []
        index = members.get("[key: string]")
        for key, item in value.items():
            declared = members.get(key) or index
            if declared is None:
                errors.append(f"{path}.{key}: not declared")
            else:
                errors.extend(self.errors(item, declared[1], f"{path}.{key}"))
        for name, (optional, _) in members.items():
            if not optional and name != "[key: string]" and name not in value:
                errors.append(f"{path}.{name}: required, missing")
        return errors

    def _tag(self, expression: str) -> str | None:
        """The ``type`` literal of an object type (how a union's members are told apart)."""
        resolved = self._resolve(expression)
        if not resolved.startswith("{"):
            return None
        member = _members(resolved).get("type")
        return member[1] if member else None

    def _resolve(self, expression: str) -> str:
        expression = expression.strip()
        while expression in self.types:
            expression = self.types[expression].strip()
        return expression


def _leaf_errors(value: Any, expression: str, path: str) -> list[str]:
    if expression in ("unknown", "void"):
        return []
    if expression in ("true", "false"):
        return [] if value is (expression == "true") else [f"{path}: not {expression}"]
    if expression.startswith('"'):
        return [] if value == expression.strip('"') else [f"{path}: {value!r} is not {expression}"]
    kind = _PRIMITIVES.get(expression)
    if kind is None:
        raise ValueError(f"{path}: cannot check against the type {expression!r}")
    ok = isinstance(value, kind) and (expression == "boolean" or not isinstance(value, bool))
    return [] if ok else [f"{path}: {value!r} is not a {expression}"]


def _depth(text: str) -> int:
    return sum(text.count(o) - text.count(c) for o, c in ("{}", "<>", "()", "[]"))


def _split(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` where no bracket is open."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += (char in "{<([" and 1) or 0
        depth -= (char in "}>)]" and 1) or 0
        if char == separator and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    parts.append(text[start:].strip())
    return [part for part in parts if part]


def _members(expression: str) -> dict[str, tuple[bool, str]]:
    """An object literal's members: name → (optional, type), comments dropped."""
    if not expression.startswith("{"):
        raise ValueError(f"not an object type: {expression[:60]!r}")
    inner = re.sub(r"/\*\*.*?\*/", "", expression[1:-1], flags=re.S)
    members = {}
    for member in _split(inner, ";"):
        match = _MEMBER.match(member)
        if match is None:
            raise ValueError(f"cannot read the member {member[:60]!r}")
        members[match.group(1).strip('"')] = (match.group(2) == "?", match.group(3).strip())
    return members


def body_drift(declared: dict[str, bool], accepted: frozenset[str]) -> list[str]:
    """How a route's accepted body fields differ from the declared ones (name → required)."""
    extra = [f"{name}: accepted, not declared" for name in sorted(accepted - set(declared))]
    missing = [f"{name}: declared, not accepted" for name in sorted(set(declared) - accepted)]
    return extra + missing
