"""Threads in storage (pigeond/storage/threads.py, migration 17): each accepted send is in
the thread the send path chose, and the thread's counters follow sends and hand-offs."""

from __future__ import annotations

import pytest

from pigeond.model import Hold
from pigeond.storage import SwarmRepository
from pigeond.storage.repository import Accept
from testkit.messages import new_message
from tests.fixed_time import NOW_MS

pytestmark = pytest.mark.both_backends
A, B = "ses_a", "ses_b"
THREAD = "thr_test"


def send(
    repo: SwarmRepository,
    *,
    sender: str = A,
    to: str = B,
    thread: str = THREAD,
    at: int = NOW_MS,
    hold: Hold | None = None,
    reply_to: str | None = None,
) -> str:
    """Accept one message from ``sender`` to ``to`` in ``thread``, as the send path does."""
    message = new_message(to, sender=sender, reply_to=reply_to)
    repo.accept_many([Accept(message, at, at + 60_000, thread_id=thread, brake_hold=hold)])
    return message.msg_id


def test_a_send_is_stored_in_its_thread(repo: SwarmRepository) -> None:
    """The accepted message names the thread it was accepted into."""
    msg_id = send(repo)
    assert repo.thread_of(msg_id) == THREAD
    stored = repo.get(msg_id)
    assert stored is not None and stored.thread_id == THREAD


def test_the_first_send_makes_the_thread(repo: SwarmRepository) -> None:
    """A thread's row starts with its first send: one message, one hop, reset at its start."""
    send(repo, at=NOW_MS)
    thread = repo.thread(THREAD)
    assert thread is not None
    assert (thread.created_at, thread.updated_at, thread.reset_at) == (NOW_MS, NOW_MS, NOW_MS)
    assert (thread.hops, thread.turns, thread.messages, thread.held) == (1, 0, 1, 0)
    assert thread.hop_limit is None


def test_agents_sends_count_hops(repo: SwarmRepository) -> None:
    """Each send from a session counts one hop, whichever way it goes."""
    for i in range(3):
        send(repo, sender=A, to=B, at=NOW_MS + i)
        send(repo, sender=B, to=A, at=NOW_MS + i)
    thread = repo.thread(THREAD)
    assert thread is not None and (thread.hops, thread.messages) == (6, 6)


def test_a_persons_send_resets_the_hops(repo: SwarmRepository) -> None:
    """A send whose sender is no session (a person's shell) starts the count over."""
    send(repo, sender=A)
    send(repo, sender=B, to=A)
    send(repo, sender="alice", to=A, at=NOW_MS + 5)
    thread = repo.thread(THREAD)
    assert thread is not None
    assert (thread.hops, thread.reset_at, thread.messages) == (0, NOW_MS + 5, 3)


def test_a_brake_held_send_is_no_hop(repo: SwarmRepository) -> None:
    """A send held for a person counts as a message of the thread, not as a hop."""
    send(repo)
    send(repo, hold=Hold("hops", "too many"))
    thread = repo.thread(THREAD)
    assert thread is not None and (thread.hops, thread.messages, thread.held) == (1, 2, 1)


def test_threads_are_listed_newest_first(repo: SwarmRepository) -> None:
    """The thread with the latest send comes first."""
    send(repo, thread="thr_old", at=NOW_MS)
    send(repo, thread="thr_new", at=NOW_MS + 10)
    send(repo, thread="thr_old", at=NOW_MS + 20)
    assert [t.thread_id for t in repo.threads()] == ["thr_old", "thr_new"]
    assert [t.thread_id for t in repo.threads(limit=1)] == ["thr_old"]


def test_a_hand_off_counts_one_turn_per_thread(repo: SwarmRepository) -> None:
    """One recorded prompt of two messages of a thread and one of another: a turn each."""
    first = send(repo, thread="thr_1")
    second = send(repo, thread="thr_1")
    other = send(repo, thread="thr_2")
    repo.mark_handed_off_many([first, second, other], NOW_MS + 1)
    turns = {t.thread_id: t.turns for t in repo.threads()}
    assert turns == {"thr_1": 1, "thr_2": 1}


def test_a_notice_carries_the_thread_of_its_message(repo: SwarmRepository) -> None:
    """The failure notice about a message is in that message's thread, and counts nowhere."""
    msg_id = send(repo)
    repo.fail_now([msg_id], "gone", NOW_MS + 1)
    [notice] = repo.ready_batch(A, NOW_MS + 1, 10)
    assert (notice.reply_to, notice.thread_id) == (msg_id, THREAD)
    thread = repo.thread(THREAD)
    assert thread is not None and (thread.hops, thread.messages) == (1, 1)


def test_channel_copies_carry_the_channel_messages_thread(repo: SwarmRepository) -> None:
    """Each member's copy of a channel message is in the channel message's thread."""
    repo.join_channel("team", B, NOW_MS, 10)
    repo.join_channel("team", "ses_c", NOW_MS, 10)
    message = new_message(None, channel="team", sender=A)
    repo.accept_many([Accept(message, NOW_MS, None, thread_id=THREAD)])
    copies = repo.fan_out_of(message.msg_id).deliveries
    assert len(copies) == 2 and {c.thread_id for c in copies} == {THREAD}


def test_a_thread_has_the_sessions_of_its_messages(repo: SwarmRepository) -> None:
    """A thread's sessions are the session ids among its senders and targets, newest first."""
    send(repo, sender=A, to=B)
    send(repo, sender="alice", to="ses_c")
    assert repo.thread_sessions(THREAD) == ["ses_c", A, B]


def test_a_persons_prompt_resets_a_thread_once(repo: SwarmRepository) -> None:
    """reset_thread zeroes the hops from a newer prompt; an older one changes nothing."""
    send(repo, at=NOW_MS)
    send(repo, at=NOW_MS + 1)
    assert repo.reset_thread(THREAD, NOW_MS + 5) is True
    assert repo.reset_thread(THREAD, NOW_MS + 5) is False
    send(repo, at=NOW_MS + 6)
    assert repo.reset_thread(THREAD, NOW_MS + 2) is False
    thread = repo.thread(THREAD)
    assert thread is not None and (thread.hops, thread.reset_at) == (1, NOW_MS + 5)


def test_an_unknown_thread_is_none(repo: SwarmRepository) -> None:
    """No row for a thread nothing was sent in, nor a thread for an unknown message."""
    assert repo.thread("thr_nothing") is None
    assert repo.thread_of("msg_nothing") is None


def test_a_thread_whose_messages_are_pruned_is_forgotten(repo: SwarmRepository) -> None:
    """Once pruning took every message of an old thread, prune_threads forgets it (and its
    budget's reset); a thread with a message left, or a recent one, stays."""
    gone = send(repo, sender="alice", thread="thr_gone", at=NOW_MS)  # no notice for alice
    send(repo, thread="thr_kept", at=NOW_MS)
    repo.fail_now([gone], "gone", NOW_MS)
    repo.set_brake_reset("budget:thr_gone", NOW_MS)
    day = 24 * 3600 * 1000
    repo.prune_batch(NOW_MS + day, 100)
    assert repo.prune_threads(NOW_MS + day, 100) == 1
    assert [t.thread_id for t in repo.threads()] == ["thr_kept"]
    assert repo.brake_reset_at("budget:thr_gone") is None
