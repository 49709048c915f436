"""The manual's configuration pages agree with the one declaration of the options: the
generated reference's table row by row, and the guide's notes option by option."""

from __future__ import annotations

import re

from pigeond.config import OPTIONS
from tests.docs_pages import page, section

REFERENCE = page("reference/configuration.md")
GUIDE = page("configuration.md")


def reference_rows() -> dict[str, list[str]]:
    """The cells of the reference table's rows, by file key."""
    rows = {}
    for line in REFERENCE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) == 6 and (match := re.fullmatch(r"`([a-z_]+)`", cells[0])):
            rows[match.group(1)] = cells
    return rows


def test_every_option_has_one_row_in_the_reference() -> None:
    """Each option has a row, keyed by its file key, in declaration order; nothing else."""
    assert list(reference_rows()) == [o.name for o in OPTIONS]


def test_every_row_shows_the_options_flag_variable_and_meaning() -> None:
    """The row of each option gives its real flag, environment variable and help."""
    rows = reference_rows()
    for option in OPTIONS:
        _, flag, env_var, _, _, meaning = rows[option.name]
        assert (flag, env_var) == (f"`{option.flag}`", f"`{option.env_var}`")
        assert meaning == " ".join(option.help.split())


def test_the_guide_explains_exactly_the_options_there_are() -> None:
    """ "The options in more words" has one note per option, and none for an option that
    does not exist (a renamed or removed one)."""
    notes = section(GUIDE, "The options in more words")
    explained = re.findall(r"^- \*\*`([a-z_]+)`\*\*: ", notes, flags=re.M)
    assert sorted(explained) == sorted(o.name for o in OPTIONS)
