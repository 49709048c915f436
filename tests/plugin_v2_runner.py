"""Load pigeond's opencode 2.x plugin in node with a stand-in of opencode 2.x's plugin
context (:file:`plugin_v2_driver.mjs`), and run one of the tools it added.

No opencode 2.x runs here: the stand-in ``ctx`` has ``ctx.tool.transform`` only, as the
released Promise plugin API declares it.  The daemon is stubbed as for the 1.x plugin
(:mod:`tests.plugin_runner`), with the same request, so the two plugins' answers compare.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.plugin_runner import REPO, SESSION, driver_input, run_driver

PLUGIN_V2 = REPO / "packaging" / "opencode-plugin" / "pigeond-swarm-v2.js"
DRIVER_V2 = Path(__file__).resolve().parent / "plugin_v2_driver.mjs"


@dataclass(frozen=True, slots=True)
class V2Run:
    """What one run of the 2.x driver printed."""

    exports: list[str]
    definition: dict[str, Any]
    transforms: int
    tools: list[dict[str, Any]]
    requests: list[dict[str, Any]]
    ok: bool | None = None
    result: dict[str, Any] | None = None
    error: str | None = None

    def tool(self, name: str) -> dict[str, Any]:
        [found] = [t for t in self.tools if t["name"] == name]
        return found


def node() -> str:
    found = shutil.which("node")
    if found is None:  # never skip: the 2.x plugin's tests are part of the suite
        raise AssertionError("node is not on PATH: the 2.x plugin's tests need it")
    return found


def run_v2_tool(
    tool: str | None,
    args: object = None,
    *,
    replies: Sequence[Mapping[str, Any]] = (),
    env: Mapping[str, str | None] | None = None,
    session: str | None = SESSION,
    call_id: str | None = "call_1",
) -> V2Run:
    """Load the 2.x plugin with the stand-in ctx; run ``tool`` as opencode 2.x would."""
    request = driver_input(tool, args, replies=replies, env=env, session=session,
                           call_id=call_id, plugin=PLUGIN_V2)  # fmt: skip
    raw = run_driver([node(), str(DRIVER_V2)], request, {})
    return V2Run(
        exports=raw["exports"],
        definition=raw["definition"],
        transforms=raw["transforms"],
        tools=raw["tools"],
        requests=raw["requests"],
        ok=raw.get("ok"),
        result=raw.get("result"),
        error=raw.get("error"),
    )
