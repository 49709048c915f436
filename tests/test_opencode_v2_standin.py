"""The opencode 2.x stand-in behaves as the 2.x protocol says (testkit/opencode_v2_standin.py)."""

from __future__ import annotations

from testkit.opencode_v2_standin import ROUTES
from testkit.polling import PATIENCE_S, wait_until
from tests.opencode_v2_calls import call, open_events, prompt, read_events, running, wait_idle


def test_every_route_requires_basic_auth_and_v1_routes_are_gone() -> None:
    """Without the password (or with a wrong one) every route is 401; 1.x routes are 404."""
    with running() as (url, session):
        for method, template, _ in ROUTES:
            path = template.format(sessionID=session.id, inboxID="msg_x", requestID="per_x")
            assert call(url, method, path, password=None)[0] == 401, (method, path)
            assert call(url, method, path, password="wrong")[0] == 401, (method, path)
        for method, path in [("GET", "/session"), ("GET", "/global/event"), ("GET", "/x")]:
            assert call(url, method, path)[0] == 404, path


def test_same_id_and_body_is_one_input_with_one_receipt() -> None:
    """Re-admitting an id with the same body answers the same receipt and runs one turn."""
    with running() as (url, session):
        first = prompt(url, session.id, "hello", id="msg_one")
        again = prompt(url, session.id, "hello", id="msg_one")
        wait_idle(url, session)
        assert again == first
        assert [turn.input_ids for turn in session.turns] == [("msg_one",)]


def test_same_id_with_another_body_is_a_conflict() -> None:
    """Another body under an admitted id is 409 ConflictError, and nothing more runs."""
    with running() as (url, session):
        prompt(url, session.id, "hello", id="msg_one")
        body = {"prompt": {"text": "other"}, "delivery": "queue", "id": "msg_one"}
        status, answer = call(url, "POST", f"/api/session/{session.id}/prompt", body)
        wait_idle(url, session)
        assert (status, answer["_tag"]) == (409, "ConflictError")
        assert [turn.input_ids for turn in session.turns] == [("msg_one",)]


def test_admission_requests_are_counted_per_id() -> None:
    """The stand-in counts every admission request per input id, retries included."""
    with running() as (url, session):
        for input_id in ("msg_a", "msg_a", "msg_b", "msg_a"):
            prompt(url, session.id, f"text of {input_id}", id=input_id)
        wait_idle(url, session)
        assert session.admission_requests == {"msg_a": 3, "msg_b": 1}
        assert sorted(session.admitted) == ["msg_a", "msg_b"]


def test_queued_inputs_run_one_turn_each_in_order() -> None:
    """Inputs queued while a turn runs each get a turn of their own, in admission order."""
    with running(step_s=0.3) as (url, session):
        for input_id in ("msg_1", "msg_2", "msg_3"):
            prompt(url, session.id, input_id, id=input_id)
        wait_idle(url, session)
        turns = [turn.input_ids for turn in session.turns]
        assert turns == [("msg_1",), ("msg_2",), ("msg_3",)]


def test_steers_merge_into_the_running_turn_ahead_of_the_queue() -> None:
    """Steers sent while a turn runs join it at its next step, before queued inputs."""
    with running(step_s=1.0) as (url, session):
        prompt(url, session.id, "first", id="msg_1")
        prompt(url, session.id, "queued", id="msg_2")
        prompt(url, session.id, "steer a", delivery="steer", id="msg_s1")
        prompt(url, session.id, "steer b", delivery="steer", id="msg_s2")
        wait_idle(url, session)
        turns = [turn.input_ids for turn in session.turns]
        assert turns == [("msg_1", "msg_s1", "msg_s2"), ("msg_2",)]
        assert session.turns[0].answer == "echo: first\necho: steer a\necho: steer b"


def test_transcript_has_the_user_message_and_the_turns_answer() -> None:
    """The transcript lists each input as a user message and each turn's assistant answer."""
    with running() as (url, session):
        prompt(url, session.id, "hello", id="msg_hello")
        wait_idle(url, session)
        status, answer = call(url, "GET", f"/api/session/{session.id}/message?order=asc")
        assert status == 200
        user, assistant = answer["data"]
        assert (user["type"], user["id"], user["text"]) == ("user", "msg_hello", "hello")
        assert assistant["type"] == "assistant"
        assert assistant["content"] == [
            {"type": "text", "id": assistant["content"][0]["id"], "text": "echo: hello"}
        ]


