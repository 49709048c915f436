"""How a target's consent looks in a cell, and the name an operator's writes carry: what
``pigeon policy`` (pigeond/cli/pigeon_policy.py) and the TUI's "queued per target" and
consent screen share.

A module of its own, apart from the ``pigeon`` verbs, so the TUI borrows the words
without importing a command-line entry point.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pigeond.consent import InboundPolicy, Policy
from pigeond.storage import SwarmRepository

OPERATOR: Final = "operator"  # who a policy written by a person at this machine is set by
POLICY_COLUMN: Final = "policy"  # the TUI's column of "queued per target"


def consent_cells(repo: SwarmRepository) -> dict[str, str]:
    """The policy column's cell per target that set a policy: ``hold, 2 held``; a target
    without one shows ``accept`` (see :func:`consent_cell`): the TUI's "queued per target"."""
    held = repo.held_counts()
    return {p.session: describe(p, held.get(p.session, 0)) for p in repo.policies()}


def describe(policy: InboundPolicy, held: int) -> str:
    allow = f", allows {len(policy.allow)}" if policy.allow else ""
    waiting = f", {held} held" if held else ""
    return f"{policy.policy.value}{allow}{waiting}"


def consent_cell(cells: Mapping[str, str], target: str) -> str:
    return cells.get(target, Policy.ACCEPT.value)
