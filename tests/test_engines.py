"""The two SQL engines: every query that differs has a form for each, and the SQL they
share uses nothing only one of them takes."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import pigeond.storage
from pigeond.storage.engines import POSTGRES, SQLITE, EngineSql, engine_for

STORAGE = Path(pigeond.storage.__file__).parent

# What only SQLite takes, and what only PostgreSQL takes.
SQLITE_ONLY = re.compile(
    r"json_each\(|INDEXED BY|\browid\b|unlikely\(|BEGIN IMMEDIATE|PRAGMA|sqlite_master"
    r"|MATCH :",
    re.IGNORECASE,
)
POSTGRES_ONLY = re.compile(
    r"\bctid\b|::|FOR UPDATE|DISTINCT ON|\bpg_\w+\(|json_array_elements|tsquery|@@"
    r"|octet_length|\bunnest\(",
    re.IGNORECASE,
)
# Modules whose SQL is one engine's by design: the engines themselves, each engine's
# schema, the SQLite file's opening and bulk loading.
ONE_ENGINE_MODULES = re.compile(
    r"^pigeond\.storage\.(engines|postgres)(\.|$)"
    r"|^pigeond\.storage\.(\w+_schema|schema|migrations|existing|synthetic)$"
)


def storage_modules() -> list[str]:
    return [
        m.name
        for m in pkgutil.walk_packages([str(STORAGE)], prefix="pigeond.storage.")
        if not m.ispkg
    ]


def engine_sql_constants() -> dict[str, EngineSql]:
    """Every EngineSql a storage module holds, by the name it was first found under."""
    found: dict[str, EngineSql] = {}
    for name in storage_modules():
        for attr, value in vars(importlib.import_module(name)).items():
            if isinstance(value, EngineSql) and value not in found.values():
                found[f"{name}.{attr}"] = value
    return found


def shared_sql_literals(module: str) -> list[str]:
    """The string literals of ``module`` but its docstrings and its EngineSql(...) forms."""
    path = STORAGE / Path(*module.split(".")[2:]).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            skipped.add(id(first.value))  # a docstring
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "EngineSql":
            skipped.update(id(n) for n in ast.walk(node))
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skipped
    ]


def test_every_query_that_differs_has_a_distinct_form_for_each_engine() -> None:
    """Each EngineSql of the storage package has a SQLite and a PostgreSQL form, not the same."""
    constants = engine_sql_constants()
    assert len(constants) >= 10, sorted(constants)
    for name, query in constants.items():
        assert query.sqlite.strip() and query.postgres.strip(), name
        assert query.sqlite != query.postgres, name


def test_each_form_uses_nothing_only_the_other_engine_takes() -> None:
    """An EngineSql's SQLite form has nothing of PostgreSQL's own, and the reverse."""
    for name, query in engine_sql_constants().items():
        assert not POSTGRES_ONLY.search(query.sqlite), (name, query.sqlite)
        assert not SQLITE_ONLY.search(query.postgres), (name, query.postgres)


@pytest.mark.parametrize(
    "module", [m for m in storage_modules() if not ONE_ENGINE_MODULES.search(m)]
)
def test_the_shared_sql_uses_nothing_only_one_engine_takes(module: str) -> None:
    """The SQL both engines run as written has no construct of only one of them."""
    for text in shared_sql_literals(module):
        assert not SQLITE_ONLY.search(text), text
        assert not POSTGRES_ONLY.search(text), text


def test_the_db_setting_chooses_the_engine() -> None:
    """A postgresql:// URL is PostgreSQL's; a path is a SQLite file."""
    assert engine_for("postgresql://pigeond@db.example/swarm") is POSTGRES
    assert engine_for("/var/lib/pigeond/pigeond.db") is SQLITE
    assert engine_for(Path("pigeond.db")) is SQLITE
