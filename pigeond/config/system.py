"""The system service's places, declared once: its config file, and what systemd gives
``pigeond.service`` besides it (``StateDirectory=``, ``RuntimeDirectory=`` and the
packaged unit's ``Environment=`` lines; a test holds them to systemd/pigeond.service).

A pigeond started by hand reads none of them: it is a user's daemon, with the user's
config file and database.  ``--check-config`` about the service's file takes its
defaults from :data:`SERVICE_ENVIRONMENT`; ``pigeon`` and ``pigeon-tui`` look for the
service's database (:data:`SYSTEM_DB`) when the user names none.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pigeond.config.options import default_db_path
from pigeond.credentials import SYSTEM_SOCKET

SYSTEM_CONFIG_FILE: Final = "/etc/pigeond/pigeond.toml"
SERVICE_ENVIRONMENT: Final[Mapping[str, str]] = {
    "STATE_DIRECTORY": "/var/lib/pigeond",
    # the folder of the socket clients look for
    "RUNTIME_DIRECTORY": str(Path(SYSTEM_SOCKET).parent),
    "PIGEOND_ALLOW_GROUP": "pigeond",
    "PIGEOND_ALLOW_UIDS": "0",
}
SYSTEM_DB: Final = default_db_path(SERVICE_ENVIRONMENT)
