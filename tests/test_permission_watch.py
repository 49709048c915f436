"""The permission watch on a Clock: events recorded and closed, bounded polls of opencode's
pending lists, the operator's answer, and a restart that re-checks what stayed open."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pigeond.config import Config
from pigeond.delivery.failures import FailureKind
from pigeond.delivery.opencode_client import OpencodeError
from pigeond.delivery.permissions import DIRECTORIES_PER_POLL, PermissionWatch
from pigeond.model import PermissionAnswerOutcome
from pigeond.storage.database import InlineDatabase
from testkit.messages import assistant_entry, new_message, user_entry
from tests.http_helpers import result_of
from tests.permission_helpers import (
    DIRECTORY,
    SENDER,
    SESSION,
    asked_event,
    permission_request,
    replied_event,
)
from tests.storage_helpers import inline_database

VERIFY_S = 2.0


class FakePermissionApi:
    """opencode's permission routes, in memory: pending lists per directory, answers."""

    def __init__(self) -> None:
        self.pending: dict[str, list[dict[str, Any]]] = {}
        self.listed: list[str] = []  # directories asked, in order
        self.replies: list[tuple[str, str, str]] = []
        self.known = True  # whether a reply finds its request
        self.error: OpencodeError | None = None
        self.transcript: list[dict[str, Any]] | OpencodeError = []  # of SESSION

    async def pending_permissions(self, directory: str) -> list[dict[str, Any]]:
        self.listed.append(directory)
        return self.pending.get(directory, [])

    async def reply_permission(self, request_id: str, directory: str, reply: str) -> bool:
        if self.error is not None:
            raise self.error
        self.replies.append((request_id, directory, reply))
        return self.known

    async def messages(
        self, session_id: str, directory: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        if isinstance(self.transcript, OpencodeError):
            raise self.transcript
        return self.transcript


def listed(request_id: str = "per_one", session: str = SESSION) -> dict[str, Any]:
    """One entry of GET /permission: the asked event's properties."""
    props: dict[str, Any] = asked_event(request_id, session)["payload"]["properties"]
    return props


@pytest.fixture
def db(tmp_path: Path) -> InlineDatabase:
    return inline_database(tmp_path / "p.db")


@pytest.fixture
def api() -> FakePermissionApi:
    return FakePermissionApi()


async def _directory_of(session: str) -> str:
    return DIRECTORY


def make_watch(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock, idle: set[str] | None = None,
    connected: bool = True, down: Callable[[], bool] = lambda: False,
) -> PermissionWatch:  # fmt: skip
    config = Config(verify_interval_s=VERIFY_S, turn_timeout_s=600)
    idle = idle if idle is not None else set()
    return PermissionWatch(
        db, api, clock, config, directory_of=_directory_of, known_idle=idle.__contains__,
        stream_connected=lambda: connected, opencode_down=down,
    )  # fmt: skip


def hand_off(db: InlineDatabase, clock: Clock, msg_id: str = "msg_handled") -> None:
    """A message from SENDER handed off to SESSION now, its turn not over."""
    now = int(clock.seconds() * 1000)
    db.repo.accept(new_message(SESSION, msg_id=msg_id, sender=SENDER), now)
    db.repo.mark_handed_off(msg_id, now, now + 60_000)


def answered(watch: PermissionWatch, request_id: str, reply: str) -> tuple[Any, str]:
    """The watch's answer, which a Clock's test sees at once (nothing waits)."""
    return result_of(Deferred.fromCoroutine(watch.answer(request_id, reply)))


def open_ids(db: InlineDatabase) -> list[str]:
    return [r.request_id for r in db.repo.open_permissions()]


def test_an_ask_while_handling_a_message_is_recorded_with_it(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """permission.asked of a session handling msg_handled: recorded with it and its sender."""
    hand_off(db, clock)
    make_watch(db, api, clock).observe(asked_event())
    [request] = db.repo.open_permissions()
    assert (request.msg_id, request.from_session, request.directory) == (
        "msg_handled", SENDER, DIRECTORY,
    )  # fmt: skip
    assert request.describe() == (
        f"{SESSION} waits for permission: bash `rm -rf build`, while handling msg_handled"
        f" from {SENDER}"
    )


def test_an_ask_of_a_session_handling_no_message_is_not_recorded(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """Its person's own prompt asked: not pigeond's business."""
    make_watch(db, api, clock).observe(asked_event())
    assert open_ids(db) == []


def test_an_ask_before_its_hand_off_is_recorded_is_looked_at_again(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """The ask came before the hand-off's record: a verify interval later, it is recorded."""
    watch = make_watch(db, api, clock)
    watch.observe(asked_event())
    hand_off(db, clock)
    assert open_ids(db) == []
    clock.advance(VERIFY_S)
    assert open_ids(db) == ["per_one"]


def test_an_ask_answered_before_it_is_looked_at_again_stays_closed(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """Replied meanwhile (at the terminal): the second look records nothing."""
    watch = make_watch(db, api, clock)
    watch.observe(asked_event())
    hand_off(db, clock)
    watch.observe(replied_event())
    clock.advance(VERIFY_S)
    assert open_ids(db) == []


def test_closing_the_watch_cancels_a_second_look(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """At shutdown nothing is looked at again."""
    watch = make_watch(db, api, clock)
    watch.observe(asked_event())
    watch.close()
    assert clock.getDelayedCalls() == []


def test_the_newest_unanswered_hand_off_is_the_one_being_handled(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """Two unanswered hand-offs: the request is of the later one's turn."""
    hand_off(db, clock, "msg_first")
    clock.advance(1)
    hand_off(db, clock, "msg_second")
    make_watch(db, api, clock).observe(asked_event())
    assert [r.msg_id for r in db.repo.open_permissions()] == ["msg_second"]


def envelope(msg_id: str) -> str:
    """The opening of the envelope pigeond hands off for ``msg_id`` (what homes are found by)."""
    return f'<swarm_message v="1" kind="chat" from="{SENDER}" msg_id="{msg_id}">\nhi'


def test_an_ask_in_the_turn_that_consumed_the_message_is_recorded(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """The asking step's parent is the user message carrying the envelope: recorded."""
    hand_off(db, clock)
    api.transcript = [
        user_entry("msg_u1", envelope("msg_handled")),
        assistant_entry("msg_oc1", "msg_u1", None, finish=None, completed=False),
    ]
    make_watch(db, api, clock).observe(asked_event())
    assert [r.msg_id for r in db.repo.open_permissions()] == ["msg_handled"]


def test_an_ask_in_the_person_s_own_turn_after_a_swarm_turn_is_not_recorded(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """The swarm message's turn ended (unanswered); the person's next prompt asks: not ours."""
    hand_off(db, clock)
    api.transcript = [
        user_entry("msg_u1", envelope("msg_handled")),
        assistant_entry("msg_a1", "msg_u1", None, finish="stop"),
        user_entry("msg_u2", "please clean the build"),
        assistant_entry("msg_oc1", "msg_u2", None, finish=None, completed=False),
    ]
    make_watch(db, api, clock).observe(asked_event())
    assert open_ids(db) == []


def test_an_unreadable_transcript_leaves_the_newest_hand_off(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """opencode cannot show the transcript: the newest unanswered hand-off is taken."""
    hand_off(db, clock)
    api.transcript = OpencodeError("timeout", kind=FailureKind.ATTEMPT)
    make_watch(db, api, clock).observe(asked_event())
    assert [r.msg_id for r in db.repo.open_permissions()] == ["msg_handled"]


def test_a_reply_anywhere_closes_the_request(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """permission.replied (at the target's terminal, say) removes it from the list."""
    hand_off(db, clock)
    watch = make_watch(db, api, clock)
    watch.observe(asked_event())
    watch.observe(replied_event())
    assert open_ids(db) == []


def test_an_ask_of_an_idle_session_is_stale_and_not_recorded(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """A session known idle (its turn aborted) is not waiting: nothing to offer."""
    hand_off(db, clock)
    make_watch(db, api, clock, idle={SESSION}).observe(asked_event())
    assert open_ids(db) == []


def test_the_first_tick_records_an_ask_missed_while_away(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """At start, opencode's pending list of a handling session's directory is read."""
    hand_off(db, clock)
    api.pending[DIRECTORY] = [listed()]
    make_watch(db, api, clock).tick()
    assert open_ids(db) == ["per_one"] and api.listed == [DIRECTORY]


def test_a_poll_closes_a_request_opencode_no_longer_has(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """Answered while the stream was down (or opencode restarted): gone from the list."""
    hand_off(db, clock)
    watch = make_watch(db, api, clock)
    watch.observe(asked_event())
    clock.advance(1)
    watch.tick()
    assert open_ids(db) == []


def test_a_poll_keeps_a_request_opencode_still_lists(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """Still pending in opencode: still listed here."""
    hand_off(db, clock)
    api.pending[DIRECTORY] = [listed()]
    watch = make_watch(db, api, clock)
    watch.observe(asked_event())
    clock.advance(1)
    watch.tick()
    assert open_ids(db) == ["per_one"]


def test_polls_come_at_most_once_per_verify_interval(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """Ticks between two polls ask opencode nothing."""
    db.repo.record_permission(permission_request())
    api.pending[DIRECTORY] = [listed()]
    watch = make_watch(db, api, clock)
    watch.tick()
    clock.advance(VERIFY_S / 2)
    watch.tick()
    assert len(api.listed) == 1
    clock.advance(VERIFY_S / 2)
    watch.tick()
    assert len(api.listed) == 2


def test_no_poll_is_made_while_opencode_is_out(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """During an outage (probed elsewhere) ticks ask opencode nothing; once back, they poll."""
    db.repo.record_permission(permission_request())
    api.pending[DIRECTORY] = [listed()]
    down = [True]
    watch = make_watch(db, api, clock, connected=False, down=lambda: down[0])
    for _ in range(5):
        watch.tick()
        clock.advance(VERIFY_S)
    assert api.listed == []
    down[0] = False
    watch.tick()
    assert len(api.listed) == 1


def test_one_poll_asks_a_bounded_number_of_directories(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """Open requests in many instances: one poll asks DIRECTORIES_PER_POLL of them."""
    for n in range(DIRECTORIES_PER_POLL + 3):
        db.repo.record_permission(
            permission_request(f"per_{n}", session=f"ses_{n}", directory=f"/d/{n:02}")
        )
    make_watch(db, api, clock).tick()
    assert len(api.listed) == DIRECTORIES_PER_POLL


def test_with_the_stream_up_no_handling_session_is_polled_after_the_recheck(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """The stream tells asks; only the start's re-check looks at handling sessions."""
    hand_off(db, clock)
    watch = make_watch(db, api, clock)
    watch.tick()
    clock.advance(VERIFY_S)
    watch.tick()
    assert api.listed == [DIRECTORY]


def test_a_reconnected_stream_makes_the_next_poll_look_again(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """Events of the time the stream was down are lost: the next poll re-checks."""
    hand_off(db, clock)
    watch = make_watch(db, api, clock)
    watch.tick()
    watch.stream_state(True)
    api.pending[DIRECTORY] = [listed()]
    clock.advance(VERIFY_S)
    watch.tick()
    assert open_ids(db) == ["per_one"]


def test_an_answer_goes_to_the_instance_that_holds_the_request(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """once: opencode is told in the request's directory, and the request leaves the list."""
    db.repo.record_permission(permission_request())
    outcome, _ = answered(make_watch(db, api, clock), "per_one", "once")
    assert outcome is PermissionAnswerOutcome.ANSWERED
    assert api.replies == [("per_one", DIRECTORY, "once")] and open_ids(db) == []


def test_an_answer_to_a_request_opencode_lost_says_gone(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """opencode's 404 (answered at the terminal meanwhile): gone, and off the list."""
    db.repo.record_permission(permission_request())
    api.known = False
    outcome, line = answered(make_watch(db, api, clock), "per_one", "reject")
    assert outcome is PermissionAnswerOutcome.GONE and "no longer has per_one" in line
    assert open_ids(db) == []


def test_an_answer_to_an_unknown_request_changes_nothing(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """No open request by that id: unknown, and opencode is not asked."""
    outcome, _ = answered(make_watch(db, api, clock), "per_none", "once")
    assert outcome is PermissionAnswerOutcome.UNKNOWN and api.replies == []


def test_a_stale_request_is_never_answered(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """Its session idle (aborted): answering would still run the call on 1.18.33, so no."""
    db.repo.record_permission(permission_request())
    watch = make_watch(db, api, clock, idle={SESSION})
    outcome, _ = answered(watch, "per_one", "once")
    assert outcome is PermissionAnswerOutcome.TURN_ENDED
    assert api.replies == [] and open_ids(db) == []


def test_an_unreachable_opencode_keeps_the_request_open(
    db: InlineDatabase, api: FakePermissionApi, clock: Clock
) -> None:
    """No answer reached opencode: the request stays, to be answered again."""
    db.repo.record_permission(permission_request())
    api.error = OpencodeError("connection refused", kind=FailureKind.OUTAGE)
    outcome, _ = answered(make_watch(db, api, clock), "per_one", "once")
    assert outcome is PermissionAnswerOutcome.UNREACHABLE and open_ids(db) == ["per_one"]


def test_an_open_request_survives_a_restart_and_is_checked_again(
    tmp_path: Path, api: FakePermissionApi, clock: Clock
) -> None:
    """Recorded before a restart: still listed after it, until opencode's list says it went."""
    before = inline_database(tmp_path / "p.db")
    hand_off(before, clock)
    make_watch(before, api, clock).observe(asked_event())
    before.close()
    after = inline_database(tmp_path / "p.db")
    api.pending[DIRECTORY] = [listed()]
    watch = make_watch(after, api, clock)
    watch.tick()  # the start's re-check: still pending
    assert open_ids(after) == ["per_one"] and api.listed == [DIRECTORY]
    api.pending[DIRECTORY] = []  # answered at the terminal while nobody listened
    clock.advance(VERIFY_S)
    watch.tick()
    assert open_ids(after) == []
