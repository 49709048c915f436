"""``pigeond.cli.presentation``: how both operator front ends word and fit message fields."""

from __future__ import annotations

import pytest

from pigeond.cli.presentation import cut, format_age, last_column_width, next_retry
from pigeond.terminal import visible
from tests.fixed_time import NOW_MS
from tests.hostile_text import EVIL

NOW = NOW_MS


@pytest.mark.parametrize(
    ("ms", "shown"),
    [(-5, "0s"), (59_999, "59s"), (60_000, "1m"), (7_200_000, "2h"), (90_000_000, "1d")],
)
def test_age_is_the_largest_whole_unit(ms: int, shown: str) -> None:
    """Ages read 59s, 1m, 2h, 1d; a clock skew never shows a negative age."""
    assert format_age(ms) == shown


@pytest.mark.parametrize(
    ("next_retry_at", "shown"),
    [(None, "-"), (NOW - 1, "now"), (NOW, "now"), (NOW + 1, "in 1s"), (NOW + 30_000, "in 30s"),
     (NOW + 29_001, "in 30s"), (NOW + 3_600_000, "in 1h")],
)  # fmt: skip
def test_next_retry_is_now_only_when_due(next_retry_at: int | None, shown: str) -> None:
    """A target not yet due shows how long it waits, rounded up: never ``in 0s``, never ``now``."""
    assert next_retry(next_retry_at, NOW) == shown


def test_cut_keeps_text_that_fits() -> None:
    """Text whose escaped form fits is returned whole, with no ``…``."""
    assert cut("ses_a", 5) == "ses_a"
    assert cut("x" * 80, None) == "x" * 80


def test_cut_at_the_end_never_splits_an_escape() -> None:
    """The escaped result fits the width, and ends before an escape that would not fit."""
    text = "HTTP 500: " + "x" * 26 + EVIL
    assert visible(cut(text, 40)) == "HTTP 500: " + "x" * 26 + "…"


def test_cut_in_the_middle_keeps_both_ends_of_an_id() -> None:
    """A 30-character session id cut to 20 keeps its first 10 and last 9 characters."""
    shown = cut("ses_6ee0b0c1dffe2ZzJkq2QpW7b9q", 20, middle=True)
    assert shown == "ses_6ee0b0…q2QpW7b9q"
    assert len(shown) == 20


def test_cut_in_the_middle_never_splits_an_escape() -> None:
    """Both halves of a middle cut end between escapes."""
    shown = visible(cut("ses_a" + EVIL, 20, middle=True))
    assert shown == "ses_a\\x1b[…\\u202e"


def test_the_last_column_takes_the_room_the_others_leave() -> None:
    """Each column is as wide as its widest cell plus the gap; the last gets the rest."""
    header = ("id", "age", "last_error")
    rows = [("msg_1", "1m", "boom"), ("msg_22", "59s", "")]
    assert last_column_width(header, rows, 40, gap=2, least=5) == 40 - (6 + 2) - (3 + 2) - 2
    assert last_column_width(header, rows, 10, gap=2, least=5) == 5
