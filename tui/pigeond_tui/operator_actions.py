"""The operator actions of ``pigeon-tui``: on the highlighted row, on its target, on
every listed row; apart from the app (pigeond_tui/app.py), which reads and draws.

What an action is, where it applies and how its outcome is worded come from
:mod:`pigeond.cli.actions`, as for ``pigeon``.  An action the highlighted row's state
does not allow is dimmed in the footer and its key only says why: no question is ever
asked for a write the storage would refuse.  Every write runs in a worker thread on
its own connection, conditional on the row as it was shown; when it is done the app
hears :class:`OperatorActions.Written` and reads again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App
from textual.css.query import NoMatches
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable

from pigeond.cli.actions import ACTIONS, Action, outcome_line, refusal, repository
from pigeond.cli.presentation import destination
from pigeond.model import StoredMessage
from pigeond.storage import StorageError
from pigeond.storage.operator import ActionOutcome
from pigeond.terminal import visible
from pigeond_tui.keys import ROW_ACTIONS, row_action
from pigeond_tui.screens import ConfirmScreen


class OperatorActions(App[None]):
    """The actions' half of :class:`~pigeond_tui.app.PigeonApp`; the app sets the
    attributes below and refreshes on :class:`Written`."""

    db: Path | str
    clock: Callable[[], int]
    messages: dict[str, StoredMessage]  # the rows the message table lists, by msg_id
    reports: list[str]  # every notification shown, for the record (and tests)

    class Written(Message):
        """A write finished (or failed): what the screen shows may be out of date."""

    @property
    def main_view(self) -> Screen[Any]:
        """The screen of the main view, at the bottom of the stack: a refresh that lands
        while a modal screen (a question, the help, the owed or policy view) is on top
        fills these widgets, not that screen's (where a query finds nothing).  While the
        app closes the stack is empty: NoMatches, as for any widget no longer there."""
        if not self.screen_stack:
            raise NoMatches("the app is closing: no screen is left")
        return self.screen_stack[0]

    def highlighted(self) -> StoredMessage | None:
        try:
            table = self.main_view.query_one("#messages", DataTable)
        except NoMatches:  # asked before the table is there (the footer's first look)
            return None
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return None if key is None else self.messages.get(key)

    def report(self, text: str, severity: SeverityLevel = "information") -> None:
        """Notify (escaped, no markup: the text may carry ids and errors) and keep a record."""
        shown = visible(text)
        self.reports.append(shown)
        self.notify(shown, severity=severity, markup=False)

    # -- what is offered --------------------------------------------------------

    def not_offered(self, name: str, action: Action) -> str | None:
        """Why the row action ``name`` (``one`` or ``target``) is not offered for the
        highlighted message; None when it is."""
        message = self.highlighted()
        if message is None:
            return "no message highlighted"
        if not action.applies_to(message.state):
            return f"{message.msg_id} {refusal(action, message.state)}"
        if name == "target" and message.to_session is None:
            return f"{message.msg_id} is a channel message: it has no target session"
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Row actions are dimmed in the footer (and their keys only say why) when the
        highlighted message is in a state they do not apply to: no question is ever
        asked for an action the storage would refuse."""
        if action in ROW_ACTIONS and parameters:
            act = ACTIONS.get(str(parameters[0]))
            if act is not None and self.not_offered(action, act) is not None:
                return None
        return True

    def refuse_key(self, key: str) -> bool:
        """A row action's key where the highlighted row does not allow it: a short
        notice and True (the key goes no further); False for every other key."""
        bound = row_action(key)
        why = None if bound is None else self.not_offered(*bound)
        if bound is None or why is None:
            return False
        self.report(f"{bound[1].name}: {why}", "warning")
        return True

    # -- asking -----------------------------------------------------------------

    def action_one(self, name: str) -> None:
        action, message = ACTIONS[name], self.highlighted()
        if message is None or self.not_offered("one", action) is not None:
            return
        seen = message.updated_at  # the row as the operator saw it
        question = f"{action.name} {message.msg_id} ({message.state}, to {destination(message)})?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.write_one(action, message.msg_id, message.state, seen)

        self.push_screen(ConfirmScreen(question), answered)

    def action_target(self, name: str) -> None:
        action, message = ACTIONS[name], self.highlighted()
        if message is None or message.to_session is None or self.not_offered("target", action):
            return
        target = message.to_session
        question = f"{action.name} every {action.wanted} message to {target}?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.write_target(action, target)

        self.push_screen(ConfirmScreen(question), answered)

    def action_listed(self, name: str) -> None:
        """The bulk form for the current view: every listed row the action applies to."""
        action = ACTIONS[name]
        seen = [
            (m.msg_id, m.updated_at) for m in self.messages.values() if action.applies_to(m.state)
        ]
        if not seen:
            self.report(f"{action.name}: no listed message is {action.wanted}", "warning")
            return
        question = f"{action.name} the {len(seen)} {action.wanted} message(s) listed?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.write_many(action, seen)

        self.push_screen(ConfirmScreen(question), answered)

    # -- writing (worker threads) -----------------------------------------------

    def written(self, text: str, severity: SeverityLevel = "information") -> None:
        """From a worker: report the outcome on the UI thread, then have the app reread."""
        self.call_from_thread(self.report, text, severity)
        self.post_message(self.Written())

    @work(thread=True, group="write")
    def write_many(self, action: Action, seen: list[tuple[str, int]]) -> None:
        try:
            with repository(self.db) as repo:
                outcomes = action.apply_many(repo, seen, self.clock())
        except StorageError as e:
            self.call_from_thread(self.report, f"{action.name}: {e}", "error")
            return
        done = outcomes[ActionOutcome.CHANGED]
        text = f"{action.name}: {done} of {len(seen)} done"
        if done < len(seen):
            text += f", {len(seen) - done} changed meanwhile or no longer applicable"
        self.written(text, "information" if done else "error")

    @work(thread=True, group="write")
    def write_one(self, action: Action, msg_id: str, state: str, seen: int) -> None:
        try:
            with repository(self.db) as repo:
                outcome = action.apply_one(repo, msg_id, self.clock(), seen)
        except StorageError as e:
            self.call_from_thread(self.report, f"{action.name} {msg_id}: {e}", "error")
            return
        severity: SeverityLevel = "information" if outcome is ActionOutcome.CHANGED else "error"
        self.written(outcome_line(action, msg_id, outcome, state), severity)

    @work(thread=True, group="write")
    def write_target(self, action: Action, target: str) -> None:
        try:
            with repository(self.db) as repo:
                changed = action.apply_to_target(repo, target, self.clock())
        except StorageError as e:
            self.call_from_thread(self.report, f"{action.name} {target}: {e}", "error")
            return
        self.written(f"{target}: {len(changed)} message(s) {action.done}")
