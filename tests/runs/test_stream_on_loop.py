"""A turn reads its model's stream on the process's event loop (``PROVIDER_STREAM_ON_LOOP``):
the same events, messages and endings as reading it on the turn's thread; a cancel stops a
model that sends nothing; text given on the delivery's own loop goes out with the loop's
shorter window. (A cancel mid-stream keeping its text: tests/runs/test_approvals.py; a broken
stream keeping its text: tests/providers/test_provider_errors.py — both now read on the loop.)"""

from __future__ import annotations

import asyncio
import threading

import pytest

from agents.events import RunEmitter
from agents.models import Run
from agents.services import run_cancel
from chat.models import Message
from chatplatform.loops import LoopStopped, publisher_loop, run_coroutine, run_on_loop
from tests.conftest import joined_text, make_thread, types
from tests.fakes.openai_server import text_chunks, tool_call_chunks, usage_chunk
from tests.providers.wire_helpers import tool_log  # noqa: F401 - fixture

# --- run_on_loop ----------------------------------------------------------------------------


def test_run_on_loop_returns_the_result_and_raises_the_error():
    async def double(n):
        await asyncio.sleep(0)
        return 2 * n

    assert run_on_loop(lambda: double(21), poll_s=0.05, stop=lambda: None) == 42

    async def fails():
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        run_on_loop(fails, poll_s=0.05, stop=lambda: None)


def test_a_stop_cancels_a_task_that_waits_forever_and_is_raised_after_its_finally():
    finished = []
    asked = []

    async def silent():
        try:
            await asyncio.Event().wait()  # an upstream that never sends
        finally:
            await asyncio.sleep(0.05)  # closing the connection takes a moment
            finished.append(True)

    class Cancelled(Exception):
        pass

    def stop():
        asked.append(True)
        return Cancelled() if len(asked) >= 3 else None

    with pytest.raises(Cancelled):
        run_on_loop(silent, poll_s=0.02, stop=stop)
    assert finished == [True]  # the task's finally ran before run_on_loop raised
    assert len(asked) == 3  # asked at every poll until it said stop, then no more


def test_an_exception_raised_by_stop_is_raised_once_the_task_ended():
    class Lost(Exception):
        pass

    def stop():
        raise Lost("lease lost")

    with pytest.raises(Lost, match="lease lost"):
        run_on_loop(lambda: asyncio.Event().wait(), poll_s=0.02, stop=stop)


def test_a_loop_that_stops_meanwhile_is_reported():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    import chatplatform.loops as loops

    saved = loops._server_loop
    loops.bind_server_loop(loop)
    try:
        assert publisher_loop() is loop
        loop.call_later(0.1, loop.stop)
        with pytest.raises(LoopStopped):
            run_on_loop(lambda: asyncio.Event().wait(), poll_s=0.05, stop=lambda: None)
    finally:
        loops._server_loop = saved
        thread.join(2)
        left = asyncio.all_tasks(loop)  # the task the stopped loop never finished
        for task in left:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.close()


# --- the emitter's window on its own loop ------------------------------------------------------


@pytest.mark.django_db
def test_text_given_on_the_delivery_loop_uses_the_loop_window(settings):
    """With a 60 s window for turn threads and none on the loop, two deltas given on the loop
    go out as two events, while two given on a thread make one (the second waits)."""
    from tests.conftest import EventSink

    settings.EVENTS_COALESCE_WINDOW_S = 60.0
    settings.EVENTS_COALESCE_MAX_WINDOW_S = 60.0
    settings.EVENTS_COALESCE_LOOP_WINDOW_S = 0.0
    sink = EventSink("t-loop-window")
    on_loop = RunEmitter(run_id="r-loop", thread_id="t-loop-window", max_chars=10_000)
    on_thread = RunEmitter(run_id="r-thread", thread_id="t-loop-window", max_chars=10_000)

    async def give(emitter, *deltas):
        for delta in deltas:
            emitter.text(delta)

    run_coroutine(give(on_loop, "a", "b"))
    on_thread.text("c")
    on_thread.text("d")  # within the thread window: waits
    events = [run_coroutine(asyncio.wait_for(sink.layer.receive(sink.channel), 5))["event"] for _ in range(3)]
    by_run = {run: [e["delta"] for e in events if e["run_id"] == run] for run in ("r-loop", "r-thread")}
    assert by_run == {"r-loop": ["a", "b"], "r-thread": ["c"]}
    on_thread.close()  # flushes "d"
    on_loop.close()
    sink.close()


