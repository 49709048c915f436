"""Turn rows and their sums (pigeond/storage/costs.py), and the verifier's looks that record
them (pigeond/delivery/verifier.py), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from pigeond.costs import CostTotals, EndedTurn, TurnUsage
from pigeond.storage import SwarmRepository
from testkit.messages import assistant_entry, new_message
from tests.storage_helpers import seen_message
from tests.verifier_rig import Rig, verifier_rig

pytestmark = pytest.mark.both_backends

TURN_TIMEOUT_S = 600.0
USAGE = TurnUsage(input=100, output=20, reasoning=5, cache_read=50, cache_write=10, cost=0.25)


def turn(key: str, *msg_ids: str, usage: TurnUsage = USAGE) -> EndedTurn:
    return EndedTurn(key, msg_ids, usage)


def totals(turns: int, usage: TurnUsage = USAGE) -> CostTotals:
    """``turns`` turns of ``usage`` each."""
    return CostTotals(
        turns, turns * usage.input, turns * usage.output, turns * usage.reasoning,
        turns * usage.cache_read, turns * usage.cache_write,
        turns * (usage.cost or 0.0), 0 if usage.cost is not None else turns,
    )  # fmt: skip


# -- storage -------------------------------------------------------------------------


def test_a_turn_is_recorded_with_its_usage_and_messages(repo: SwarmRepository) -> None:
    """One row, linked to both hand-offs it consumed; the session's sum is that turn."""
    seen_message(repo, "msg_a", 1)
    seen_message(repo, "msg_b", 1)
    assert repo.record_turns("ses_target", [turn("u1", "msg_a", "msg_b")], 5) == [
        turn("u1", "msg_a", "msg_b")
    ]
    assert repo.session_costs() == {"ses_target": totals(1)}
    found = repo.turn_of("msg_b")
    assert found is not None and found[1] == totals(1)
    assert repo.turn_of("msg_a") == found


def test_a_turn_read_again_is_not_counted_again(repo: SwarmRepository) -> None:
    """The same turn recorded twice (a repeated look, a restart) is still one turn."""
    seen_message(repo, "msg_a", 1)
    repo.record_turns("ses_target", [turn("u1", "msg_a")], 5)
    assert repo.record_turns("ses_target", [turn("u1", "msg_a")], 9) == []
    assert repo.session_costs() == {"ses_target": totals(1)}


def test_a_hand_off_counts_in_one_turn_only(repo: SwarmRepository) -> None:
    """A msg_id already linked is not linked to another turn; a turn with nothing new is
    not recorded."""
    seen_message(repo, "msg_a", 1)
    repo.record_turns("ses_target", [turn("u1", "msg_a")], 5)
    assert repo.record_turns("ses_target", [turn("u2", "msg_a")], 6) == []
    assert repo.session_costs()["ses_target"].turns == 1


def test_a_hand_off_not_seen_leaves_no_turn(repo: SwarmRepository) -> None:
    """Handed off but never verified (it would be requeued): nothing is counted."""
    repo.accept(new_message("ses_target", msg_id="msg_unseen"), 1)
    repo.mark_handed_off("msg_unseen", 1, 60_000)
    assert repo.record_turns("ses_target", [turn("u1", "msg_unseen")], 5) == []
    assert repo.session_costs() == {}


def test_a_requeued_hand_off_leaves_no_turn(repo: SwarmRepository) -> None:
    """Back in the queue after its grace period: a turn naming it is not counted."""
    repo.accept(new_message("ses_target", msg_id="msg_lost"), 1)
    repo.mark_handed_off("msg_lost", 1, 2)
    assert repo.requeue_unverified("msg_lost", "never seen", 3, 3) == "queued"
    assert repo.record_turns("ses_target", [turn("u1", "msg_lost")], 5) == []
    assert repo.turn_of("msg_lost") is None


def test_a_turn_names_only_hand_offs_to_its_own_session(repo: SwarmRepository) -> None:
    """Another target's msg_id in a transcript (quoted, forged) is not this turn's."""
    seen_message(repo, "msg_other", 1, to="ses_other")
    assert repo.record_turns("ses_target", [turn("u1", "msg_other")], 5) == []