def test_synthetic_input_is_not_a_user_message() -> None:
    """``/synthetic`` admits input that shows in the transcript as ``synthetic``."""
    with running() as (url, session):
        body = {"text": "a note", "id": "msg_note", "delivery": "queue"}
        status, _ = call(url, "POST", f"/api/session/{session.id}/synthetic", body)
        wait_idle(url, session)
        assert status == 200
        assert [m["type"] for m in session.messages] == ["synthetic", "assistant"]


def test_active_lists_the_session_only_while_a_turn_runs() -> None:
    """``/api/session/active`` shows a running session and is empty once it is idle."""
    with running(step_s=0.5) as (url, session):
        prompt(url, session.id, "hello")
        assert call(url, "GET", "/api/session/active")[1] == {
            "data": {session.id: {"type": "running"}}
        }
        wait_idle(url, session)
        assert call(url, "GET", "/api/session/active")[1] == {"data": {}}


def test_a_held_turn_reads_its_input_and_ends_only_when_released() -> None:
    """Inside ``turns_held`` a turn starts (its input in the transcript, the session
    running) and does not end; it ends, answered, once the block is left."""
    with running() as (url, session):
        with session.turns_held():
            prompt(url, session.id, "held", id="msg_held")
            wait_until(lambda: session.messages, PATIENCE_S, "the turn reading its input")
            assert call(url, "GET", "/api/session/active")[1] == {
                "data": {session.id: {"type": "running"}}
            }
            assert [m["type"] for m in session.messages] == ["user"]
        wait_idle(url, session)
        assert [m["type"] for m in session.messages] == ["user", "assistant"]


def test_inbox_lists_cancels_and_promotes_pending_inputs() -> None:
    """Inputs admitted with resume false wait in the inbox; cancelling drops one, and
    promoting one to steer wakes the session."""
    with running() as (url, session):
        prompt(url, session.id, "dropped", id="msg_drop", resume=False)
        prompt(url, session.id, "kept", id="msg_keep", resume=False)
        inbox = f"/api/session/{session.id}/inbox"
        assert [i["id"] for i in call(url, "GET", inbox)[1]["data"]] == ["msg_drop", "msg_keep"]
        assert call(url, "DELETE", f"{inbox}/msg_drop")[0] == 204
        assert call(url, "PATCH", f"{inbox}/msg_keep", {"delivery": "steer"})[0] == 204
        wait_idle(url, session)
        assert [turn.input_ids for turn in session.turns] == [("msg_keep",)]
        assert call(url, "GET", inbox)[1] == {"data": []}


def test_event_stream_drops_a_slow_reader_and_replays_nothing() -> None:
    """A reader that does not keep up loses the stream (it ends early), and a new reader
    gets no earlier event."""
    with running(event_capacity=4) as (url, session):
        slow = open_events(url)
        sent = 300
        for number in range(sent):
            prompt(url, session.id, f"input {number}", resume=False)
        received = read_events(slow)
        assert len(received) < sent
        fresh = open_events(url)
        prompt(url, session.id, "after", id="msg_after", resume=False)
        first, second = read_events(fresh, count=2)
        assert first["type"] == "server.connected"
        assert second["data"]["messageID"] == "msg_after"


def test_a_scripted_model_answers_each_turn() -> None:
    """A turn's answer is the configured model's, given the texts that turn read."""
    with running(model=lambda texts: f"{len(texts)} read: {' + '.join(texts)}") as (url, s):
        prompt(url, s.id, "one")
        wait_idle(url, s)
        assert [turn.answer for turn in s.turns] == ["1 read: one"]


def test_flat_prompt_shape_takes_the_text_at_the_top_level() -> None:
    """With ``prompt_shape="flat"`` (the released protocol) the text is a top-level field,
    and the nested form is refused."""
    with running(prompt_shape="flat") as (url, session):
        path = f"/api/session/{session.id}/prompt"
        status, _ = call(url, "POST", path, {"text": "flat", "delivery": "queue"})
        refused, answer = call(url, "POST", path, {"prompt": {"text": "nested"}})
        wait_idle(url, session)
        assert status == 200
        assert (refused, answer["_tag"]) == (400, "InvalidRequestError")
        assert [m["text"] for m in session.transcript() if m["type"] == "user"] == ["flat"]


def test_a_session_is_created_where_asked_and_once_per_id() -> None:
    """``POST /api/session`` makes a session in the asked directory; its id again is it."""
    with running() as (url, _):
        body = {"id": "ses_mine", "location": {"directory": "/srv/project"}}
        first = call(url, "POST", "/api/session", body)
        again = call(url, "POST", "/api/session", {"id": "ses_mine"})
        fetched = call(url, "GET", "/api/session/ses_mine")
        assert first[0] == again[0] == fetched[0] == 200
        assert first[1] == again[1] == fetched[1]
        assert first[1]["data"]["location"] == {"directory": "/srv/project"}
