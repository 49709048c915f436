"""Permission requests a session waits on while it handles a swarm message:
``swarm_permissions``.

opencode asks before a tool runs (``bash``, an edit, … as its config says) and waits for
an answer that nobody at the target's terminal may give while the target handles a swarm
message.  pigeond records such a request with the message and sender being handled, so
``pigeon permissions``, the TUI and the sender's ``swarm_status`` can say what the target
waits on, and the operator can answer it.  A row lives while the request is open: it is
removed once the request is answered (by pigeond or at the target's own terminal) or
found gone.  Times come in as unix milliseconds; nothing here reads a clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pigeond.storage.base import RepositoryBase, reads

PERMISSION_COLUMNS = (
    "request_id, session, directory, permission, patterns, always, call_id, msg_id,"
    " from_session, asked_at"
)
# The most open requests one listing returns (each is a session stuck in a turn: a
# handful at most in practice).
LIST_LIMIT = 500


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """One open request: opencode's fields, where it is held, and what is being handled."""

    request_id: str  # opencode's per_… id
    session: str  # the session that waits
    directory: str  # the opencode instance that holds it: the answer must name it
    permission: str  # bash, edit, external_directory, …
    patterns: tuple[str, ...]  # for bash, the command line
    always: tuple[str, ...]  # what "always" would approve
    call_id: str | None  # the model's tool call
    msg_id: str  # the swarm message the session is handling
    from_session: str  # its sender
    asked_at: int

    @property
    def subject(self) -> str:
        """What is asked for, as one line: ``bash `rm -rf build```."""
        what = " ".join(self.patterns)
        return f"{self.permission} `{what}`" if what else self.permission

    @property
    def waiting_on(self) -> str:
        """What a message's detail says its target waits on: ``bash `rm -rf build` (per_…)``."""
        return f"{self.subject} ({self.request_id})"

    def describe(self) -> str:
        """The line ``pigeon permissions`` and the log say (a terminal escapes it)."""
        return (
            f"{self.session} waits for permission: {self.subject},"
            f" while handling {self.msg_id} from {self.from_session}"
        )

    def view(self) -> dict[str, object]:
        return {
            "id": self.request_id,
            "session": self.session,
            "permission": self.permission,
            "patterns": list(self.patterns),
            "always": list(self.always),
            "msg_id": self.msg_id,
            "from": self.from_session,
            "asked_at": self.asked_at,
            "directory": self.directory,
        }


def _texts(raw: object) -> tuple[str, ...]:
    try:
        values = json.loads(str(raw))
    except ValueError:
        return ()
    return tuple(str(v) for v in values) if isinstance(values, list) else ()


def _request(row: tuple[object, ...]) -> PermissionRequest:
    rid, session, directory, permission, patterns, always, call_id, msg_id, sender, at = row
    return PermissionRequest(
        str(rid), str(session), str(directory), str(permission), _texts(patterns),
        _texts(always), None if call_id is None else str(call_id), str(msg_id), str(sender),
        int(str(at)),
    )  # fmt: skip


class Permissions(RepositoryBase):
    def record_permission(self, request: PermissionRequest) -> bool:
        """Record an open request; False when it was recorded already (an event seen again,
        or a poll finding what the event stream told): the first record stands."""
        with self._write() as conn:
            cursor = conn.execute(
                f"INSERT INTO swarm_permissions ({PERMISSION_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (request_id) DO NOTHING",
                (
                    request.request_id, request.session, request.directory, request.permission,
                    json.dumps(list(request.patterns)), json.dumps(list(request.always)),
                    request.call_id, request.msg_id, request.from_session, request.asked_at,
                ),
            )  # fmt: skip
            return cursor.rowcount == 1

    def close_permission(self, request_id: str) -> bool:
        """The request is no longer open (answered, or gone); False if it was not recorded."""
        with self._write() as conn:
            cursor = conn.execute(
                "DELETE FROM swarm_permissions WHERE request_id = ?", (request_id,)
            )
            return cursor.rowcount == 1

    @reads
    def open_permission(self, request_id: str) -> PermissionRequest | None:
        row = self._conn.execute(
            f"SELECT {PERMISSION_COLUMNS} FROM swarm_permissions WHERE request_id = ?",
            (request_id,),
        ).fetchone()
        return None if row is None else _request(row)

    @reads
    def open_permissions(self, limit: int = LIST_LIMIT) -> list[PermissionRequest]:
        """Every open request, oldest first."""
        rows = self._conn.execute(
            f"SELECT {PERMISSION_COLUMNS} FROM swarm_permissions"
            " ORDER BY asked_at, request_id LIMIT ?",
            (limit,),
        ).fetchall()
        return [_request(r) for r in rows]

    @reads
    def permission_waited_on(self, msg_id: str) -> PermissionRequest | None:
        """The oldest open request of the session handling ``msg_id``, if it waits on one."""
        row = self._conn.execute(
            f"SELECT {PERMISSION_COLUMNS} FROM swarm_permissions WHERE msg_id = ?"
            " ORDER BY asked_at, request_id LIMIT 1",
            (msg_id,),
        ).fetchone()
        return None if row is None else _request(row)

    @reads
    def handling(self, session: str, since_ms: int) -> list[tuple[str, str]]:
        """``(msg_id, sender)`` of the swarm messages ``session`` may be handling now:
        handed off to it since ``since_ms`` and not answered yet, newest hand-off first."""
        rows = self._conn.execute(
            "SELECT msg_id, from_session FROM swarm_messages"
            " WHERE to_session = ? AND state = 'handed_off' AND answered_at IS NULL"
            " AND handoff_seq IS NOT NULL AND handed_off_at >= ?"
            " ORDER BY handoff_seq DESC LIMIT 16",
            (session, since_ms),
        ).fetchall()
        return [(str(m), str(f)) for m, f in rows]
