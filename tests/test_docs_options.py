"""The README's configuration table agrees with the one declaration of the options."""

from __future__ import annotations

import re
from pathlib import Path

from pigeond.config import OPTIONS

README = Path(__file__).resolve().parents[1] / "README.md"


def configuration_rows() -> dict[str, str]:
    """The table rows of README's "## Configuration", by file key."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) >= 4 and (match := re.fullmatch(r"`([a-z_]+)`", cells[1])):
            rows[match.group(1)] = line
    return rows


def test_every_option_has_one_row() -> None:
    """Each option has a row, keyed by its file key, and nothing else has one."""
    keys = set(configuration_rows()) - {"PIGEOND_CONFIG"}
    assert keys == {o.name for o in OPTIONS}


def test_every_row_shows_the_options_flag() -> None:
    """The row of each option starts with its real flag."""
    rows = configuration_rows()
    for option in OPTIONS:
        assert rows[option.name].startswith(f"| `{option.flag} "), rows[option.name]
