"""Builders for the tests of permission requests (tests/test_permission*.py)."""

from __future__ import annotations

from typing import Any

from pigeond.storage.permissions import PermissionRequest

SESSION = "ses_waiting"
SENDER = "ses_sender"
DIRECTORY = "/work/projA"


def permission_request(
    request_id: str = "per_one", *, msg_id: str = "msg_handled", session: str = SESSION,
    asked_at: int = 1_000, command: str = "rm -rf build", directory: str = DIRECTORY,
) -> PermissionRequest:  # fmt: skip
    """An open bash request of ``session`` while it handles ``msg_id`` from SENDER."""
    return PermissionRequest(
        request_id, session, directory, "bash", (command,), ("rm *",), "call_1", msg_id,
        SENDER, asked_at,
    )  # fmt: skip


def asked_event(
    request_id: str = "per_one", session: str = SESSION, command: str = "rm -rf build",
    directory: str = DIRECTORY,
) -> dict[str, Any]:  # fmt: skip
    """``permission.asked`` as ``GET /global/event`` carries it (opencode 1.18.33)."""
    return {
        "directory": directory,
        "project": "global",
        "payload": {
            "id": "evt_1",
            "type": "permission.asked",
            "properties": {
                "id": request_id,
                "sessionID": session,
                "permission": "bash",
                "patterns": [command],
                "metadata": {"command": command},
                "always": ["rm *"],
                "tool": {"messageID": "msg_oc1", "callID": "call_1"},
            },
        },
    }


def replied_event(request_id: str = "per_one", session: str = SESSION) -> dict[str, Any]:
    """``permission.replied`` as ``GET /global/event`` carries it (note: ``requestID``)."""
    return {
        "directory": DIRECTORY,
        "project": "global",
        "payload": {
            "id": "evt_2",
            "type": "permission.replied",
            "properties": {"sessionID": session, "requestID": request_id, "reply": "once"},
        },
    }
