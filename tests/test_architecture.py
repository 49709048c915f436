"""The import rules: import-linter's contracts in pyproject.toml, quoted by the README."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    declared: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return declared


def test_the_readme_quotes_every_import_contract() -> None:
    """Each contract's name appears in the README's layout section, word for word."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = [c["name"] for c in contracts() if f"*{c['name']}*" not in readme]
    assert missing == []


def test_the_layers_contract_keeps_storage_at_the_bottom() -> None:
    """The layers run service, then API and delivery side by side, then storage."""
    [layers] = [c for c in contracts() if c["type"] == "layers"]
    assert layers["layers"] == [
        "pigeond.service", "pigeond.api | pigeond.delivery", "pigeond.storage",
    ]  # fmt: skip
