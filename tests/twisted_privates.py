"""Finds each use of a private Twisted name in Python source: an import of one, an attribute
reached through an imported Twisted module (``tcp._reservedFD``), and, in a class that
derives from a Twisted class, any name with a leading ``_`` it defines or reaches through
``self``, ``cls`` or ``super()`` (an override of Twisted's, or one Twisted may add)."""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PrivateUse:
    line: int
    name: str
    how: str  # "import", "module attribute", "in subclass <Name>"

    def __str__(self) -> str:
        return f"{self.line}: {self.name} ({self.how})"


def is_private(name: str) -> bool:
    """A leading underscore, dunders aside."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def imported(tree: ast.Module) -> dict[str, str]:
    """Each name the module binds by an absolute import, with the dotted path it names."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    bound[root] = root
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The dotted path ``node`` names through the module's imports (None: not imported)."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = dotted(node.value, bound)
        return None if base is None else f"{base}.{node.attr}"
    return None


def resolve(path: str) -> object | None:
    """The object at a dotted path: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part, None)
        return found
    return None


def is_twisted_class(obj: object) -> bool:
    return isinstance(obj, type) and any(c.__module__.startswith("twisted.") for c in obj.__mro__)


def _reaches_own(node: ast.Attribute) -> bool:
    """``self.x``, ``cls.x`` or ``super().x``."""
    value = node.value
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "super"
    )


def _defined(body: list[ast.stmt]) -> list[tuple[int, str]]:
    names = []
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            names.append((stmt.lineno, stmt.name))
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if isinstance(stmt, ast.AnnAssign):
            targets = [stmt.target]
        names += [(t.lineno, t.id) for t in targets if isinstance(t, ast.Name)]
    return names


def _private_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """Each import of a private Twisted module, or of a private name from one."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            pairs = [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            pairs = [(alias.name, alias.name) for alias in node.names]
        else:
            continue
        for module, name in pairs:
            parts = [*module.split("."), *name.split(".")]
            if parts[0] == "twisted" and any(is_private(p) for p in parts):
                found.append((node.lineno, name))
    return found


def private_twisted_uses(source: str) -> list[PrivateUse]:
    """Every use of a private Twisted name in ``source``, in the order of its lines."""
    tree = ast.parse(source)
    bound = imported(tree)
    found = [PrivateUse(line, name, "import") for line, name in _private_imports(tree)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            base = dotted(node.value, bound)
            if base is not None and base.split(".")[0] == "twisted":
                found.append(PrivateUse(node.lineno, node.attr, "module attribute"))
    twisted_classes: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [dotted(b, bound) for b in node.bases]
        local = [b.id for b in node.bases if isinstance(b, ast.Name)]
        if not (
            any(b is not None and is_twisted_class(resolve(b)) for b in bases)
            or twisted_classes.intersection(local)
        ):
            continue
        twisted_classes.add(node.name)
        how = f"in subclass {node.name}"
        found += [PrivateUse(line, n, how) for line, n in _defined(node.body) if is_private(n)]
        found += [
            PrivateUse(inner.lineno, inner.attr, how)
            for inner in ast.walk(node)
            if isinstance(inner, ast.Attribute) and is_private(inner.attr) and _reaches_own(inner)
        ]
    return sorted(set(found), key=lambda use: (use.line, use.name))