def test_an_unknown_cost_is_kept_apart_from_the_known(repo: SwarmRepository) -> None:
    """A Claude Code turn (cost None) adds its tokens, and counts as a turn of unknown cost."""
    seen_message(repo, "msg_a", 1)
    seen_message(repo, "msg_b", 1)
    unknown = TurnUsage(input=7, output=3, cost=None)
    repo.record_turns("ses_target", [turn("u1", "msg_a"), turn("u2", "msg_b", usage=unknown)], 5)
    assert repo.session_costs(["ses_target"]) == {
        "ses_target": CostTotals(2, 107, 23, 5, 50, 10, 0.25, cost_unknown_turns=1)
    }


def test_sessions_are_listed_newest_turn_first(repo: SwarmRepository) -> None:
    """Without a list of sessions: the sessions with the newest turns first, up to a limit."""
    for n, session in enumerate(["ses_old", "ses_new", "ses_mid"]):
        seen_message(repo, f"msg_{n}", 1, to=session)
    repo.record_turns("ses_old", [turn("u", "msg_0")], 10)
    repo.record_turns("ses_new", [turn("u", "msg_1")], 30)
    repo.record_turns("ses_mid", [turn("u", "msg_2")], 20)
    assert list(repo.session_costs()) == ["ses_new", "ses_mid", "ses_old"]
    assert list(repo.session_costs(limit=1)) == ["ses_new"]
    assert repo.session_costs(["ses_mid", "ses_none"]) == {"ses_mid": totals(1)}


# -- the verifier's looks ------------------------------------------------------------


@pytest.fixture
def rig(repo: SwarmRepository, clock: Clock) -> Rig:
    return verifier_rig(repo, clock, TURN_TIMEOUT_S)


def test_a_turn_is_recorded_when_it_ends(rig: Rig) -> None:
    """Seen while running (nothing counted), recorded with its steps' sum once it ended."""
    rig.prompt("u1", "msg_a")
    rig.reply(assistant_entry("a1", "u1", None, finish="tool-calls", tokens=(10, 5), cost=0.1))
    rig.check()
    assert rig.repo.session_costs() == {}
    rig.reply(assistant_entry("a2", "u1", "done", tokens=(12, 3), cost=0.2))
    rig.clock.advance(2)
    rig.check()
    costs = rig.repo.session_costs()["ses_target"]
    assert (costs.turns, costs.input, costs.output) == (1, 22, 8)
    assert costs.cost == pytest.approx(0.3)


def test_looks_after_the_answer_do_not_count_the_turn_again(rig: Rig) -> None:
    """A turn that ended without an answer is looked at again; it stays one turn."""
    rig.prompt("u1", "msg_a")
    rig.reply(assistant_entry("a1", "u1", None, tokens=(10, 0)))  # ended, no words
    for _ in range(3):
        rig.check()
        rig.clock.advance(2)
    assert rig.receipt("msg_a")[0] == "seen"
    assert rig.repo.session_costs()["ses_target"].turns == 1


def test_a_batch_is_one_turn(rig: Rig) -> None:
    """Three messages in one prompt, one reply: one turn, linked to all three."""
    rig.prompt("u1", "msg_a", "msg_b", "msg_c")
    rig.reply(assistant_entry("a1", "u1", tokens=(30, 3)))
    rig.check()
    assert rig.repo.session_costs()["ses_target"].turns == 1
    assert {rig.repo.turn_of(m) is not None for m in ("msg_a", "msg_b", "msg_c")} == {True}


def test_a_turn_longer_than_the_read_is_counted_whole(rig: Rig) -> None:
    """80 steps push the envelope out of the newest 50 read: the whole transcript is read
    once more for the turn's sum, and not again on later looks."""
    rig.prompt("u1", "msg_a")
    rig.check()  # seen
    steps = [assistant_entry(f"a{n}", "u1", None, finish="tool-calls", tokens=(10, 1))
             for n in range(80)]  # fmt: skip
    rig.reply(*steps, assistant_entry("a_last", "u1", None, tokens=(10, 1)))  # no words
    rig.clock.advance(2)
    rig.check()
    assert rig.transcripts.reads[1:] == [("ses_target", 50), ("ses_target", None)]
    assert rig.repo.session_costs()["ses_target"].tokens == 81 * 11
    rig.clock.advance(2)
    rig.check()
    assert rig.transcripts.reads[-1] == ("ses_target", 50)


