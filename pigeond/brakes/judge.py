"""A brake's verdict and the protocol every brake implements (issue 26's design).

A local copy of the definitions helper A's ``pigeond/brakes/__init__.py`` makes, word for
word, so the pair brakes can be built and tested before the branches merge; at the merge
this module goes and its importers take :mod:`pigeond.brakes` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pigeond.config import Config
from pigeond.model import NewMessage


@dataclass(frozen=True, slots=True)
class Hold:
    brake: str  # "hops" | "pair_rate" | "repeat" | "budget"
    reason: str  # one line, for a person: what happened and that a person must release it


class Brake(Protocol):
    def configure(self, config: Config) -> None: ...  # reload

    async def judge(self, message: NewMessage, thread_id: str, now_ms: int) -> Hold | None: ...
