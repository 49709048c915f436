"""The delivery layers a config reload reaches into, as the composition root builds them
(pigeond/service/wiring.py) and the side routes read them (pigeond/service/side_routes.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from pigeond.delivery.member_doors import MemberDoors
from pigeond.delivery.opencode_client import OpencodeClient
from pigeond.delivery.permissions import PermissionWatch
from pigeond.delivery.registry import SessionDirectoryRegistry
from pigeond.delivery.routing import Routing
from pigeond.delivery.turns import TurnTracker
from pigeond.delivery.verifier import Verifier
from pigeond.service.members import MemberLiveness
from pigeond.service.opencode_v2 import OpencodeV2Parts
from pigeond.service.shared_db import SharedDatabaseParts


@dataclass
class DeliveryParts:
    """The layers a config reload reaches into."""

    client: OpencodeClient
    registry: SessionDirectoryRegistry
    verifier: Verifier
    turns: TurnTracker | None
    # on PostgreSQL, each drain's lock and the routes (None on a SQLite file)
    shared: SharedDatabaseParts | None
    # whether a session exists, asked of its own runtime (opencode, or the members)
    liveness: MemberLiveness
    # /swarm/agent/*: the members that ask for their messages (Claude Code, MCP-only)
    doors: MemberDoors
    # permission requests of sessions handling swarm messages (pigeond/delivery/permissions.py)
    permissions: PermissionWatch | None = None
    # the 2.x client and runtime on the same URL (pigeond/service/opencode_v2.py)
    v2: OpencodeV2Parts | None = None

    @property
    def routing(self) -> Routing | None:
        return None if self.shared is None else self.shared.routing
