"""The TUI's modal screens: the Yes/No question before a write, the question for a
number (how far to raise a limit), and the help.

The help is made from the app's key bindings (each binding's ``tooltip`` is its
help line), so a key cannot be added, changed or dropped without the help
following.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from pigeond.terminal import visible
from pigeond_tui.keys import NUMBER_KEYS, key_line

KEY_WIDTH = 7
HELP_FOOT = (
    "↑ ↓ PgUp PgDn move in the table; the detail pane follows.\n"
    "An action on the highlighted row is offered only where its state allows it.\n"
    "Esc or ? closes."
)


class ConfirmScreen(ModalScreen[bool]):
    """A Yes/No question; ``y``/``n``/Esc work as well as the buttons."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Grid(id="confirm"):
            yield Label(Text(visible(self.question)), id="question")
            yield Button("Yes (y)", variant="error", id="yes")
            yield Button("No (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class NumberScreen(ModalScreen[int | None]):
    """A question for a whole number of at least 1, ``default`` filled in: Enter takes it,
    Esc answers None.  Anything else typed is refused and the question stays."""

    BINDINGS: ClassVar[list[BindingType]] = list(NUMBER_KEYS)

    def __init__(self, question: str, default: int) -> None:
        super().__init__()
        self.question = question
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="number"):
            yield Label(Text(visible(self.question)), id="number-question")
            yield Input(str(self.default), type="integer", id="number-input")
            yield Label(f"enter takes it  {key_line(self.app, NUMBER_KEYS)}", id="number-foot")

    def on_mount(self) -> None:
        self.query_one("#number-input", Input).focus()

    @on(Input.Submitted, "#number-input")
    def submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text.isdigit() or int(text) < 1:
            self.query_one("#number-foot", Label).update("a whole number of at least 1, please")
            return
        self.dismiss(int(text))

    def action_close(self) -> None:
        self.dismiss(None)


def help_lines(keys: Sequence[tuple[str, str]]) -> list[str]:
    """One line per binding: its key as the footer shows it, then what it does."""
    return [f"{key:>{KEY_WIDTH}}  {what}" for key, what in keys]


class HelpScreen(ModalScreen[None]):
    """Every key of the app, from ``(key shown, help)`` pairs the app makes of its bindings."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "close", "Close"),
    ]

    def __init__(self, keys: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            yield Label("pigeon-tui keys", id="help-title")
            yield Static(Text("\n".join(help_lines(self.keys))), id="help-body")
            yield Label(HELP_FOOT, id="help-foot")

    def action_close(self) -> None:
        self.dismiss(None)
