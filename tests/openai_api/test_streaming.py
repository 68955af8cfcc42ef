"""What a ``/v1`` stream sends for a run's events (``openai_api/streaming.py``), without I/O."""

import json

from openai_api import views
from openai_api.services import Outcome, Started
from openai_api.streaming import ANSWER_RESTARTED, EVENTS_MISSING, StreamedAnswer, failure_message


def delta(text: str) -> dict:
    return {"type": "text.delta", "delta": text}


def completed(status: str = "complete", message_id: str = "m") -> dict:
    return {"type": "message.completed", "message_id": message_id, "status": status}


def hole() -> dict:
    return {"type": "error", "code": "events_missing", "message": "gone", "from_seq": 3, "to_seq": 5}


def tokens(first: int, last: int) -> list[str]:
    return [f"t{n:05d} " for n in range(first, last)]


def feed(answer: StreamedAnswer, events: list[dict]) -> list[str]:
    """What the client is sent, chunk by chunk (empty results left out)."""
    out = []
    for event in events:
        text = answer.feed(event)
        if text:
            out.append(text)
    return out


def test_messages_of_a_tool_loop_are_sent_as_before():
    answer = StreamedAnswer()
    sent = feed(answer, [
        delta("Let me look."), completed(),
        {"type": "tool.started", "tool_call_id": "c1", "name": "search_knowledge", "arguments_summary": ""},
        completed(),  # a message with a tool call only: no text, no separator of its own
        delta("  Found "), delta("it."), completed(), {"type": "run.completed", "status": "completed"},
    ])
    answer.finish()
    assert sent == ["Let me look.", "\n\nFound ", "it."]
    assert answer.text == "Let me look.\n\nFound it." and answer.failed is None and not answer.hole


def test_a_lost_attempt_repeated_by_the_new_attempt_is_seamless():
    whole = tokens(0, 300)
    answer = StreamedAnswer()
    sent = feed(answer, [delta(t) for t in whole[:97]] + [completed("truncated", "a1")])
    assert "".join(sent) == "".join(whole[:97])
    resumed = feed(answer, [delta(t) for t in whole] + [completed("complete", "a2")])
    answer.finish()
    assert "".join(resumed) == "".join(whole[97:])  # the new attempt's start is held back
    assert answer.text == "".join(whole)  # each token once, in order
    assert answer.failed is None and answer.messages == ["".join(whole)]


def test_a_lost_attempt_after_an_earlier_message_keeps_the_separator():
    answer = StreamedAnswer()
    feed(answer, [delta("First."), completed(), delta("Second "), delta("half"), completed("truncated")])
    rest = feed(answer, [delta("Second "), delta("half and "), delta("more."), completed()])
    answer.finish()
    assert rest == [" and ", "more."]
    assert answer.text == "First.\n\nSecond half and more."


def test_a_new_attempt_that_diverges_is_reported():
    answer = StreamedAnswer()
    feed(answer, [delta("The answer is 4"), completed("truncated")])
    assert feed(answer, [delta("The answer "), delta("may be 5")]) == []
    assert answer.failed == ANSWER_RESTARTED
    assert feed(answer, [delta("more"), completed()]) == []  # nothing after the failure
    assert answer.text == "The answer is 4"


def test_a_new_attempt_that_completes_shorter_is_reported():
    answer = StreamedAnswer()
    feed(answer, [delta("Hello there, friend"), completed("truncated")])
    feed(answer, [delta("Hello there"), completed("complete")])
    assert answer.failed == ANSWER_RESTARTED


def test_a_new_attempt_with_tool_calls_only_is_reported():
    answer = StreamedAnswer()
    feed(answer, [delta("Half an answer"), completed("truncated"), completed("complete")])
    assert answer.failed == ANSWER_RESTARTED


def test_two_lost_attempts():
    whole = tokens(0, 50)
    answer = StreamedAnswer()
    sent = feed(answer, [delta(t) for t in whole[:30]] + [completed("truncated")])
    # the second attempt dies earlier than the first: still held back, the client has 30 tokens
    sent += feed(answer, [delta(t) for t in whole[:10]] + [completed("truncated")])
    assert answer.text == "".join(whole[:30])
    sent += feed(answer, [delta(t) for t in whole] + [completed()])
    answer.finish()
    assert sent == whole[:30] + whole[30:]
    assert answer.text == "".join(whole) and answer.failed is None


