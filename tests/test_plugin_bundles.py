"""The opencode plugins (1.x and 2.x) are made from one source by pigeond.plugin_bundles."""

from __future__ import annotations

import pytest

from pigeond import plugin_bundles

SHARED = (plugin_bundles.SOURCE_DIR / plugin_bundles.SHARED).read_text(encoding="utf-8")


def test_the_committed_plugins_are_what_the_generator_makes() -> None:
    """Each committed plugin file equals the generator's output: regenerate with make plugins."""
    for name, text in plugin_bundles.bundles().items():
        committed = (plugin_bundles.PLUGIN_DIR / name).read_text(encoding="utf-8")
        assert committed == text, f"{name} is stale: run make plugins"


def test_both_plugins_hold_the_one_shared_tool_logic() -> None:
    """The 1.x and the 2.x plugin each hold src/tools.js whole, once."""
    for name in ("pigeond-swarm.js", "pigeond-swarm-v2.js"):
        text = (plugin_bundles.PLUGIN_DIR / name).read_text(encoding="utf-8")
        assert text.count(SHARED) == 1, name
        assert text.count("function makeTools(") == 1, name


def test_the_package_ships_both_plugins() -> None:
    """pigeond/opencode-plugin/ has each generated plugin (what install-plugin copies)."""
    shipped = plugin_bundles.REPO / "pigeond" / "opencode-plugin"
    for name in plugin_bundles.BUNDLES:
        assert (shipped / name).read_bytes() == (plugin_bundles.PLUGIN_DIR / name).read_bytes()


@pytest.mark.parametrize(
    "adapter", ["export default 1;\n", "// @include tools.js\n// @include tools.js\n"]
)
def test_an_adapter_needs_exactly_one_include_line(adapter: str) -> None:
    """An adapter without the include line, or with two, is refused, not bundled half."""
    with pytest.raises(ValueError, match="exactly one line"):
        plugin_bundles.bundle(adapter, SHARED, "vX.js")
