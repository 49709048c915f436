"""What a reload (SIGHUP) changed, said in one log line.

The whole effective configuration is ``pigeond --check-config``'s to print; the journal
gets one line per reload: each option whose value differs from the running one
(``option: old -> new``), those that wait for a restart set apart, or
``reload: nothing changed``.  Values are shown as ``--check-config`` shows them
(:func:`~pigeond.config.options.shown_value`): a PostgreSQL URL's password and opencode's
password are never printed, only that they changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pigeond.config import OPTIONS, Config
from pigeond.config.options import shown_auth, shown_value

# The options a running daemon cannot change: they take effect at the next start.
RESTART_ONLY: Final = (
    "listen", "db", "db_password_file", "opencode_url", "opencode_password_file", "delivery",
    "log_format", "auth", "token_file", "runtime_socket",
)  # fmt: skip
# Applied at once, with a part that waits for the restart.
PARTLY_LIVE: Final = {
    "allow_group": "who may send changes now, the runtime socket file's group at restart",
}
OPENCODE_AUTH: Final = "opencode auth"


@dataclass(frozen=True, slots=True)
class Change:
    """One setting whose new value differs from the running one."""

    name: str
    old: str  # as shown (no secret)
    new: str
    needs_restart: bool
    note: str = ""

    def text(self) -> str:
        if self.old == self.new:  # only a hidden part (a password) differs
            shown = f"{self.name}: {self.new}, its password changed"
        else:
            shown = f"{self.name}: {self.old} -> {self.new}"
        return shown + (f" ({self.note})" if self.note else "")


def config_changes(running: Config, new: Config) -> list[Change]:
    """What applying ``new`` to a daemon running ``running`` would change, option by
    option in their declared order, then opencode's credentials."""
    changes = []
    for option in OPTIONS:
        old_value, new_value = getattr(running, option.name), getattr(new, option.name)
        if old_value != new_value:
            changes.append(
                Change(
                    option.name,
                    shown_value(option.name, old_value),
                    shown_value(option.name, new_value),
                    needs_restart=option.name in RESTART_ONLY,
                    note=PARTLY_LIVE.get(option.name, ""),
                )
            )
    if running.opencode_auth != new.opencode_auth:
        old_auth, new_auth = shown_auth(running.opencode_auth), shown_auth(new.opencode_auth)
        changes.append(Change(OPENCODE_AUTH, old_auth, new_auth, needs_restart=True))
    return changes


def needing_restart(changes: list[Change]) -> list[str]:
    """The names of the changes that wait for a restart, in part or whole."""
    return [c.name for c in changes if c.needs_restart or c.name in PARTLY_LIVE]


def reload_line(changes: list[Change]) -> tuple[bool, str]:
    """The reload's one log line, and whether it warns (something waits for a restart)."""
    if not changes:
        return False, "reload: nothing changed"
    live = [c.text() for c in changes if not c.needs_restart]
    later = [c.text() for c in changes if c.needs_restart]
    parts = []
    if live:
        parts.append("applied " + ", ".join(live))
    if later:
        parts.append("needs a restart, running as before until then: " + ", ".join(later))
    return bool(needing_restart(changes)), "reload: " + "; ".join(parts)
