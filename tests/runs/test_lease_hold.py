"""A worker that cannot renew its lease — the database away for longer than the fence
(0.8 × ``RUN_LEASE_S``) — holds its run instead of giving it up (issue 18's trial: a 25 s
PostgreSQL outage in the middle of an answer fenced the worker at 8 s, the reaper handed the
run on once the database was back and the whole answer was asked of the model again). It
publishes nothing while it cannot renew (its events are held, in order), tells the reaper it
is alive, and goes on once a renewal succeeds; it drops what it held once the run is another's.
Marked ``db_backends``: SQLite + memory, and PostgreSQL + Redis (the event log, the channel
layer and the cache are Redis there)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import OperationalError
from django.utils import timezone

from agents.events import RunEmitter
from agents.models import Run
from agents.runs import lease as lease_module
from agents.runs import lifecycle
from agents.runs.lease import LeaseLost, RunLease, unrenewed_key
from agents.runs.reaper import reap_expired_runs
from agents.services import run_create
from chatplatform.event_log import event_log
from chatplatform.loops import run_coroutine
from tests.conftest import joined_text
from tests.scripted import Pause, says

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends, pytest.mark.usefixtures("fresh_cache")]


@pytest.fixture
def outage(monkeypatch):
    """While set, every lease heartbeat beat fails as with PostgreSQL stopped."""
    down = threading.Event()
    beat = lease_module._Heartbeat._beat

    def failing_beat(due):
        if down.is_set():
            raise OperationalError("connection failed: Connection refused")
        beat(due)

    monkeypatch.setattr(lease_module._Heartbeat, "_beat", staticmethod(failing_beat))
    return down


def test_a_worker_that_cannot_renew_holds_its_events_and_goes_on_once_it_can(
        short_leases, outage, scripted_model, thread, users, sink_for):
    scripted_model.script([*says("Before. "), Pause(1.5), *says("During. "), Pause(2.0), *says("After.")])
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=users["alice"], content="a long answer, please")
    run_id = created.run.pk
    first = [sink.until_any(run_id)]
    assert first[0]["type"] == "run.started"
    while joined_text(first) != "Before. ":  # all of it (its deltas may come apart or joined)
        first.append(sink.until_any(run_id))
        assert first[-1]["type"] == "text.delta", first

    outage.set()  # beats fail from now: the lease is not renewed, and expires after 1 s
    down_at = time.monotonic()
    reaped, alive = [], []

    def reaper():  # a reaper in another process, passing all the time (its database works)
        while time.monotonic() - down_at < 3.0:
            reaped.extend(reap_expired_runs())
            alive.append(cache.get(unrenewed_key(run_id)))
            time.sleep(0.1)

    passes = threading.Thread(target=reaper)
    passes.start()
    during = []
    with pytest.raises(TimeoutError):  # nothing is published while the worker cannot renew
        while True:
            during.append(sink.until_any(run_id, timeout=max(0.05, 3.0 - (time.monotonic() - down_at))))
    passes.join()
    assert during == []  # the model's "During. " came 1.5 s in, past the fence: held
    expired = Run.objects.get(pk=run_id)
    assert expired.lease_expires_at < timezone.now()  # the lease did expire meanwhile…
    assert reaped == []  # …and the reaper left the run to its worker, which said it is alive
    assert expired.lease_owner in alive

    outage.clear()  # the database is back: the next beat renews, the held events go out
    events = first + during + sink.until_terminal(run_id)
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.attempts) == (Run.Status.COMPLETED, 0)
    assert len(scripted_model.requests) == 1  # asked once
    assert joined_text(events) == "Before. During. After."
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    logged = run_coroutine(event_log().read(str(run_id)))
    assert [(e["seq"], e["type"]) for e in logged] == [(e["seq"], e["type"]) for e in events]
    answer = run.thread.messages.filter(role="assistant").get()
    assert (answer.status, answer.content) == ("complete", "Before. During. After.")


def test_the_reaper_hands_on_a_run_once_its_worker_stops_saying_it_is_alive(thread, users, settings):
    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=thread, user=users["alice"], content="anyone?")
    assert lifecycle.run_claim(run_id=created.run.pk, owner="w:1:1") is not None
    Run.objects.filter(pk=created.run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    lease = RunLease(run_id=created.run.pk, owner="w:1:1")
    lease_module.report_unrenewed([lease])
    assert cache.get(unrenewed_key(created.run.pk)) == "w:1:1"
    assert reap_expired_runs() == []
    assert Run.objects.get(pk=created.run.pk).status == Run.Status.RUNNING
    cache.delete(unrenewed_key(created.run.pk))  # its key expired: the worker died meanwhile
    assert reap_expired_runs() == [str(created.run.pk)]
    assert (Run.objects.get(pk=created.run.pk).status, Run.objects.get(pk=created.run.pk).attempts) == \
        (Run.Status.QUEUED, 1)


def test_held_events_go_out_numbered_in_order_or_not_at_all(thread, users, sink_for, settings):
    settings.RUN_EXECUTOR = "none"
    run = run_create(thread=thread, user=users["alice"], content="x").run
    sink = sink_for(thread.pk)
    emitter = RunEmitter(run_id=run.pk, thread_id=thread.pk, window_s=0)
    state = {"hold": False, "lost": False}
    emitter.hold = lambda: state["hold"]
    emitter.fence = lambda: state["lost"]
    emitter.emit("run.started", thread_id=str(thread.pk), user_message_id=None, assistant_message_id="m")
    state["hold"] = True
    for piece in ("one ", "two ", "three "):
        assert emitter.text(piece) is None
    held = emitter.emit("tool.progress", tool_call_id="c", label="working", status="running")
    emitter.text("four")
    assert held["seq"] is None and held["held"] and emitter.seq == 1
    state["hold"] = False  # renewed: the next flush sends what was held, merged and in order
    emitter.flush()
    emitter.emit("run.completed", status="completed", truncated=None)
    emitter.close(save_seq=False)
    events = sink.until_terminal(run.pk)
    assert [(e["seq"], e["type"]) for e in events] == [
        (1, "run.started"), (2, "text.delta"), (3, "tool.progress"), (4, "text.delta"), (5, "run.completed")]
    assert [e.get("delta") for e in events] == [None, "one two three ", None, "four", None]

    lost = RunEmitter(run_id=run.pk, thread_id=thread.pk, start_seq=5, window_s=0)
    state.update(hold=True, lost=False)
    lost.hold, lost.fence = emitter.hold, emitter.fence
    lost.text("never shown")
    state.update(hold=False, lost=True)  # another worker owns the run now: drop what was held
    lost.emit("run.completed", status="completed", truncated=None)
    lost.close(save_seq=False)
    assert lost.seq == 5 and lost.fenced_count == 2
    assert [e["seq"] for e in run_coroutine(event_log().read(str(run.pk)))] == [1, 2, 3, 4, 5]


def test_a_suspended_lease_waits_on_a_turn_thread_and_never_on_an_event_loop(settings):
    settings.RUN_LEASE_S = 1.0
    settings.RUN_LEASE_HOLD_S = 0.6
    lease = RunLease(run_id="r", owner="w")
    lease._renewed_at = time.monotonic() - 0.9  # past the fence (0.8 s), within the hold
    assert lease.suspended and not lease.lost

    async def on_loop():
        return lease.tick()

    assert asyncio.run(on_loop()) is False  # at once: the loop keeps reading the model
    renewer = threading.Timer(0.2, lambda: lease._renewed(time.monotonic()))
    renewer.start()
    assert lease.tick() is False  # waited for the renewal
    renewer.join()
    assert not lease.suspended

    lease._renewed_at = time.monotonic() - 0.9
    with pytest.raises(LeaseLost):  # nobody renews: given up after RUN_LEASE_HOLD_S
        lease.tick()
    assert lease.lost


def test_a_cancelled_run_past_the_fence_is_lost_not_held(settings):
    """A cancel stops the renewals on purpose: a worker that has not closed the run within the
    fence gives it up (the reaper closes it once the lease expires) instead of holding it."""
    settings.RUN_LEASE_S = 1.0
    lease = RunLease(run_id="r", owner="w")
    lease._cancelled.set()
    assert lease.tick() is True  # within the fence: the worker closes the cancel itself
    lease._renewed_at = time.monotonic() - 0.9
    assert not lease.suspended
    with pytest.raises(LeaseLost):
        lease.tick()
