"""The names and channels view (``c``): who holds which name, the channels with members,
and the members of the channel under the cursor.

Sessions address each other by session id, by a name they claimed, or by a channel they
joined; this view shows the operator the last two beside the queue.  It is a
modal screen over the main view, read like the owed view (pigeond_tui/owed.py): a worker
thread opens its own connection (:func:`read_addressing`), every ``interval`` seconds and
on ``r``, and moving the channel cursor reads that channel's members.

It only reads.  Names and memberships are written through the daemon (the sessions'
plugin, ``pigeon name set|release``, ``pigeon channel join|leave``), which checks what it
stores; but the database may have been written by another tool, so every cell is escaped
(``fill_table`` draws ``terminal.visible`` text, never markup), as in the main view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from pigeond.cli.actions import repository
from pigeond.cli.presentation import format_age
from pigeond.storage import StorageError
from pigeond.storage.channels import ChannelEntry, ChannelMember
from pigeond.storage.names import NameEntry
from pigeond.terminal import visible
from pigeond_tui.keys import ADDRESSING_KEYS, key_line
from pigeond_tui.widgets import fill_table

NAME_COLUMNS: Final = ("name", "session", "since", "last seen")
CHANNEL_COLUMNS: Final = ("channel", "members", "last message")
MEMBER_COLUMNS: Final = ("session", "name", "joined")
READ_ONLY: Final = (
    "Read-only: sessions join and leave channels with pigeon channel join|leave,"
    " names change with pigeon name set|release."
)


def ago(at_ms: int | None, now_ms: int) -> str:
    """A past time as the main view's ages are worded (``1m``), with ``ago``; ``-`` for none."""
    return "-" if at_ms is None else f"{format_age(now_ms - at_ms)} ago"


@dataclass(frozen=True, slots=True)
class Addressing:
    """One read: every held name, every channel with members, and one channel's members."""

    names: list[NameEntry]
    channels: list[ChannelEntry]
    channel: str | None  # whose members ``members`` are; None: no channel has members
    members: list[ChannelMember]


def read_addressing(path: Path | str, channel: str | None) -> Addressing:
    """Names, channels, and the members of ``channel``, or of the first channel when it
    has none left (or none was asked for)."""
    with repository(path) as repo:
        names = repo.names()
        channels = repo.channels()
        listed = [c.channel for c in channels]
        if channel not in listed:
            channel = listed[0] if listed else None
        members = [] if channel is None else repo.channel_members(channel)
    return Addressing(names, channels, channel, members)


class AddressingScreen(ModalScreen[None]):
    """Names on top; channels, and the highlighted channel's members, below."""

    BINDINGS: ClassVar[list[BindingType]] = list(ADDRESSING_KEYS)

    def __init__(self, db: Path | str, clock: Callable[[], int], interval: float = 1.0) -> None:
        super().__init__()
        self.db = db
        self.clock = clock
        self.interval = interval
        self.channel: str | None = None  # the channel whose members are asked for and shown

    def compose(self) -> ComposeResult:
        with Vertical(id="addressing"):
            yield Label("names and channels", id="addressing-title")
            yield Label("names", classes="panel-title")
            yield DataTable(id="names-table", cursor_type="row", zebra_stripes=True)
            with Horizontal(id="addressing-channels"):
                with Vertical(classes="panel"):
                    yield Label("channels", classes="panel-title")
                    yield DataTable(id="channels-table", cursor_type="row", zebra_stripes=True)
                with Vertical(classes="panel"):
                    yield Label("members", id="members-title", classes="panel-title")
                    yield DataTable(id="members-table", cursor_type="row", zebra_stripes=True)
            yield Label("", id="addressing-foot")
            keys = key_line(self.app, ADDRESSING_KEYS)
            yield Label(Text(f"{READ_ONLY}\n{keys}"), id="addressing-help")

    def on_mount(self) -> None:
        self.query_one("#channels-table", DataTable).focus()
        self.action_reread()
        self.set_interval(self.interval, self.action_reread)

    @work(thread=True, exclusive=True, group="addressing")
    def action_reread(self) -> None:
        try:
            found = read_addressing(self.db, self.channel)
        except StorageError as e:
            self.app.call_from_thread(self.show_error, str(e))
            return
        self.app.call_from_thread(self.show, found)

    def show(self, found: Addressing) -> None:
        self.channel, now = found.channel, self.clock()
        names = [
            (n.name, [n.name, n.session, ago(n.claimed_at, now), ago(n.last_seen_at, now)])
            for n in found.names
        ]
        fill_table(self.query_one("#names-table", DataTable), NAME_COLUMNS, names)
        channels = [
            (c.channel, [c.channel, str(c.members), ago(c.last_message_at, now)])
            for c in found.channels
        ]
        fill_table(self.query_one("#channels-table", DataTable), CHANNEL_COLUMNS, channels)
        title = "members" if found.channel is None else f"members of {found.channel}"
        self.query_one("#members-title", Label).update(Text(visible(title)))
        members = [
            (m.session, [m.session, "-" if m.name is None else m.name, ago(m.joined_at, now)])
            for m in found.members
        ]
        fill_table(self.query_one("#members-table", DataTable), MEMBER_COLUMNS, members)
        counts = f"{len(found.names)} name(s) held, {len(found.channels)} channel(s) with members"
        self.query_one("#addressing-foot", Label).update(counts)
        self.follow_cursor()

    def under_cursor(self) -> str | None:
        """The channel the channel table's cursor is on (None: the table is empty)."""
        table = self.query_one("#channels-table", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return None if key is None else str(key)

    @on(DataTable.RowHighlighted, "#channels-table")
    def follow_cursor(self) -> None:
        """Show the members of the channel under the cursor: read them when it moved to
        another one (a refresh keeps the cursor on its channel, so it reads nothing)."""
        under = self.under_cursor()
        if under is not None and under != self.channel:
            self.channel = under
            self.action_reread()

    def show_error(self, error: str) -> None:
        self.query_one("#addressing-foot", Label).update(Text(visible(f"read failed: {error}")))

    def action_close(self) -> None:
        self.dismiss(None)
