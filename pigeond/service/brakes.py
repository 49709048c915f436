"""The conversation brakes as the daemon composes them (pigeond/brakes/), and where they
read a person's own prompts.

One place for the list, in the order a send is judged (the first hold wins): the hop
brake, then the pair brakes and the budget as they come.  Each takes a reload's settings
(``Daemon.reconfigurable``)."""

from __future__ import annotations

from pigeond.brakes import Brake, HopBrake, PersonPrompts
from pigeond.brakes.budget import BudgetBrake
from pigeond.brakes.pair import PairRateBrake, RepeatBrake
from pigeond.config import Config
from pigeond.delivery.opencode_client import OpencodeClient
from pigeond.delivery.opencode_v2_tool_calls import V2Messages
from pigeond.delivery.person_prompts import (
    ClaudePersonPrompts,
    OpencodePersonPrompts,
    PersonPromptsByRuntime,
)
from pigeond.delivery.registry import SessionDirectoryRegistry
from pigeond.service.members import MemberParts
from pigeond.storage.database import Database


def person_prompts(
    members: MemberParts,
    opencode: tuple[SessionDirectoryRegistry, OpencodeClient] | None,
    v2: V2Messages | None = None,
) -> PersonPrompts:
    """Each runtime's transcripts as its delivery reads them: opencode's (when delivery is
    on: ``opencode``, its directory registry and client, and ``v2``, the 2.x client on its
    URL) and Claude Code's; other sessions are unknown."""
    claude = members.claude.transcripts
    return PersonPromptsByRuntime(
        OpencodePersonPrompts(*opencode, v2) if opencode is not None else None,
        ClaudePersonPrompts(claude) if claude is not None else None,
    )


def conversation_brakes(db: Database, config: Config, prompts: PersonPrompts) -> tuple[Brake, ...]:
    """The brakes, in the order a send is judged."""
    return (
        HopBrake(db, config, prompts),
        PairRateBrake(db, config),
        RepeatBrake(db, config),
        BudgetBrake(db, config),
    )
