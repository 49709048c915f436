"""The import rules: import-linter's contracts in pyproject.toml, quoted by the manual."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from tests.docs_pages import page, section

REPO = Path(__file__).resolve().parent.parent


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    declared: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return declared


def test_the_manual_quotes_every_import_contract() -> None:
    """Each contract's name appears in docs/development.md's layout section, word for word,
    and the section quotes no contract that does not exist."""
    layout = section(page("development.md"), "Layout")
    names = [str(c["name"]) for c in contracts()]
    assert [n for n in names if f"*{n}*" not in layout] == []
    quoted = re.findall(r"^- \*([^*]+)\*", layout, flags=re.M)
    assert sorted(quoted) == sorted(names)


def test_the_layers_contract_keeps_storage_at_the_bottom() -> None:
    """The layers run service, then API and delivery side by side, then storage."""
    [layers] = [c for c in contracts() if c["type"] == "layers"]
    assert layers["layers"] == [
        "pigeond.service", "pigeond.api | pigeond.delivery", "pigeond.storage",
    ]  # fmt: skip


def command_modules() -> set[str]:
    """Every module a ``[project.scripts]`` entry names, and every module that is a verb of
    one: it defines a top-level ``main``, ``entry``, ``run`` or ``cmd_*`` function.  The
    TUI's own entry point (``pigeond_tui.app``) is left out: it is the TUI."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    named = {target.split(":")[0] for target in config["project"]["scripts"].values()}
    verbs = set()
    for path in (REPO / "pigeond").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        if any(f in ("main", "entry", "run") or f.startswith("cmd_") for f in functions):
            verbs.add(".".join(path.relative_to(REPO).with_suffix("").parts))
    return (named | verbs) - {"pigeond_tui.app"}


def test_the_tui_contract_forbids_every_command_module() -> None:
    """The contract keeping the TUI off the commands names each command and verb module, so
    a new ``pigeon`` verb cannot slip past it."""
    [tui] = [c for c in contracts() if c.get("source_modules") == ["pigeond_tui"]]
    forbidden = set(tui["forbidden_modules"])  # type: ignore[call-overload]
    assert command_modules() - forbidden == set()


def private_imports(path: Path) -> list[str]:
    """The ``module:name`` of each import in ``path`` of a library's private module or name
    (a component starting with ``_``, dunders aside), such as ``twisted.web._newclient``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [a.name for a in node.names]
            modules = [node.module]
        elif isinstance(node, ast.Import):
            names, modules = [], [a.name for a in node.names]
        else:
            continue
        root = modules[0].split(".")[0]
        if root in FIRST_PARTY:
            continue
        parts = [p for m in modules for p in m.split(".")] + names
        if any(p.startswith("_") and not p.startswith("__") for p in parts):
            found.append(f"{path.relative_to(REPO)}: {modules[0]}:{','.join(names)}")
    return found


FIRST_PARTY = {"pigeond", "pigeond_tui", "tests", "testkit", "bench", "packaging", "tui"}


def test_no_code_imports_a_library_s_private_names() -> None:
    """Code depends on libraries' public names only (Twisted's ``_newclient`` and the like
    change without notice)."""
    files = [
        p
        for d in ("pigeond", "tui", "tests", "testkit", "bench", "packaging")
        for p in (REPO / d).rglob("*.py")
    ]
    found = [hit for path in files for hit in private_imports(path)]
    assert found == []