def test_a_second_lost_attempt_after_the_first_was_mended():
    whole = tokens(0, 50)
    answer = StreamedAnswer()
    feed(answer, [delta(t) for t in whole[:10]] + [completed("truncated")])
    feed(answer, [delta(t) for t in whole[:20]] + [completed("truncated")])  # got past the client: sent on
    feed(answer, [delta(t) for t in whole] + [completed()])
    answer.finish()
    assert answer.text == "".join(whole) and answer.failed is None


def test_a_truncation_that_ends_the_run_finishes_as_usual():
    answer = StreamedAnswer()
    sent = feed(answer, [delta("Cut off by the output lim"), completed("truncated"),
                         {"type": "run.completed", "status": "completed"}])
    answer.finish()
    assert sent == ["Cut off by the output lim"] and answer.failed is None
    assert not answer.hole and answer.boundary  # a note would follow after a blank line


def test_a_hole_is_made_good_from_the_stored_answer():
    stored = ["Let me check.", "\n  The result: " + "".join(tokens(0, 400))]
    answer = StreamedAnswer()
    sent = feed(answer, [delta("Let me check."), completed(), delta("\n  The result: ")]
                + [delta(t) for t in tokens(0, 77)] + [hole()]
                + [delta(t) for t in tokens(398, 400)] + [completed(), {"type": "run.completed", "status": "completed"}])
    assert answer.hole and "".join(sent).endswith("t00076 ")  # nothing after the hole
    answer.finish()
    sent.append(answer.reconcile(stored))
    assert answer.failed is None
    assert "".join(sent) == answer.text == "Let me check.\n\nThe result: " + "".join(tokens(0, 400))
    assert "".join(sent) == "\n\n".join(t.strip() for t in stored) + " "  # the stored answer's text


def test_a_hole_with_further_messages_sends_them_after_a_blank_line():
    answer = StreamedAnswer()
    feed(answer, [delta("Looking"), hole(), delta("ignored")])
    rest = answer.reconcile(["Looking it up.", "  Done: 42."])
    assert rest == " it up.\n\nDone: 42." and answer.text == "Looking it up.\n\nDone: 42."


def test_a_hole_over_a_lost_attempt_is_made_good_from_the_new_attempt():
    answer = StreamedAnswer()
    feed(answer, [delta("One two"), completed("truncated"), hole()])
    assert answer.reconcile(["One two three."]) == " three."
    assert answer.failed is None


def test_a_hole_that_does_not_reconcile_is_reported():
    answer = StreamedAnswer()
    feed(answer, [delta("The answer is 4"), hole()])
    assert answer.reconcile(["The answer is 5."]) == ""
    assert answer.failed == EVENTS_MISSING
    other = StreamedAnswer()
    feed(other, [delta("One."), completed(), delta("Two."), hole()])
    other.reconcile(["One."])  # the client has more messages than were stored
    assert other.failed == EVENTS_MISSING


def test_failure_messages_point_to_the_thread():
    restarted = failure_message(ANSWER_RESTARTED, "th-1")
    assert "worker" in restarted and "asked again" in restarted and "differs" in restarted and "th-1" in restarted
    missing = failure_message(EVENTS_MISSING, "th-1")
    assert "lost" in missing and "does not continue" in missing and "th-1" in missing


# --- the view's stream (openai_api.views._sse_chunks) with the run's events given ------------------------


def run_over(status: str = "completed") -> dict:
    return {"type": "run.completed", "status": status}


async def stream(monkeypatch, events: list[dict], *, texts: list[str]) -> tuple[list[str], list[dict]]:
    """``_sse``'s output for a run with ``events`` whose stored messages are ``texts``, and
    the answers it remembered."""

    async def run_events(run_id, thread_id, **options):
        for event in events:
            yield event

    remembered: list[dict] = []
    outcome = Outcome(status="completed", text="\n\n".join(t.strip() for t in texts), tool_calls=[],
                      finish_reason="stop", usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                      error={}, texts=texts)
    monkeypatch.setattr(views, "run_event_stream", run_events)
    monkeypatch.setattr(views, "completion_outcome", lambda **kw: outcome)
    monkeypatch.setattr(views, "conversation_remember", lambda **kw: remembered.append(kw["answer"]))
    started = Started(run_id="r1", thread_id="th-1", model_id="openai", created=1, messages=[])
    return [part async for part in views._sse_chunks(started, False)], remembered