# --- whole turns ----------------------------------------------------------------------------


def _turn_record(run, events, thread):
    messages = [(m.role, m.status, m.content, m.reasoning, [(c["name"], c["arguments"]) for c in m.tool_calls or []],
                 (m.usage or {}).get("output_tokens"))
                for m in Message.objects.filter(thread=thread).order_by("position")]
    # Both deliver every token; how many share an event is the window's (5 ms on the loop).
    kinds = [t for n, t in enumerate(types(events)) if t != "text.delta" or types(events)[n - 1] != "text.delta"]
    return run.status, kinds, joined_text(events), messages


@pytest.mark.django_db(transaction=True)
def test_a_turn_read_on_the_loop_ends_as_one_read_on_its_thread(alice_thread, users, fake_openai, tool_log,  # noqa: F811
                                                                  converse, settings):
    """Text with think tags and a NUL, a tool call, usage; then the answer: the same events,
    messages, tool executions and usage both ways."""
    records = []
    for on_loop in (True, False):
        settings.PROVIDER_STREAM_ON_LOOP = on_loop
        fake_openai.script(
            [*text_chunks("<think>plan</think>Let me look\x00."),
             *tool_call_chunks([("call_a", "kb_search", '{"query": "x"}')]), usage_chunk(10, 4)],
            [*text_chunks("Found it.", pieces=3), usage_chunk(20, 3)],
        )
        thread = make_thread(users["alice"], alice_thread.workspace, alice_thread.provider)
        run, events = converse(thread, users["alice"], "look it up")
        records.append(_turn_record(run, events, thread))
    assert records[0] == records[1]
    status, event_types, text, messages = records[0]
    assert status == Run.Status.COMPLETED and event_types[-1] == "run.completed"
    assert text == "Let me look\ufffd.Found it."
    assert [m[:4] for m in messages if m[0] == "assistant"] == [
        ("assistant", "complete", "Let me look\ufffd.", "plan"), ("assistant", "complete", "Found it.", "")]
    assert [name for name, _args in tool_log] == ["kb_search", "kb_search"]


@pytest.mark.django_db(transaction=True)
def test_a_cancel_stops_a_model_that_sends_nothing(alice_thread, users, fake_openai, sink_for, settings):
    """The model answers its headers, then nothing for a minute: the cancel still ends the
    run now (the turn thread checks the flag while the loop waits), kept as cancelled."""
    settings.RUN_HEARTBEAT_S = 0.2
    settings.STREAM_PERSIST_INTERVAL_S = 0.2
    settings.PROVIDER_STREAM_POLL_S = 0.05
    fake_openai.first_token_delay_s = 60.0
    fake_openai.script(text_chunks("too late"))
    from agents.services import run_create

    sink = sink_for(alice_thread.pk)
    created = run_create(thread=alice_thread, user=users["alice"], content="hello?")
    assert sink.until_any(created.run.pk)["type"] == "run.started"
    run_cancel(run=Run.objects.get(pk=created.run.pk), user=users["alice"])
    events = sink.until_terminal(created.run.pk, timeout=20)  # the model would talk in 60 s
    assert events[-1]["type"] == "run.cancelled"
    assert "text.delta" not in types(events)
    last = Message.objects.filter(thread=alice_thread, role="assistant").order_by("-position").first()
    assert (last.status, last.content) == ("cancelled", "")
