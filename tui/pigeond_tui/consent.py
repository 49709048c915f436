"""Each session's consent in the TUI: the policy column of "queued per target", and the
``p`` screen that sets the highlighted row's target's policy or releases what it holds.

The screen writes like ``pigeon policy`` (pigeond/cli/pigeon_policy.py): straight to the
database, in one transaction with the waiting messages the change holds or releases; a
running daemon picks the policy up within seconds.  Its keys are declared in
:mod:`pigeond_tui.keys` with the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label

from pigeond.cli.actions import repository
from pigeond.cli.consent_views import OPERATOR, consent_cell, consent_cells
from pigeond.consent import Policy
from pigeond.storage import StorageError
from pigeond.terminal import visible
from pigeond_tui.keys import POLICY_KEYS


def change_policy(path: Path | str, target: str, choice: str, now_ms: int) -> str:
    """Apply ``choice`` (a policy's name, or ``release``) to ``target``; the line to report."""
    with repository(path) as repo:
        if choice == "release":
            return f"{target}: {repo.release_held(target, now_ms)} held message(s) released"
        allow = repo.policy_of(target).allow
        change = repo.set_policy(target, Policy(choice), allow, now_ms, OPERATOR)
    return f"{target} {choice}: {change.held} held, {change.released} released"


class PolicyScreen(ModalScreen[None]):
    """The target's policy now; a key sets another or releases what it holds."""

    BINDINGS: ClassVar[list[BindingType]] = list(POLICY_KEYS)

    def __init__(
        self, db: Path | str, target: str, now_ms: Callable[[], int], report: Callable[[str], None]
    ) -> None:
        super().__init__()
        self.db = db
        self.target = target
        self.now_ms = now_ms
        self.report = report

    def compose(self) -> ComposeResult:
        with Vertical(id="policy"):
            yield Label(Text(visible(f"inbound policy of {self.target}")), id="policy-title")
            yield Label("", id="policy-now")
            keys = "  ".join(f"{b.key} {b.description}" for b in POLICY_KEYS)
            yield Label(keys, id="policy-keys")

    def on_mount(self) -> None:
        self.read()

    @work(thread=True, exclusive=True, group="policy")
    def read(self) -> None:
        try:
            with repository(self.db) as repo:
                line = consent_cell(consent_cells(repo), self.target)
        except StorageError as e:
            line = f"read failed: {e}"
        self.app.call_from_thread(self.show, line)

    def show(self, line: str) -> None:
        self.query_one("#policy-now", Label).update(Text(visible(f"now: {line}")))

    @work(thread=True, group="write")
    def action_choose(self, choice: str) -> None:
        try:
            line = change_policy(self.db, self.target, choice, self.now_ms())
        except StorageError as e:
            line = f"policy {self.target}: {e}"
        self.app.call_from_thread(self.report, line)
        self.app.call_from_thread(self.dismiss, None)

    def action_close(self) -> None:
        self.dismiss(None)
