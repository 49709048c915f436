"""The verdict on which API an opencode speaks (:mod:`pigeond.delivery.api_support`),
made of two answers: 1.x's ``GET /session/status``, then, only when that is missing,
``GET /api/health``."""

from __future__ import annotations

import json

from twisted.internet.defer import Deferred

from pigeond.delivery.api_support import ApiSupport, unsupported_text
from tests.http_helpers import result_of

URL = "http://127.0.0.1:4096"
V1 = (200, b"{}")
MISSING = (404, b"404 Not Found")
HEALTH_2X = (200, json.dumps({"healthy": True, "version": "2.3.0", "pid": 1}).encode())
HEALTH_NONE = (200, b"<!doctype html><html>")
Answer = tuple[int, bytes] | None


class Answers:
    """The two probes' answers, each the next of a list (None: no answer); what was asked."""

    def __init__(self, v1: list[Answer], health: list[Answer]) -> None:
        self.v1, self.health = v1, health
        self.asked: list[str] = []

    async def probe(self) -> Answer:
        self.asked.append("/session/status")
        return self.v1.pop(0)

    async def health_probe(self) -> Answer:
        self.asked.append("/api/health")
        return self.health.pop(0)


def verdict(api: ApiSupport) -> str | None:
    return result_of(Deferred.fromCoroutine(api.verdict()))


def test_a_1x_is_never_asked_its_health() -> None:
    """1.x's route answering as 1.x does is the whole verdict: no 2.x question."""
    answers = Answers([V1], [])
    api = ApiSupport(URL, answers.probe, answers.health_probe)
    assert (verdict(api), api.v2_version) == (None, None)
    assert answers.asked == ["/session/status"]


def test_a_2x_is_named_by_its_health() -> None:
    """1.x's route missing, then a 2.x health: the version, and no problem."""
    answers = Answers([MISSING], [HEALTH_2X])
    api = ApiSupport(URL, answers.probe, answers.health_probe)
    assert (verdict(api), api.v2_version) == (None, "2.3.0")
    assert answers.asked == ["/session/status", "/api/health"]


def test_neither_is_the_sentence() -> None:
    """1.x's route missing and no 2.x health: the unsupported sentence."""
    answers = Answers([MISSING], [HEALTH_NONE])
    api = ApiSupport(URL, answers.probe, answers.health_probe)
    assert (verdict(api), api.v2_version) == (unsupported_text(URL), None)


def test_a_health_without_an_answer_changes_nothing() -> None:
    """No answer (or a 401) to the health leaves the verdict as it was: a 2.x stays one."""
    answers = Answers([MISSING, MISSING, MISSING], [HEALTH_2X, None, (401, b"{}")])
    api = ApiSupport(URL, answers.probe, answers.health_probe)
    verdict(api)
    assert [verdict(api), verdict(api)] == [None, None]
    assert api.v2_version == "2.3.0"


def test_a_1x_answering_again_ends_a_2x_verdict() -> None:
    """A 2.x replaced by a 1.x: the next verdict is 1.x's, its health not asked."""
    answers = Answers([MISSING, V1], [HEALTH_2X])
    api = ApiSupport(URL, answers.probe, answers.health_probe)
    verdict(api)
    assert (verdict(api), api.v2_version) == (None, None)
    assert answers.asked == ["/session/status", "/api/health", "/session/status"]


def test_what_waits_for_a_2x_is_told_when_one_is_found() -> None:
    """A wait for a 2.x ends when a verdict finds one, not before (a 1.x found ends none);
    a wait begun while one is found ends at once."""
    answers = Answers([V1, MISSING], [HEALTH_2X])
    api = ApiSupport(URL, answers.probe, answers.health_probe)
    waiting = api.when_v2()
    verdict(api)
    assert not waiting.called
    verdict(api)
    assert (waiting.called, api.when_v2().called) == (True, True)
