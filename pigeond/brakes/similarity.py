"""When two payloads are "the same or nearly the same": the repeat brake's comparison.

Agents that bounce a message back and forth rarely send the very same bytes: a counter,
a message id or a session id changes, the case or the line breaks differ.  So payloads
are compared *normalised*: lower case, every run of white space one space, every
``msg_``/``ses_``/``thr_`` id and every number masked, and only the first
:data:`COMPARED_CHARS` characters.  Two normalised payloads are a repeat when they are
equal, or when :class:`difflib.SequenceMatcher`'s ratio is at least
:data:`SIMILAR_RATIO`.

The cost is bounded, since the repeat brake compares on every send: at most
:data:`COMPARED_CHARS` characters a side, difflib's own ``autojunk`` heuristic on (it
keeps a long text's matching from going quadratic in its common characters), and the
two cheap upper bounds of the ratio, ``real_quick_ratio`` (the lengths) and
``quick_ratio`` (the characters as a multiset), first: most pairs that are not repeats
never reach the full ratio.  :func:`count_repeats` compares each distinct normalised
text once, stops as soon as its answer is known, and within :data:`COMPARE_BUDGET_S` in
any case.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from typing import Final

# A repeat is a ratio of at least this (1.0: the same text).
SIMILAR_RATIO: Final = 0.9
# How much of a normalised payload is compared ("the first 2 KB").
COMPARED_CHARS: Final = 2048
# How much of a stored payload is read to make that much normalised text: normalising only
# shortens (a run of spaces becomes one), so four times as much is nearly always enough,
# and a payload of mostly white space is compared on what its first part gives.
READ_CHARS: Final = 4 * COMPARED_CHARS
# The most time one judgement spends comparing.  A comparison of two 2 KB texts takes a
# few milliseconds, but some texts (a hundred characters, each repeated just under the
# share at which ``autojunk`` ignores it) take tens: without a bound, a sender could make
# every send of its own cost seconds of a database reader.  Out of time, the brake holds
# nothing on what it has not compared (the pair's rate and the hop brake still apply).
COMPARE_BUDGET_S: Final = 0.2
# How many normalised texts are kept, by their raw text (about 12 KB each at most): the
# payloads of the pairs that keep sending are normalised once, not at every send.
_NORMALISED_CACHE: Final = 512

_IDS: Final = re.compile(r"\b(msg|ses|thr)_[a-z0-9_-]+")
_NUMBERS: Final = re.compile(r"[0-9]+")
_SPACES: Final = re.compile(r"\s+")


def normalised(payload: str) -> str:
    """``payload`` as it is compared: lower case, ids and numbers masked (``msg_#``,
    ``#``), white space runs one space, trimmed, cut to :data:`COMPARED_CHARS`."""
    return _normalised_start(payload[:READ_CHARS])


@lru_cache(maxsize=_NORMALISED_CACHE)
def _normalised_start(start: str) -> str:
    """:func:`normalised` of a payload's first :data:`READ_CHARS` (the cache's keys are
    never longer)."""
    text = start.lower()
    text = _IDS.sub(lambda m: m.group(1) + "_#", text)
    text = _NUMBERS.sub("#", text)
    return _SPACES.sub(" ", text).strip()[:COMPARED_CHARS]


class RepeatOf:
    """Compares one normalised text with many: difflib indexes it once (as the matcher's
    second sequence), and each other text is only set against it."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._matcher = SequenceMatcher(None, b=text)

    def matches(self, other: str) -> bool:
        """Whether normalised ``other`` is a repeat of this text."""
        if other == self._text:
            return True
        matcher = self._matcher
        matcher.set_seq1(other)
        return (
            matcher.real_quick_ratio() >= SIMILAR_RATIO
            and matcher.quick_ratio() >= SIMILAR_RATIO
            and matcher.ratio() >= SIMILAR_RATIO
        )


def is_repeat(payload: str, other: str) -> bool:
    """Whether two payloads are the same or nearly the same, once normalised."""
    return RepeatOf(normalised(payload)).matches(normalised(other))


@dataclass(frozen=True, slots=True)
class RepeatCount:
    """What :func:`count_repeats` found: the repeats (no further than it needed), and
    whether it ran out of time before it knew (then ``found`` is what it had)."""

    found: int
    out_of_time: bool = False


def count_repeats(
    payload: str,
    earlier: Sequence[str],
    needed: int,
    *,
    budget_s: float = COMPARE_BUDGET_S,
    timer: Callable[[], float] = time.perf_counter,
) -> RepeatCount:
    """How many of ``earlier`` (payloads) are repeats of ``payload``, counted no further
    than ``needed``: the count stops there, and stops early (less than ``needed``) once
    the payloads left could not reach it, or once ``budget_s`` (read on ``timer``) is
    spent.  At most ``len(earlier)`` comparisons, and none when there are fewer than
    ``needed``."""
    if needed <= 0 or len(earlier) < needed:
        return RepeatCount(0)
    deadline = timer() + budget_s
    new = RepeatOf(normalised(payload))
    verdicts: dict[str, bool] = {}  # a loop's payloads are often alike once normalised
    found = 0
    for index, other in enumerate(earlier):
        text = normalised(other)
        verdict = verdicts.get(text)
        if verdict is None:
            verdict = verdicts[text] = new.matches(text)
        if verdict:
            found += 1
            if found >= needed:
                return RepeatCount(found)
        if found + (len(earlier) - index - 1) < needed:
            return RepeatCount(found)
        if timer() >= deadline:
            return RepeatCount(found, out_of_time=True)
    return RepeatCount(found)
