"""What an operator does to the queue, declared once for ``pigeon`` and ``pigeon-tui``.

Which database the tools open (a SQLite file or a ``postgresql://`` URL, whose
password is never shown), the per-target view of the queue, and the three actions
(requeue, retry-now, cancel): the states each starts from, its words, and how it is
applied to one message, a list of messages or a target, always through the
conditional writes of ``pigeond.storage.operator``.  A front end asks
:meth:`Action.applies_to` before it offers an action, so it never asks the
operator to confirm something the storage would refuse, and both tell the
outcome in the same words (:func:`outcome_line`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pigeond.config import SYSTEM_DB, default_db_path
from pigeond.credentials import PasswordFileError, read_password_file
from pigeond.db_url import (
    PasswordOnCommandLine,
    has_password,
    is_postgres_url,
    password_on_command_line,
    with_password,
    without_password,
)
from pigeond.storage import StorageError, SwarmRepository
from pigeond.storage.operator import (
    CANCEL_FROM,
    REQUEUE_FROM,
    RETRY_NOW_FROM,
    ActionOutcome,
    TargetQueue,
    open_existing,
)


class NoDatabase(ValueError):
    """No database the tools may open: none named, none of the user's and the service's
    closed to them; a password on the command line; an unusable password file.  The text
    is one line saying so."""


def resolve_db(
    given: str | None,
    env: Mapping[str, str],
    *,
    system_db: str = SYSTEM_DB,
    password_file: str | None = None,
) -> str:
    """--db, else $PIGEOND_DB, else the system database when readable, else the user's;
    a PostgreSQL URL with the password of ``password_file`` (--db-password-file, else
    $PIGEOND_DB_PASSWORD_FILE) added in memory.

    NoDatabase when ``given`` (a command line's) carries a password, when the password
    file is unusable, or when the user's database is not there and the service's is, but
    only root (or pigeond) may read it."""
    try:
        password_on_command_line(given)
    except PasswordOnCommandLine as e:
        raise NoDatabase(str(e)) from None
    db = _named_db(given, env, system_db)
    named = password_file or env.get("PIGEOND_DB_PASSWORD_FILE", "")
    if not named or not is_postgres_url(db):
        return db
    if has_password(db):
        raise NoDatabase("the database URL carries a password and a password file names one too")
    try:
        return with_password(db, read_password_file(named))
    except PasswordFileError as e:
        raise NoDatabase(str(e)) from None


def _named_db(given: str | None, env: Mapping[str, str], system_db: str) -> str:
    """A path or a ``postgresql://`` URL, returned as given: only the system database and
    the user's, files, are looked for on disk."""
    if given:
        return given
    if env.get("PIGEOND_DB"):
        return env["PIGEOND_DB"]
    if os.path.isfile(system_db) and os.access(system_db, os.R_OK):
        return system_db
    own = default_db_path(env)
    if not os.path.lexists(own) and _closed(system_db):
        raise NoDatabase(
            f"the service's database is {system_db} and needs root (or sudo): run this with"
            f" sudo, or name a database with --db (you have none of your own at {own})"
        )
    return own


def _closed(path: str) -> bool:
    """``path`` is there but unreadable, or behind a folder the caller may not enter."""
    try:
        os.stat(path)
    except PermissionError:
        return True
    except OSError:
        return False
    return not os.access(path, os.R_OK)


@contextmanager
def repository(db: Path | str) -> Iterator[SwarmRepository]:
    """An existing database of the current schema (else SchemaError), closed afterwards.

    A storage error, opening or later, says nothing of the URL's password: the TUI
    shows such errors as they are."""
    try:
        repo = SwarmRepository(open_existing(db))
    except StorageError as e:
        hide_password(e, db)
        raise
    try:
        yield repo
    except StorageError as e:
        hide_password(e, db)
        raise
    finally:
        repo.close()


def hide_password(error: Exception, db: Path | str) -> None:
    """Take the password of ``db`` (a URL) out of ``error``'s text, in place: its type and
    its cause stay as they are."""
    error.args = tuple(without_password(a, db) if isinstance(a, str) else a for a in error.args)


def queued_per_target(repo: SwarmRepository, now_ms: int) -> list[TargetQueue]:
    """Queued direct messages per target, with ``next_retry_at`` the time the target is
    really tried next: that of the head of its queue (priority, then accept order;
    expired messages skipped, None when only those are left).

    The storage's own ``next_retry_at`` is the earliest of *all* the target's queued
    messages.  After an outage only the batch handed off is held (``record_outage``),
    and messages sent meanwhile are due at once; but the arbiter hands off in queue
    order and a held head holds the messages behind it, so that earliest time said
    "now" for a target held for another 30 s.
    """
    return repo.queued_per_target(now_ms)


@dataclass(frozen=True, slots=True)
class Action:
    """One operator action: where it applies, its words, and its conditional writes."""

    name: str  # as the operator types it: ``pigeon NAME``, the TUI's notices
    from_states: tuple[str, ...]  # from pigeond.storage.operator: what the writes accept
    done: str  # "msg_… requeued"
    summary: str  # ``pigeon --help``
    one: Callable[[SwarmRepository, str, int, int | None], ActionOutcome]
    every_to: Callable[[SwarmRepository, str, int], list[str]]

    @property
    def wanted(self) -> str:
        """The states it starts from, in words: ``failed or expired``."""
        return " or ".join(self.from_states)

    def applies_to(self, state: str) -> bool:
        return state in self.from_states

    def apply_one(
        self, repo: SwarmRepository, msg_id: str, now_ms: int, seen_updated_at: int | None
    ) -> ActionOutcome:
        """Change one message if it is still in a state the action starts from and (when
        ``seen_updated_at`` is given) unchanged since the operator saw it."""
        return self.one(repo, msg_id, now_ms, seen_updated_at)

    def apply_many(
        self, repo: SwarmRepository, seen: Sequence[tuple[str, int]], now_ms: int
    ) -> Counter[ActionOutcome]:
        """:meth:`apply_one` for each ``(msg_id, updated_at)`` seen; how many ended each way."""
        return Counter(self.one(repo, msg_id, now_ms, at) for msg_id, at in seen)

    def apply_to_target(self, repo: SwarmRepository, target: str, now_ms: int) -> list[str]:
        """Every message to ``target`` in a state the action starts from; their ids."""
        return self.every_to(repo, target, now_ms)


REQUEUE: Final = Action(
    "requeue", REQUEUE_FROM, "requeued", "failed or expired → queued, due now, attempts reset",
    SwarmRepository.requeue, SwarmRepository.requeue_target,
)  # fmt: skip
RETRY_NOW: Final = Action(
    "retry-now", RETRY_NOW_FROM, "due now", "make queued messages due now",
    SwarmRepository.retry_now, SwarmRepository.retry_now_target,
)  # fmt: skip
CANCEL: Final = Action(
    "cancel", CANCEL_FROM, "cancelled", "queued → cancelled (never delivered, no notice)",
    SwarmRepository.cancel, SwarmRepository.cancel_target,
)  # fmt: skip
ACTIONS: Final[Mapping[str, Action]] = {a.name: a for a in (REQUEUE, RETRY_NOW, CANCEL)}


def outcome_line(action: Action, msg_id: str, outcome: ActionOutcome, state: str | None) -> str:
    """What became of one message: ``msg_… requeued``, or the action, the id and why not.

    ``state`` is the message's state as last read (for a wrong-state refusal).  Raw
    text: the caller escapes it for the terminal.
    """
    if outcome is ActionOutcome.CHANGED:
        return f"{msg_id} {action.done}"
    if outcome is ActionOutcome.WRONG_STATE:
        return f"{action.name}: {msg_id} {refusal(action, state)}"
    if outcome is ActionOutcome.STALE:
        return f"{action.name}: {msg_id} changed meanwhile, nothing done"
    return f"{action.name}: {msg_id} unknown message"


def refusal(action: Action, state: str | None) -> str:
    """Why ``action`` does not apply to a message in ``state``."""
    return f"is {state}, not {action.wanted}" if state else f"is not {action.wanted}"
