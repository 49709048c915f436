"""Every key of ``pigeon-tui``, declared once.

Each binding carries its footer label (``description``) and its help line
(``tooltip``, also the footer's hover text); the help screen is made from this
tuple, and the operator actions' keys take their words and states from
:mod:`pigeond.cli.actions`.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from textual.app import App
from textual.binding import Binding

from pigeond.cli.actions import ACTIONS, CANCEL, REQUEUE, RETRY_NOW, Action
from pigeond.consent import POLICIES
from pigeond.model import PERMISSION_ANSWERS
from pigeond_tui.data import TABS, WINDOW

# The actions bound to the highlighted row: offered only where the row's state allows.
ROW_ACTIONS: Final = frozenset({"one", "target"})


def on_message(key: str, action: Action) -> Binding:
    return Binding(
        key, f"one('{action.name}')", action.name.capitalize(),
        tooltip=f"{action.name} the highlighted message ({action.wanted})",
    )  # fmt: skip


def on_target(key: str, action: Action) -> Binding:
    return Binding(
        key, f"target('{action.name}')", f"{action.name.capitalize()} target",
        tooltip=f"{action.name} all {action.wanted} messages to the highlighted row's target",
    )  # fmt: skip


def on_listed(key: str, action: Action) -> Binding:
    return Binding(
        key, f"listed('{action.name}')", f"{action.name.capitalize()} listed", show=False,
        tooltip=f"{action.name} the listed {action.wanted} messages (state tab and filter)",
    )  # fmt: skip


KEYS: Final[tuple[Binding, ...]] = (
    Binding("q", "quit", "Quit", tooltip="quit"),
    Binding("question_mark", "help", "Help", tooltip="this help"),
    Binding("r", "refresh", "Refresh", tooltip="refresh now (it also refreshes every second)"),
    Binding("slash", "filter", "Filter",
            tooltip="filter by target, channel, sender, kind or payload text (Enter applies)"),
    Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="clear the filter"),
    on_message("u", REQUEUE),
    on_message("n", RETRY_NOW),
    on_message("x", CANCEL),
    on_target("U", REQUEUE),
    on_target("X", CANCEL),
    Binding("s", "sort", "Sort", tooltip="sort by: newest, oldest, target, attempts (cycles)"),
    Binding("o", "owed", "Owed", tooltip="who owes whom a reply: outstanding obligations"),
    Binding("p", "policy", "Policy",
            tooltip="set the highlighted row's target's inbound policy, or release its held"),
    Binding("c", "channels", "Channels",
            tooltip="names and channels: who holds which name, each channel's members"),
    Binding("w", "permissions", "Waiting",
            tooltip="permission requests sessions wait on while they handle swarm messages"),
    Binding("h", "held", "Held",
            tooltip="messages a conversation brake holds for a person: release or drop them"),
    Binding("t", "threads", "Threads",
            tooltip="threads, the latest first: hops, turns, held, tokens and cost"),
    Binding("right_square_bracket", "page(1)", "Next page", show=False,
            tooltip=f"next window of {WINDOW} messages (tables never load everything)"),
    Binding("left_square_bracket", "page(-1)", "Previous page", show=False,
            tooltip=f"previous window of {WINDOW} messages"),
    on_listed("R", REQUEUE),
    on_listed("C", CANCEL),
    *[Binding(str(i + 1), f"state('{tab}')", tab, show=False, tooltip=f"show the {tab} tab")
      for i, tab in enumerate(TABS)],
)  # fmt: skip


# The policy screen's keys (pigeond_tui/consent.py): one per policy, release, close.
POLICY_KEYS: Final[tuple[Binding, ...]] = (
    *[Binding(key, f"choose('{policy}')", policy, tooltip=f"set the target's policy to {policy}")
      for key, policy in zip(("a", "h", "f"), POLICIES, strict=True)],
    Binding("l", "choose('release')", "release", tooltip="release what the target holds now"),
    Binding("escape,q", "close", "close", tooltip="close, changing nothing"),
)  # fmt: skip


# The names and channels screen's keys (pigeond_tui/addressing.py): it only reads.
ADDRESSING_KEYS: Final[tuple[Binding, ...]] = (
    Binding("r", "reread", "refresh", tooltip="read the names and channels again"),
    Binding("tab", "app.focus_next", "next table", tooltip="move between the three tables"),
    Binding("escape,c,q", "close", "close", tooltip="close"),
)


# The permissions screen's keys (pigeond_tui/permissions.py): one per answer, refresh, close.
PERMISSION_KEYS: Final[tuple[Binding, ...]] = (
    *[Binding(key, f"answer('{answer}')", answer,
              tooltip=f"answer the highlighted request {answer}")
      for key, answer in zip(("o", "a", "x"), PERMISSION_ANSWERS, strict=True)],
    Binding("r", "reread", "refresh", tooltip="read the open requests again"),
    Binding("escape,w,q", "close", "close", tooltip="close"),
)  # fmt: skip


# The held screen's keys (pigeond_tui/held.py): the three releases, drop, refresh, close.
HELD_KEYS: Final[tuple[Binding, ...]] = (
    Binding("l", "release('reset')", "release",
            tooltip="deliver the highlighted message; its brake's count starts over"),
    Binding("plus", "release('raise')", "raise",
            tooltip="deliver it and raise its thread's limit by N (hops, or budget tokens)"),
    Binding("o", "release('once')", "once",
            tooltip="deliver only it; the next message past the limit is held again"),
    Binding("d", "drop", "drop",
            tooltip="cancel it (after a question); its sender is told a person dropped it"),
    Binding("r", "reread", "refresh", tooltip="read the held messages again"),
    Binding("escape,h,q", "close", "close", tooltip="close"),
)  # fmt: skip


# The threads screen's keys (pigeond_tui/threads.py): it only reads.
THREAD_KEYS: Final[tuple[Binding, ...]] = (
    Binding("r", "reread", "refresh", tooltip="read the threads again"),
    Binding("escape,t,q", "close", "close", tooltip="close"),
)


# The question for a number (pigeond_tui/screens.py NumberScreen): Enter takes it.
NUMBER_KEYS: Final[tuple[Binding, ...]] = (
    Binding("escape", "close", "cancel", tooltip="cancel, changing nothing"),
)


def row_action(key: str) -> tuple[str, Action] | None:
    """The row action (``one`` or ``target``) and operator action bound to ``key``, if any."""
    for binding in KEYS:
        if key in binding.key.split(","):
            name, _, argument = binding.action.partition("(")
            if name in ROW_ACTIONS:
                return name, ACTIONS[argument.strip("')")]
    return None


def help_keys(app: App[None]) -> list[tuple[str, str]]:
    """The help screen's lines: every binding, its key as the footer shows it."""
    return [(app.get_key_display(b), b.tooltip or b.description) for b in KEYS]


def key_line(app: App[None], bindings: tuple[Binding, ...]) -> str:
    """A small screen's keys on one line, each key as the footer shows it: ``esc/q close``."""
    return "  ".join(
        "/".join(app.get_key_display(dataclasses.replace(b, key=k)) for k in b.key.split(","))
        + f" {b.description}"
        for b in bindings
    )
