"""What the repeat brake calls the same payload (pigeond/brakes/similarity.py): normalised
(case, white space, msg_/ses_/thr_ ids and numbers masked), first 2 KB, difflib's ratio
at least 0.9."""

from __future__ import annotations

import string
from collections.abc import Iterator

from hypothesis import given
from hypothesis import strategies as st

from pigeond.brakes.similarity import (
    COMPARED_CHARS,
    RepeatCount,
    RepeatOf,
    count_repeats,
    is_repeat,
    normalised,
)

TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=3000)
ID_TAIL = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=40)
REPORT = (
    "Build finished: 14 tests passed, 2 failed in tests/test_storage.py. The failures are in"
    " the migration of the routes table; I am looking at them now and will send a fix."
)


@given(TEXT)
def test_a_payload_always_repeats_itself(payload: str) -> None:
    """Identical payloads are always repeats."""
    assert is_repeat(payload, payload)


@given(st.sampled_from(["msg", "ses", "thr"]), ID_TAIL, ID_TAIL)
def test_ids_are_masked(prefix: str, one: str, other: str) -> None:
    """Two payloads that differ only in a msg_/ses_/thr_ id are repeats."""
    assert is_repeat(f"re: thanks ({prefix}_{one})", f"re: thanks ({prefix}_{other})")


def test_thanks_with_two_message_ids_repeat() -> None:
    """The issue's example: "re: thanks (msg_1)" and "re: thanks (msg_2)" repeat."""
    assert is_repeat("re: thanks (msg_1)", "re: thanks (msg_2)")


@given(st.integers(min_value=0), st.integers(min_value=0))
def test_numbers_are_masked(one: int, other: int) -> None:
    """Two payloads that differ only in a number are repeats."""
    assert is_repeat(f"ping {one}, your turn", f"ping {other}, your turn")


@given(st.text(alphabet=string.ascii_letters + string.digits + " \t\n.,!?", max_size=500))
def test_case_and_white_space_do_not_matter(payload: str) -> None:
    """Upper case and runs of white space normalise away."""
    shouted = "\n  " + "\t\t".join(payload.upper().split(" ")) + "  "
    assert normalised(shouted) == normalised(payload)


@given(TEXT)
def test_normalising_twice_changes_nothing(payload: str) -> None:
    """A normalised payload is its own normal form, and at most COMPARED_CHARS long."""
    once = normalised(payload)
    assert normalised(once) == once
    assert len(once) <= COMPARED_CHARS


def test_the_normal_form_masks_and_folds() -> None:
    """The normal form, spelled out."""
    assert normalised("  Re:\tthanks (MSG_ab12)\n\nfrom ses_X for thr_9, 42 TIMES ") == (
        "re: thanks (msg_#) from ses_# for thr_#, # times"
    )


def test_a_one_word_change_in_a_report_repeats() -> None:
    """A long payload with one word changed is nearly the same."""
    assert is_repeat(REPORT, REPORT.replace("looking at", "working on"))


def test_different_payloads_do_not_repeat() -> None:
    """An acknowledgement and a report are not the same."""
    assert not is_repeat("thanks, got it", REPORT)
    assert not is_repeat("ping", "pong, and here is the whole plan for tomorrow")


def test_only_the_first_2_kb_are_compared() -> None:
    """Payloads alike in their first 2 KB repeat, however they differ after it."""
    start = REPORT * 20
    assert len(normalised(start)) == COMPARED_CHARS
    assert is_repeat(start + "yes", start + "an entirely different ending " * 50)


def test_a_matcher_is_reused_for_many_texts() -> None:
    """RepeatOf compares one text with many, each on its own."""
    new = RepeatOf(normalised(REPORT))
    answers = [new.matches(normalised(p)) for p in (REPORT, "no", REPORT.upper(), "")]
    assert answers == [True, False, True, False]


def test_count_repeats_stops_at_what_is_needed() -> None:
    """The count stops at ``needed``: more repeats do not raise it."""
    assert count_repeats("ping 1", ["ping 2"] * 10, 3).found == 3


def test_count_repeats_counts_only_repeats() -> None:
    """Payloads that are not repeats are not counted."""
    earlier = ["ping 2", "something else entirely", "ping 3", REPORT]
    assert count_repeats("ping 1", earlier, 2).found == 2
    assert count_repeats("ping 1", earlier, 3).found < 3


class NeverRead(list[str]):
    """Payloads that fail the test if anything looks at them one by one."""

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the payloads were compared")


def test_count_repeats_compares_nothing_when_too_few() -> None:
    """Fewer payloads than needed cannot reach it: no comparison at all."""
    assert count_repeats("ping 1", NeverRead(["ping 2", "ping 3"]), 3).found == 0
    assert count_repeats("ping 1", NeverRead(["ping 2"]), 0).found == 0


class Watched(list[str]):
    """Payloads that note each one looked at."""

    def __init__(self, payloads: list[str]) -> None:
        super().__init__(payloads)
        self.looked_at: list[str] = []

    def __iter__(self) -> Iterator[str]:
        for payload in super().__iter__():
            self.looked_at.append(payload)
            yield payload


def test_count_repeats_stops_once_the_rest_cannot_reach_it() -> None:
    """Once too few payloads are left to reach ``needed``, the rest are not compared."""
    earlier = Watched(["no", "nope", "ping 2", "ping 3", "ping 4"])
    assert count_repeats("ping 1", earlier, 4).found == 0
    assert earlier.looked_at == ["no", "nope"]


def test_count_repeats_compares_each_distinct_text_once() -> None:
    """Payloads alike once normalised are compared once, and each still counts."""
    compared: list[str] = []
    original = RepeatOf.matches

    def watched(self: RepeatOf, other: str) -> bool:
        compared.append(other)
        return original(self, other)

    RepeatOf.matches = watched  # type: ignore[method-assign]
    try:
        assert count_repeats("ping 1", ["PING 2", "ping 3", "pong 4", "ping  5"], 3).found == 3
    finally:
        RepeatOf.matches = original  # type: ignore[method-assign]
    assert compared == ["ping #", "pong #"]


def test_count_repeats_stops_when_its_time_is_spent() -> None:
    """Past its budget the count stops with what it found, and says it ran out of time."""
    ticks = iter(range(100))
    count = count_repeats(
        "ping 1",
        ["ping 2", "no", "nope", "ping 3", "ping 4"],
        3,
        budget_s=2,
        timer=lambda: next(ticks),
    )
    assert count == RepeatCount(1, out_of_time=True)
