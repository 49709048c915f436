"""``terminal.visible``: message fields shown as data, never as terminal commands."""

from __future__ import annotations

import ast
import json
import unicodedata

import pytest

from pigeond.terminal import ESCAPED_CATEGORIES, json_visible, visible

# The CLI and TUI tests still import these from here; their home is tests/hostile_text.py.
from tests.hostile_text import EVIL as EVIL
from tests.hostile_text import EVIL_SHOWN as EVIL_SHOWN
from tests.hostile_text import raw_controls as raw_controls


def test_plain_text_is_unchanged() -> None:
    """ASCII, accented letters, CJK and emoji come back exactly as given."""
    text = "ses_a: café 中文 🐦 <b> & [bold] 100%"
    assert visible(text) == text
    assert visible(text, multiline=True) == text


def test_escape_sequences_lose_their_esc_and_bel() -> None:
    """A CSI clear-screen, an OSC 52 clipboard write and U+202E show as escapes only."""
    assert visible(EVIL) == EVIL_SHOWN
    assert raw_controls(visible(EVIL)) == set()


@pytest.mark.parametrize(
    ("char", "shown"),
    [("\x00", "\\x00"), ("\x08", "\\x08"), ("\x0c", "\\x0c"), ("\x1f", "\\x1f"), ("\x7f", "\\x7f")],
)
def test_c0_controls_and_del_are_escaped(char: str, shown: str) -> None:
    """Every C0 control and DEL is shown as ``\\xNN``."""
    assert visible(f"a{char}b") == f"a{shown}b"


@pytest.mark.parametrize("code", [0x80, 0x85, 0x9B, 0x9D, 0x9F])
def test_c1_controls_are_escaped(code: int) -> None:
    """C1 controls (CSI U+009B and OSC U+009D among them) are shown as ``\\xNN``."""
    assert visible(chr(code)) == f"\\x{code:02x}"


@pytest.mark.parametrize(
    "code", [0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2069]
)
def test_bidi_controls_are_escaped(code: int) -> None:
    """Bidi marks, embeddings, overrides and isolates are shown as ``\\uNNNN``."""
    assert visible(f"abc{chr(code)}def") == f"abc\\u{code:04x}def"


@pytest.mark.parametrize("code", [0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF])
def test_invisible_format_characters_are_escaped(code: int) -> None:
    """Zero-width and other invisible format characters are shown as ``\\uNNNN``."""
    assert visible(f"ses{chr(code)}_a") == f"ses\\u{code:04x}_a"


def test_soft_hyphen_below_u0100_uses_the_short_hex_escape() -> None:
    """U+00AD (an invisible format character below U+0100) is shown as ``\\xad``."""
    assert visible("ses\xad_a") == "ses\\xad_a"


def test_characters_above_the_bmp_use_the_long_escape() -> None:
    """A tag character (U+E0041, category Cf) is shown as ``\\UNNNNNNNN``."""
    assert visible("a\U000e0041") == "a\\U000e0041"


def test_line_and_paragraph_separators_are_escaped() -> None:
    """U+2028 and U+2029 are escaped, in multi-line text as well."""
    assert visible("a\u2028b\u2029c", multiline=True) == "a\\u2028b\\u2029c"


def test_lone_surrogates_are_escaped() -> None:
    """A lone surrogate (which stdout cannot encode) is shown as ``\\uNNNN``."""
    assert visible("a\ud800b") == "a\\ud800b"


def test_exactly_the_declared_categories_are_escaped() -> None:
    """Across the BMP a character changes iff its category is declared (or it is a backslash)."""
    changed = {code for code in range(0x10000) if visible(chr(code)) != chr(code)}
    declared = {
        code
        for code in range(0x10000)
        if unicodedata.category(chr(code)) in ESCAPED_CATEGORIES or chr(code) == "\\"
    }
    assert changed == declared


def test_single_line_escapes_newline_tab_and_carriage_return() -> None:
    """By default ``\\n``, ``\\t`` and ``\\r`` are shown in their short escapes."""
    assert visible("a\nb\tc\rd") == "a\\nb\\tc\\rd"


def test_multiline_keeps_newlines_and_tabs_but_not_carriage_returns() -> None:
    """``multiline=True`` keeps newlines and tabs; a carriage return (line overwrite) is escaped."""
    assert visible("a\nb\tc\r\nd", multiline=True) == "a\nb\tc\\r\nd"


def test_backslashes_are_doubled() -> None:
    """A literal backslash is shown as ``\\\\``, so a real ``\\x1b`` text differs from an ESC."""
    assert visible("C:\\tmp") == "C:\\\\tmp"
    assert visible("\\x1b") == "\\\\x1b"
    assert visible("\\x1b") != visible("\x1b")


def test_escaped_text_reads_back_as_the_original() -> None:
    """The escapes are Python's: reading the shown text as a string literal gives the input."""
    text = "a\\b\x1b[2J\u202e\U000e0041\n\té中"
    assert ast.literal_eval(f'"{visible(text)}"') == text


def test_json_keeps_the_data_but_escapes_what_a_terminal_acts_on() -> None:
    """--json output decodes to the exact strings, yet holds no raw C1, bidi or separator."""
    value = {"payload": "a\x9b2J\u202eb\u2028c\U000e0041 é 中", "from": "ses_x"}
    shown = json_visible(json.dumps(value, ensure_ascii=False))
    assert json.loads(shown) == value
    assert not any(c in shown for c in "\x9b\u202e\u2028\U000e0041")
    assert "é 中" in shown
