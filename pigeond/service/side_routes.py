"""The routes beside sending, reading and health, installed on the daemon's one API.

Each takes the database and the parts of delivery it answers about (None with delivery
off); :func:`install_side_routes` keeps their order in one place, as the OpenAPI
description lists them, so the composition root stays a list of layers.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime

from pigeond.api.agents import AgentRoutes
from pigeond.api.authority import SessionAuthority
from pigeond.api.channels import ChannelRoutes
from pigeond.api.costs import CostsRoute
from pigeond.api.metrics import MetricsRoute
from pigeond.api.names import NamesRoute
from pigeond.api.owed import OwedRoute
from pigeond.api.permissions import PermissionRoutes
from pigeond.api.policy import PolicyBook, PolicyRoutes
from pigeond.api.routes import SwarmRoutes
from pigeond.api.search import SearchRoute
from pigeond.api.threads import ThreadRoutes
from pigeond.api.web import JsonApi
from pigeond.config import Config
from pigeond.delivery.member_doors import MemberDoors
from pigeond.delivery.metrics import DeliveryMetrics
from pigeond.service.delivery_parts import DeliveryParts
from pigeond.service.members import MemberParts, NoDelivery
from pigeond.storage.database import Database


def install_side_routes(
    api: JsonApi,
    db: Database,
    reactor: IReactorTime,
    config: Config,
    *,
    routes: SwarmRoutes,
    metrics: DeliveryMetrics,
    policies: PolicyBook,
    delivery: DeliveryParts | None,
    members: MemberParts,
    kick: Callable[[str], None],
    authority: SessionAuthority,
) -> ChannelRoutes:
    """Install every side route on ``api``; returns the channel routes (a reload reaches
    them)."""
    MetricsRoute(db, reactor, metrics.registry, routes.delivery_health).install(api)
    OwedRoute(db).install(api)
    ThreadRoutes(db, reactor, on_released=kick).install(api)
    CostsRoute(db).install(api)
    PermissionRoutes(db, None if delivery is None else delivery.permissions).install(api)
    PolicyRoutes(db, policies, reactor, authority).install(api)
    SearchRoute(db, lambda: routes.inbox_max_bytes).install(api)
    liveness = None if delivery is None else delivery.liveness
    NamesRoute(db, reactor, liveness, authority).install(api)
    channels = ChannelRoutes(db, reactor, config, authority, liveness)
    channels.install(api)
    doors = (
        MemberDoors(
            reactor, members.slots, members.claude, members.paths, NoDelivery(), delivering=False
        )
        if delivery is None
        else delivery.doors
    )
    AgentRoutes(doors).install(api)
    return channels
