"""A run's writer reserves seqs ahead in the database before it logs or publishes past them
(``Run.seq_reserved``), where the event log dies with its process (the event-loop delivery:
embedded mode). A writer that dies leaves its reservation, and the next one numbers above
anything a client can have seen; one that closes cleanly gives the rest back, so a decision or
a continuation numbers right after it. (The end-to-end check, killing the web process
mid-answer: ``tests/e2e/test_seq_continuity.py``, which also runs in services mode, where the
Redis event log outlives the worker and a new writer numbers after its last seq instead.)"""

from __future__ import annotations

import asyncio

import pytest

from agents.events import RunEmitter
from agents.models import Run
from chatplatform.loops import run_coroutine
from tests.conftest import EventSink, make_thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(users, workspaces, offline):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    return Run.objects.create(thread=thread, user=users["alice"], status=Run.Status.RUNNING)


def received(sink, n):
    return [run_coroutine(asyncio.wait_for(sink.layer.receive(sink.channel), 5))["event"] for _ in range(n)]


def test_a_writer_reserves_before_it_publishes_past_the_reservation(run, settings):
    settings.EVENTS_SEQ_RESERVE = 5
    sink = EventSink(run.thread_id)
    emitter = RunEmitter.for_run(run)
    assert Run.objects.get(pk=run.pk).seq_reserved == 5  # reserved before the first event
    for n in range(12):
        emitter.emit("tool.progress", tool_call_id="c1", label=f"step {n}", status="running")
    events = received(sink, 12)
    assert [e["seq"] for e in events] == list(range(1, 13))
    # every seq published was reserved first: 1–5, then 6–10, then 11–15
    assert Run.objects.get(pk=run.pk).seq_reserved == 15
    emitter.close()
    row = Run.objects.get(pk=run.pk)
    assert (row.last_event_seq, row.seq_reserved) == (12, 12)  # a clean close gives the rest back
    sink.close()


def test_the_next_writer_after_a_crash_numbers_above_the_reservation(run, settings):
    settings.EVENTS_SEQ_RESERVE = 50
    emitter = RunEmitter.for_run(run)
    for n in range(7):
        emitter.emit("tool.progress", tool_call_id="c1", label=f"step {n}", status="running")
    emitter._drain_all(5)  # published, never closed: the process died (the heartbeat saved seq 3)
    Run.objects.filter(pk=run.pk).update(last_event_seq=3, attempts=1)
    after_crash = RunEmitter.for_run(Run.objects.get(pk=run.pk))
    assert after_crash.seq == 50 and after_crash.seq > 7  # not 3: seqs 4–7 may be on a client's screen
    assert Run.objects.get(pk=run.pk).seq_reserved == 100
    after_crash.close()
    assert Run.objects.get(pk=run.pk).seq_reserved == 50


def test_a_clean_handover_leaves_no_gap(run, settings):
    """The run parks (the driver saves its seq and gives the reservation back); a decision's
    writer numbers right after, while the parked writer is still open."""
    settings.EVENTS_SEQ_RESERVE = 50
    sink = EventSink(run.thread_id)
    worker = RunEmitter.for_run(run)
    worker.emit("approval.requested", **approval_fields())
    worker.save_seq()
    decision = RunEmitter.for_run(Run.objects.get(pk=run.pk))
    event = decision.emit("approval.resolved", tool_call_id="c1", decision="approve", decided_by="alice")
    assert event["seq"] == 2
    decision.close()
    worker.close()  # nothing new: leaves the decision writer's numbers alone
    row = Run.objects.get(pk=run.pk)
    assert (row.last_event_seq, row.seq_reserved) == (2, 2)
    sink.close()


def approval_fields() -> dict:
    from agents.event_types import EVENT_TYPES

    return {name: None for name in EVENT_TYPES["approval.requested"].fields}
