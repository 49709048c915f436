"""opencode 2.x, wired: the 2.x client and runtime beside the 1.x ones, on one URL.

Built once per daemon with delivery on, from the 1.x client (whose exchange carries the
2.x calls: its deadline, its password, its view of outages) and its verdict on the server
(:mod:`pigeond.delivery.api_support`); what switches between the two dialects is
:mod:`pigeond.delivery.opencode_dialect`.
"""

from __future__ import annotations

from twisted.internet.interfaces import IReactorTime

from pigeond.config import Config
from pigeond.delivery.opencode_client import OpencodeClient
from pigeond.delivery.opencode_dialect import SwitchingDirectoryLookup, V2Exchange, V2Sessions
from pigeond.delivery.opencode_v2_client import OpencodeV2Client
from pigeond.delivery.opencode_v2_events import V2Events
from pigeond.delivery.opencode_v2_permissions import SwitchingPermissions, V2Permissions
from pigeond.delivery.opencode_v2_runtime import OpencodeV2Runtime


class OpencodeV2Parts:
    """The 2.x client and runtime on ``v1``'s URL, and the registry's lookup and the
    permission watch's calls that switch; in ``turn`` delivery a 2.x hand-off waits until
    the session is idle again (at most ``turn_timeout_s``), in ``call`` delivery it does
    not; the 2.x event stream's hints (:attr:`events`), in both."""

    def __init__(self, config: Config, v1: OpencodeClient, clock: IReactorTime) -> None:
        exchange = V2Exchange(v1.exchange_bytes, v1.api, v1.base_url)
        # its transcript reads past their deadline told to /health as the 1.x client's
        self.client = OpencodeV2Client(
            exchange,
            clock,
            config.handoff_timeout_s,
            reads=v1.transcript_reads,
            version=lambda: v1.api.v2_version,
        )
        self.lookup = SwitchingDirectoryLookup(v1, V2Sessions(exchange), v1.api)
        # the permission watch's calls, made of the 2.x once it is found to be one
        self.permissions = SwitchingPermissions(v1, V2Permissions(exchange), v1.api)
        self.turn_timeout_s = config.turn_timeout_s
        # GET /api/event, a hint of turn ends and permission requests (only while a 2.x)
        self.events = V2Events(v1, v1.api, clock, outages=v1.reachability)
        self.runtime = OpencodeV2Runtime(
            self.client, turn_timeout_s=self._wait_s if config.delivery == "turn" else None
        )

    def _wait_s(self) -> float:
        return self.turn_timeout_s

    def configure(self, config: Config) -> None:
        """A reload's deadlines, for the calls and waits from now on."""
        self.client.timeout_s = config.handoff_timeout_s
        self.turn_timeout_s = config.turn_timeout_s
