"""The verifier's view of an in-memory opencode: a transcript source over a fake reader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pigeond.delivery.opencode_runtime import OpencodeTranscripts
from pigeond.delivery.opencode_transcript import TranscriptReader
from pigeond.delivery.runtime import TranscriptSource


class StaticRegistry:
    """Every session lives in /work/<its id>."""

    async def resolve(self, session_id: str) -> str:
        return "/work/" + session_id

    def invalidate(self, session_id: str) -> None:
        return None


def opencode_transcripts(
    reader: Any,
    *,
    on_transcript: Callable[[str, list[dict[str, Any]]], None] = lambda target, infos: None,
) -> Callable[[str], TranscriptSource | None]:
    """Every target's transcript read from ``reader`` (a fake opencode's ``messages``)."""
    source = OpencodeTranscripts(StaticRegistry(), _as_reader(reader), on_transcript=on_transcript)
    return lambda target: source


def _as_reader(reader: Any) -> TranscriptReader:
    return reader  # type: ignore[no-any-return]
