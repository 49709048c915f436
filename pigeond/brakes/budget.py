"""The budget brake: a thread whose turns have used its budget holds its next message for a
person.

What a thread used is what the turns its messages caused used, as recorded from the
targets' transcripts (pigeond/storage/costs.py), counted from the thread's last budget
reset (``budget:<thread>`` in swarm_brake_resets, written by a release with ``reset``).
Two budgets, each an option and off at 0: ``thread_budget_tokens`` (all five kinds of
tokens) and ``thread_budget_cost`` (US dollars of the turns whose cost is known: a Claude
Code turn's is not).  A release with ``raise N`` gives the thread its own token budget
(``swarm_threads.token_budget``): what it used since its last reset, plus N
(pigeond/storage/costs.py, ``raise_budget``); a thread's own budget is used while the
option is on.  A cost budget is released with ``reset`` or ``once``.

A turn is recorded once it has ended, so the brake sees a thread's usage a verify interval
or so after each turn: the message that trips it is the first one sent after the turn
that crossed the budget was recorded.  A person's own send (from a shell, not a session)
is never held: the person is who the brake waits for.
"""

from __future__ import annotations

from pigeond.config import Config
from pigeond.costs import CostTotals, format_cost, format_tokens
from pigeond.model import SESSION_ID_RE, Hold, NewMessage
from pigeond.storage import SwarmRepository
from pigeond.storage.brake_holds import budget_scope
from pigeond.storage.database import Database
from pigeond.storage.threads import ThreadInfo

NAME = "budget"


def budget_reason(thread_id: str, used: str, budget: str) -> str:
    """What the sender and the operator are told of a budget hold."""
    return f"thread {thread_id} used {used}, over its budget of {budget}; a person must release it"


def _usage(repo: SwarmRepository, thread_id: str) -> tuple[CostTotals, ThreadInfo | None]:
    """The thread's usage since its last budget reset, and its row (its own budgets)."""
    since = repo.brake_reset_at(budget_scope(thread_id)) or 0
    return repo.thread_costs_since(thread_id, since), repo.thread(thread_id)


class BudgetBrake:
    """Holds an agent's send into a thread that has used its token or cost budget."""

    def __init__(self, db: Database, config: Config) -> None:
        self._db = db
        self.configure(config)

    def configure(self, config: Config) -> None:
        self.tokens = config.thread_budget_tokens
        self.cost = config.thread_budget_cost

    async def judge(self, message: NewMessage, thread_id: str, now_ms: int) -> Hold | None:
        if (self.tokens == 0 and self.cost == 0) or not SESSION_ID_RE.fullmatch(
            message.from_session
        ):
            return None  # off, or a person's send
        used, thread = await self._db.read(_usage, thread_id)
        tokens, cost = self.tokens, self.cost
        if thread is not None:  # a person raised this thread's budget (release --raise)
            tokens = tokens if tokens == 0 or thread.token_budget is None else thread.token_budget
            cost = cost if cost == 0 or thread.cost_budget is None else thread.cost_budget
        if tokens > 0 and used.tokens >= tokens:
            used_tokens = f"{format_tokens(used.tokens)} tokens"
            return Hold(NAME, budget_reason(thread_id, used_tokens, format_tokens(tokens)))
        if cost > 0 and used.cost >= cost:
            return Hold(NAME, budget_reason(thread_id, format_cost(used.cost),
                                            format_cost(cost)))  # fmt: skip
        return None
