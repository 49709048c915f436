"""The protocol every brake implements (issue 26's design).

A local copy of the ``Brake`` protocol helper A's ``pigeond/brakes/__init__.py`` is to
declare, so the pair brakes can be built and checked before it exists; the verdict,
:class:`~pigeond.model.Hold`, is A's own.  When that package's ``__init__`` lands, this
module goes and its importers take :mod:`pigeond.brakes` instead.
"""

from __future__ import annotations

from typing import Protocol

from pigeond.config import Config
from pigeond.model import Hold, NewMessage


class Brake(Protocol):
    def configure(self, config: Config) -> None: ...  # reload

    async def judge(self, message: NewMessage, thread_id: str, now_ms: int) -> Hold | None: ...