def content(parts: list[str]) -> str:
    out = []
    for part in parts:
        body = part.removeprefix("data: ").strip()
        if part.startswith("data: {") and '"choices"' in body:
            out.extend(c["delta"].get("content") or "" for c in json.loads(body)["choices"])
    return "".join(out)


def errors(parts: list[str]) -> list[dict]:
    return [json.loads(p[6:])["error"] for p in parts if p.startswith('data: {"error"')]


async def test_the_stream_of_a_lost_attempt_sends_each_token_once(monkeypatch):
    whole = tokens(0, 300)
    events = ([delta(t) for t in whole[:97]] + [completed("truncated", "a1")]
              + [delta(t) for t in whole] + [completed("complete", "a2"), run_over()])
    parts, remembered = await stream(monkeypatch, events, texts=["".join(whole)])
    assert content(parts) == "".join(whole) and not errors(parts)
    assert parts[-1] == "data: [DONE]\n\n" and '"finish_reason":"stop"' in parts[-2]
    assert remembered == [{"role": "assistant", "content": "".join(whole), "tool_calls": []}]


async def test_the_stream_of_a_diverging_new_attempt_ends_with_answer_restarted(monkeypatch):
    events = [delta("The answer is 4"), completed("truncated"), delta("Let me think again"), completed(), run_over()]
    parts, remembered = await stream(monkeypatch, events, texts=["Let me think again"])
    assert content(parts) == "The answer is 4"
    [error] = errors(parts)
    assert error["code"] == "answer_restarted" and error["type"] == "api_error" and "th-1" in error["message"]
    assert parts[-1] == "data: [DONE]\n\n" and not any('"finish_reason":"stop"' in p for p in parts)
    assert remembered == []  # the client's text is not the thread's answer


async def test_the_stream_of_a_hole_is_made_good_from_the_stored_answer(monkeypatch):
    whole = tokens(0, 400)
    events = [delta(t) for t in whole[:77]] + [hole()] + [delta(t) for t in whole[398:]] + [completed(), run_over()]
    parts, remembered = await stream(monkeypatch, events, texts=["".join(whole)])
    assert content(parts) == "".join(whole) and not errors(parts)
    assert remembered[0]["content"] == "".join(whole)


async def test_the_stream_of_a_hole_that_does_not_reconcile_ends_with_events_missing(monkeypatch):
    events = [delta("abc"), hole(), delta("xyz"), completed(), run_over()]
    parts, remembered = await stream(monkeypatch, events, texts=["abd and more"])
    [error] = errors(parts)
    assert error["code"] == "events_missing" and "th-1" in error["message"]
    assert parts[-1] == "data: [DONE]\n\n" and remembered == []


async def test_the_stream_writes_keepalive_comments(monkeypatch):
    events = [{"type": "keepalive"}, delta("Hi"), {"type": "keepalive"}, completed(), run_over()]
    parts, _ = await stream(monkeypatch, events, texts=["Hi"])
    assert parts.count(": keep-alive\n\n") == 2 and content(parts) == "Hi"


def test_a_lost_attempt_whose_first_delta_was_only_whitespace():
    answer = StreamedAnswer()
    sent = feed(answer, [delta("One."), completed(), delta("\n"), delta(" Two"), completed("truncated")])
    sent += feed(answer, [delta("\n Two"), delta(" three."), completed()])
    answer.finish()
    assert sent == ["One.", "\n\n", " Two", " three."] and answer.failed is None  # the bytes as before


def test_a_hole_while_a_new_attempt_is_held_back_is_made_good_from_the_stored_answer():
    answer = StreamedAnswer()
    feed(answer, [delta("One two three"), completed("truncated"), delta("One"), hole()])
    answer.finish()
    assert answer.failed is None
    assert answer.reconcile(["One two three four."]) == " four."
    assert answer.text == "One two three four."