# -- threads -------------------------------------------------------------------------


def test_a_thread_sums_the_turns_its_messages_caused(repo: SwarmRepository) -> None:
    """Turns in two sessions, each caused by a message of the thread; another thread's
    turn is not in it."""
    seen_message(repo, "msg_c", 1, to="ses_two", thread="thr_y")
    seen_message(repo, "msg_a", 2, to="ses_one", thread="thr_x")
    seen_message(repo, "msg_b", 2, to="ses_two", thread="thr_x")
    repo.record_turns("ses_two", [turn("u2", "msg_c")], 4)
    repo.record_turns("ses_one", [turn("u1", "msg_a")], 5)
    repo.record_turns("ses_two", [turn("u1", "msg_b")], 6)
    assert repo.thread_costs(["thr_x", "thr_y", "thr_none"]) == {
        "thr_x": totals(2),
        "thr_y": totals(1),
    }
    assert list(repo.thread_session_costs("thr_x").items()) == [
        ("ses_two", totals(1)),
        ("ses_one", totals(1)),
    ]
    seen_message(repo, "msg_d", 3, to="ses_two", thread="thr_quiet")  # no turn yet
    assert repo.recent_thread_costs() == {  # the latest send first, as threads are listed
        "thr_quiet": CostTotals(),
        "thr_x": totals(2),
        "thr_y": totals(1),
    }
    assert list(repo.recent_thread_costs()) == ["thr_quiet", "thr_x", "thr_y"]
    assert list(repo.recent_thread_costs(limit=2)) == ["thr_quiet", "thr_x"]


def test_a_turn_counts_once_per_thread_of_its_batch(repo: SwarmRepository) -> None:
    """Two messages of one thread and one of another in one turn: one turn in each."""
    for msg_id, thread in (("msg_a", "thr_x"), ("msg_b", "thr_x"), ("msg_c", "thr_y")):
        seen_message(repo, msg_id, 1, thread=thread)
    repo.record_turns("ses_target", [turn("u1", "msg_a", "msg_b", "msg_c")], 5)
    assert repo.thread_costs(["thr_x", "thr_y"]) == {"thr_x": totals(1), "thr_y": totals(1)}


def test_a_threads_usage_since_a_reset_leaves_the_older_turns_out(repo: SwarmRepository) -> None:
    """The budget brake's base: only turns recorded after the reset time count."""
    for n in range(3):
        seen_message(repo, f"msg_{n}", 1, thread="thr_x")
        repo.record_turns("ses_target", [turn(f"u{n}", f"msg_{n}")], 10 * (n + 1))
    assert repo.thread_costs_since("thr_x", 0) == totals(3)
    assert repo.thread_costs_since("thr_x", 20) == totals(1)
    assert repo.thread_costs_since("thr_none", 0) == CostTotals()


def test_thread_costs_take_many_threads_at_once(repo: SwarmRepository) -> None:
    """More thread ids than one IN list holds: every one is answered."""
    seen_message(repo, "msg_last", 1, thread="thr_1199")
    repo.record_turns("ses_target", [turn("u1", "msg_last")], 5)
    asked = [f"thr_{n}" for n in range(1200)]
    assert repo.thread_costs(asked) == {"thr_1199": totals(1)}


def test_pruning_takes_the_turns_older_than_the_messages_cutoff(repo: SwarmRepository) -> None:
    """Retention prunes turn costs with the messages: older turns and their links go."""
    seen_message(repo, "msg_old", 1)
    seen_message(repo, "msg_new", 1)
    repo.record_turns("ses_target", [turn("u1", "msg_old")], 5)
    repo.record_turns("ses_target", [turn("u2", "msg_new")], 20)
    repo.prune_batch(10, 100)
    assert repo.turn_of("msg_old") is None and repo.turn_of("msg_new") is not None
    assert repo.session_costs() == {"ses_target": totals(1)}
