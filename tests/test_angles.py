"""The characters that read as an angle bracket: one rule over Unicode's own data
(pigeond/angles.py), one generated table, and the opencode plugin's copy of it."""

from __future__ import annotations

import re
import unicodedata

import pytest

from pigeond import angle_table, angles

PLUGIN = angles.PLUGIN_FILE.read_text(encoding="utf-8")
SAME_UNICODE = pytest.mark.skipif(
    unicodedata.unidata_version != angle_table.UNICODE_VERSION,
    reason=f"this Python's Unicode is not the table's {angle_table.UNICODE_VERSION}:"
    " regenerate with make angles",
)


def js_string(name: str) -> str:
    """The plugin's constant ``name`` (its pieces joined, its escapes decoded)."""
    found = re.search(rf"const {name} = \(?(.*?)\)?;\n", PLUGIN, flags=re.S)
    assert found is not None, name
    literal = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', found.group(1)))
    return re.sub(
        r"\\u\{([0-9A-Fa-f]+)\}|\\u([0-9A-Fa-f]{4})",
        lambda m: chr(int(m.group(1) or m.group(2), 16)),
        literal,
    )


@pytest.mark.slow
@SAME_UNICODE
def test_the_table_is_what_the_rule_selects() -> None:
    """angle_table.py is the generator's text for what the rule selects in all of Unicode."""
    selected = angles.angle_brackets()
    assert angles.split(selected) == (
        angle_table.LESS_THAN, angle_table.GREATER_THAN, angle_table.LOOKALIKES
    )  # fmt: skip
    assert angles.TABLE_FILE.read_text(encoding="utf-8") == angles.table_source(selected)
    assert angles.js_block(selected) in PLUGIN


def test_the_plugins_list_is_the_python_table() -> None:
    """The plugin's three generated strings are the table's, character for character."""
    assert js_string("NFKC_LESS_THAN") == angle_table.LESS_THAN
    assert js_string("NFKC_GREATER_THAN") == angle_table.GREATER_THAN
    assert js_string("ANGLE_LOOKALIKES") == angle_table.LOOKALIKES


def test_the_rule_finds_the_measured_look_alikes_and_the_old_list() -> None:
    """The twelve measured reaching an envelope verbatim, and every character of the
    hand-made list before the rule (U+02C2, U+1438, U+2039 ... and their twins)."""
    table = set(angle_table.LOOKALIKES)
    assert set("«»《》⟪⟫⧼⧽≺≻⦉⦊") <= table
    assert set("\u02c2\u1438\u2039\u2329\u276c\u276e\u2770\u27e8\u3008") <= table
    assert set("\u02c3\u1433\u203a\u232a\u276d\u276f\u2771\u27e9\u3009") <= table


def test_every_selected_character_has_its_mirror_twin() -> None:
    """A selected character with a mirror image (Bidi_Mirrored) has its twin selected too."""
    table = set(angle_table.LESS_THAN + angle_table.GREATER_THAN + angle_table.LOOKALIKES)
    twins = {angles.mirror_twin(c) for c in table}
    assert twins - {None} <= table | {"<", ">"}
