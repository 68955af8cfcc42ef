"""Runs survive slow models and lost broker messages, writers never fork a run's events,
and concurrent requests cannot break the one-active-run and per-user guarantees
(issue 17: durability and races). Marked ``db_backends``: they run on SQLite and again on
PostgreSQL + Redis (the event log and channel layer are Redis there)."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from agents.events import RunEmitter
from agents.models import Role, Run, ToolCall, ToolPolicy
from agents.runs import lifecycle
from agents.runs.executors import enqueue_run
from agents.runs.reaper import reap_expired_runs, reaper_pass_claim, run_earliest_deadline
from agents.services import run_cancel, run_create
from chat.models import Message
from chat.services import message_create
from chatplatform.event_log import event_log
from chatplatform.loops import run_coroutine
from tests.conftest import joined_text, make_thread, types
from tests.policy.tooltest import call, scoped_toolbox
from tests.scripted import Pause, calls, says

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_backends]


@pytest.fixture(autouse=True)
def fresh_rate_limits(fresh_cache):
    """Sends of other tests in this process must not count against these ones (nor these
    tests' many sends against the next ones)."""


def test_a_model_slower_than_the_lease_is_not_taken_for_a_dead_worker(short_leases, scripted_model, thread, users,
                                                                        sink_for):
    scripted_model.script([Pause(3.0), *says("Slow but sure.")])  # first token after 3 leases
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=users["alice"], content="think hard")
    reaped = []
    while not scripted_model.streams_done.acquire(timeout=0.2):
        reaped += reap_expired_runs()  # a reaper in another worker, looking all the time
    events = sink.until_terminal(created.run.pk)
    run = Run.objects.get(pk=created.run.pk)
    assert reaped == []
    assert (run.status, run.attempts) == (Run.Status.COMPLETED, 0)
    assert len(scripted_model.requests) == 1  # one upstream call, not two
    assert joined_text(events) == "Slow but sure."
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


def test_a_worker_that_lost_its_lease_stops_writing_at_once(short_leases, scripted_model, thread, users, sink_for):
    scripted_model.script([*says("Before. "), Pause(1.5), *says("After the takeover.")])
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=users["alice"], content="go")
    started = sink.until_any(created.run.pk)
    assert started["type"] == "run.started"
    # Another worker takes the run over while this one waits for the model.
    Run.objects.filter(pk=created.run.pk).update(lease_owner="usurper:1:1",
                                                 lease_expires_at=timezone.now() + timedelta(minutes=5))
    assert scripted_model.streams_done.acquire(timeout=30)
    time.sleep(0.5)  # let the stale worker reach its next check
    late = []
    with pytest.raises(TimeoutError):
        while True:
            late.append(sink.until_any(created.run.pk, timeout=1.0))
    assert "After" not in joined_text(late)  # not one piece of what came after the takeover
    assert not [e for e in late if e["type"] in ("message.completed", "run.completed")]
    run = Run.objects.get(pk=created.run.pk)
    assert (run.status, run.lease_owner) == (Run.Status.RUNNING, "usurper:1:1")  # untouched
    assistant = Message.objects.get(run=run, role="assistant")
    assert assistant.status == Message.Status.STREAMING and "After" not in assistant.content


def test_a_stale_writer_cannot_reuse_a_seq(users, workspaces, offline, sink_for, settings):
    settings.RUN_EXECUTOR = "none"
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    run = run_create(thread=thread, user=users["alice"], content="x").run
    sink = sink_for(thread.pk)
    old = RunEmitter(run_id=run.pk, thread_id=thread.pk, window_s=0)
    old.emit("run.started", thread_id=str(thread.pk), user_message_id=None, assistant_message_id="m")
    old.text("first ")
    old.close()
    new = RunEmitter(run_id=run.pk, thread_id=thread.pk, start_seq=old.seq, window_s=0)  # the new owner
    new.text("second")
    new.emit("run.completed", status="completed", truncated=None)
    new.close()
    old.text("stale")  # the old writer wakes up and tries seq 3 again
    old.close()
    events = sink.until_terminal(run.pk)
    assert [(e["seq"], e["type"]) for e in events] == [(1, "run.started"), (2, "text.delta"), (3, "text.delta"),
                                                       (4, "run.completed")]
    assert joined_text(events) == "first second"
    logged = run_coroutine(event_log().read(str(run.pk)))
    assert [e["seq"] for e in logged] == [1, 2, 3, 4] and "stale" not in str(logged)
    assert old.fenced_count == 1


def test_the_event_log_refuses_a_seq_that_is_not_new(db):
    log = event_log()
    run_id = str(uuid.uuid4())

    async def go():
        assert await log.append(run_id, {"type": "text.delta", "seq": 1, "delta": "a"})
        assert await log.append(run_id, {"type": "text.delta", "seq": 2, "delta": "b"})
        assert not await log.append(run_id, {"type": "text.delta", "seq": 2, "delta": "again"})
        assert not await log.append(run_id, {"type": "text.delta", "seq": 1, "delta": "older"})
        return [e["delta"] for e in await log.read(run_id)]

    assert run_coroutine(go()) == ["a", "b"]


# --- lost broker messages -------------------------------------------------------------------
def test_a_queued_run_whose_broker_message_was_lost_is_enqueued_again(thread, users, scripted_model, sink_for,
                                                                       settings):
    settings.RUN_EXECUTOR = "none"  # the message is lost: nothing picks the run up
    created = run_create(thread=thread, user=users["alice"], content="hello?")
    sink = sink_for(thread.pk)
    assert reap_expired_runs() == []  # not stale yet
    Run.objects.filter(pk=created.run.pk).update(queued_at=timezone.now() - timedelta(seconds=31))
    settings.RUN_EXECUTOR = "embedded"  # a worker is there again
    scripted_model.script(says("Here I am."))
    assert reap_expired_runs() == [str(created.run.pk)]
    events = sink.until_terminal(created.run.pk)
    run = Run.objects.get(pk=created.run.pk)
    assert (run.status, run.attempts, joined_text(events)) == (Run.Status.COMPLETED, 1, "Here I am.")


def test_a_run_no_worker_ever_takes_fails_visibly_and_frees_the_thread(thread, users, sink_for, settings):
    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=thread, user=users["alice"], content="anyone?")
    sink = sink_for(thread.pk)
    Run.objects.filter(pk=created.run.pk).update(attempts=settings.RUN_MAX_ATTEMPTS,
                                                 queued_at=timezone.now() - timedelta(seconds=31))
    assert reap_expired_runs() == [str(created.run.pk)]
    events = sink.until_terminal(created.run.pk)
    assert types(events) == ["run.failed"]
    assert events[0]["error"]["code"] == "not_started" and events[0]["retryable"] is True
    run = Run.objects.get(pk=created.run.pk)
    assert run.status == Run.Status.FAILED and run.last_event_seq == 1
    assert Message.objects.get(pk=created.user_message.pk).content == "anyone?"  # nothing lost
    # The failure stays visible after a reload (it used to vanish: only the question was left).
    shown = Message.objects.get(run=run, role="assistant")
    assert (shown.status, shown.content, shown.error) == ("error", "", events[0]["error"])
    assert shown.parent_id == created.user_message.pk
    run_create(thread=thread, user=users["alice"], content="again")  # the thread takes a new send


def test_a_run_waiting_for_a_busy_worker_is_not_taken_for_a_lost_message(thread, users, sink_for, settings,
                                                                           monkeypatch):
    """Every worker thread busy for minutes: the broker still holds the run's turn, so the
    reaper neither enqueues it again nor counts an attempt (a healthy, busy pool failed its
    waiting runs after about two minutes, "No worker picked this run up", and left a duplicate
    message per re-enqueue — found from a fresh clone). It fails visibly only after
    ``RUN_QUEUE_MAX_WAIT_S``, saying why. A run whose message is not in the broker lost it:
    enqueued again — also when the broker holds as many newer sends (a count of the backlog took
    those for it after a Redis restart, and the lost runs waited another deadline, served last)."""
    from agents.runs import executors

    settings.RUN_EXECUTOR = "none"
    settings.RUN_QUEUE_MAX_WAIT_S = 600.0
    created = run_create(thread=thread, user=users["alice"], content="busy?")
    sink = sink_for(thread.pk)
    enqueued = []
    monkeypatch.setattr("agents.runs.reaper.enqueue_run",
                        lambda run_id, requeued=False: enqueued.append((run_id, requeued)))
    in_broker = {str(created.run.pk)}  # the broker holds this run's turn
    monkeypatch.setattr(executors, "waiting_turns", lambda ids: {str(i) for i in ids} & in_broker)
    busy = make_thread(users["bob"], thread.workspace, thread.provider, grounded=False)
    holding = run_create(thread=busy, user=users["bob"], content="a long one")  # a worker holds it
    assert lifecycle.run_claim(run_id=holding.run.pk, owner="busy:1") is not None
    long_ago = timezone.now() - timedelta(seconds=31)
    Run.objects.filter(pk=created.run.pk).update(queued_at=long_ago, created_at=long_ago)
    assert reap_expired_runs() == []
    run = Run.objects.get(pk=created.run.pk)
    assert (run.status, run.attempts, enqueued) == (Run.Status.QUEUED, 0, [])
    assert run.queued_at > long_ago  # looked at again a deadline later, not every pass

    Run.objects.filter(pk=created.run.pk).update(queued_at=long_ago,
                                                 created_at=timezone.now() - timedelta(seconds=601))
    assert reap_expired_runs() == [str(created.run.pk)]
    events = sink.until_terminal(created.run.pk)
    assert events[-1]["error"] == {"code": "not_started", "message": "Every worker stayed busy for 10 minutes, so "
                                   "this run never started; try again, or ask an admin to add workers."}
    assert Message.objects.get(run=run, role="assistant").error == events[-1]["error"]

    lost = run_create(thread=thread, user=users["alice"], content="lost?")
    newer = run_create(thread=make_thread(users["alice"], thread.workspace, thread.provider, grounded=False),
                       user=users["alice"], content="sent after Redis came back")
    in_broker.clear()
    in_broker.add(str(newer.run.pk))  # one turn waits in the broker, but not the lost one's
    Run.objects.filter(pk=lost.run.pk).update(queued_at=long_ago)
    assert reap_expired_runs() == [str(lost.run.pk)]
    assert (Run.objects.get(pk=lost.run.pk).attempts, enqueued) == (1, [(lost.run.pk, True)])  # ahead of new sends

    # No worker working at all (none holds a lease): the broker keeps the message, but nobody
    # is busy — counted, to fail as never started (found from a fresh clone: with the worker
    # stopped the run waited ten minutes, "every worker stayed busy"), and not sent again (a
    # duplicate message per deadline piled up).
    assert lifecycle.run_finish(run=holding.run, status=Run.Status.COMPLETED)
    stranded = run_create(thread=busy, user=users["bob"], content="anyone at all?")
    in_broker.add(str(stranded.run.pk))
    Run.objects.filter(pk=stranded.run.pk).update(queued_at=long_ago)
    assert str(stranded.run.pk) in reap_expired_runs()
    assert Run.objects.get(pk=stranded.run.pk).attempts == 1 and enqueued == [(lost.run.pk, True)]


def test_a_started_run_no_worker_takes_up_again_fails_interrupted_and_keeps_its_partial_text(thread, users, sink_for,
                                                                                             settings):
    """Its worker died mid-answer, the reaper re-queued it, and no worker came back: it fails
    ``interrupted`` (not ``not_started``: it had started) and the half-streamed answer is
    closed ``truncated`` with its text, not left ``streaming`` for good."""
    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=thread, user=users["alice"], content="tell me everything")
    partial = Message.objects.create(thread=thread, run=created.run, position=created.user_message.position + 1,
                                     role="assistant", status="streaming", content="Here is half an ans")
    Run.objects.filter(pk=created.run.pk).update(attempts=settings.RUN_MAX_ATTEMPTS, last_event_seq=7,
                                                 started_at=timezone.now() - timedelta(seconds=100),
                                                 queued_at=timezone.now() - timedelta(seconds=31))
    sink = sink_for(thread.pk)
    assert reap_expired_runs() == [str(created.run.pk)]
    events = sink.until_terminal(created.run.pk)
    assert types(events) == ["message.completed", "run.failed"] and events[0]["seq"] == 8
    assert events[0]["message_id"] == str(partial.pk) and events[0]["status"] == "truncated"
    assert events[1]["error"]["code"] == "interrupted" and events[1]["retryable"] is True
    partial.refresh_from_db()
    assert (partial.status, partial.content) == ("truncated", "Here is half an ans")
    run = Run.objects.get(pk=created.run.pk)
    assert (run.status, run.error["code"]) == (Run.Status.FAILED, "interrupted")
    run_create(thread=thread, user=users["alice"], content="again")  # the thread takes a new send


def dead_worker_run(thread, user, settings, *, lease_in_s: float):
    """A run that a worker claimed and died in: its half answer ``streaming`` (as the
    heartbeat last saved it), a tool call of an earlier round still ``running``, the lease
    expiring ``lease_in_s`` from now, 7 events published."""
    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=thread, user=user, content="tell me everything")
    assert lifecycle.run_claim(run_id=created.run.pk, owner="dead:1") is not None
    asked = message_create(thread_id=thread.pk, run=created.run, role="assistant", status="complete",
                           tool_calls=[{"id": "c1", "name": "note_write", "arguments": "{}"}])
    ledger = ToolCall.objects.create(run=created.run, message=asked, call_id="c1", tool_name="note_write",
                                     risk="write", status=ToolCall.Status.RUNNING)
    partial = message_create(thread_id=thread.pk, run=created.run, role="assistant", status="streaming",
                             content="Here is half an ans")
    Run.objects.filter(pk=created.run.pk).update(
        last_event_seq=7, lease_expires_at=timezone.now() + timedelta(seconds=lease_in_s))
    return created.run, partial, ledger


def test_a_run_cancelled_after_its_worker_died_is_closed_by_the_reaper(thread, users, sink_for, settings):
    """Stop pressed while the run's worker was dead (found trying it from a fresh clone): the
    cancel is written, but no worker is there to close the run. Once its lease expires the
    reaper closes it as the worker would have: the half answer kept ``cancelled``, the call
    that was running ``status_unknown`` (never run again), ``run.cancelled`` published, the
    run finished, and the thread takes a new message."""
    run, partial, ledger = dead_worker_run(thread, users["alice"], settings, lease_in_s=5)
    # The dead worker had published two events past the seq its last renewal saved, and the
    # page showed their text: the half answer keeps it (it kept the last save only).
    for seq, delta in ((7, "Here is half an ans"), (8, "wer"), (9, ", as shown")):
        assert run_coroutine(event_log().append(str(run.pk), {"type": "text.delta", "run_id": str(run.pk), "seq": seq,
                                                               "delta": delta}))
    assert run_cancel(run=run, user=users["alice"]).status == "cancelled"
    sink = sink_for(thread.pk)
    assert reap_expired_runs() == []  # the lease has not expired: a live worker may still close it
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reap_expired_runs() == [str(run.pk)]
    assert reap_expired_runs() == []  # once
    events = sink.until_terminal(run.pk)
    events = [e for e in events if e["seq"] > 9]  # a sink replays the log's earlier events
    assert types(events) == ["tool.completed", "message.completed", "run.cancelled"] and events[0]["seq"] == 10
    assert (events[1]["message_id"], events[1]["status"]) == (str(partial.pk), "cancelled")
    partial.refresh_from_db()
    assert (partial.status, partial.content) == ("cancelled", "Here is half an answer, as shown")
    ledger.refresh_from_db()
    assert ledger.status == ToolCall.Status.STATUS_UNKNOWN
    result = Message.objects.get(run=run, role="tool", tool_call_id="c1")
    assert result.is_error and result.content.startswith("Outcome unknown")
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at is not None and (run.lease_owner, run.lease_expires_at) == \
        ("", None)
    assert run.last_event_seq == 12
    run_create(thread=thread, user=users["alice"], content="again")  # the thread takes a new send


def test_an_unclosed_cancel_brings_the_reapers_next_pass_forward(thread, users, settings):
    run, _partial, _ledger = dead_worker_run(thread, users["alice"], settings, lease_in_s=7)
    lease = Run.objects.get(pk=run.pk).lease_expires_at
    assert run_earliest_deadline() == lease
    run_cancel(run=run, user=users["alice"])
    assert run_earliest_deadline() == lease  # no longer running, still the reaper's


def test_a_run_cancelled_while_it_waits_for_a_worker_says_so_in_the_thread(thread, users, sink_for, settings):
    """Stop on a run no worker took up yet: ``run.cancelled`` at once, and the turn shows
    "cancelled" after a reload too (it showed the question with nothing under it — found from
    a fresh clone); the thread takes the next message."""
    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=thread, user=users["alice"], content="never mind")
    sink = sink_for(thread.pk)
    run_cancel(run=created.run, user=users["alice"])
    assert types(sink.until_terminal(created.run.pk)) == ["run.cancelled"]
    shown = Message.objects.get(run=created.run, role="assistant")
    assert (shown.status, shown.content, shown.parent_id) == ("cancelled", "", created.user_message.pk)
    run_create(thread=thread, user=users["alice"], content="and now?")


def test_cancelling_a_run_requeued_after_its_worker_died_closes_what_the_worker_left(thread, users, sink_for,
                                                                                     settings):
    """The worker died, the reaper re-queued the run and Stop came before another worker took
    it: the cancel ends it at once and also closes the lost round (it used to leave the half
    answer ``streaming``, and the page showed "writing…" for good)."""
    run, partial, ledger = dead_worker_run(thread, users["alice"], settings, lease_in_s=-1)
    assert reap_expired_runs() == [str(run.pk)]  # re-queued (RUN_EXECUTOR none: nobody takes it)
    sink = sink_for(thread.pk)
    run_cancel(run=Run.objects.get(pk=run.pk), user=users["alice"])
    events = sink.until_terminal(run.pk)
    assert types(events) == ["tool.completed", "message.completed", "run.cancelled"]
    partial.refresh_from_db()
    ledger.refresh_from_db()
    assert (partial.status, ledger.status) == ("cancelled", ToolCall.Status.STATUS_UNKNOWN)
    assert not Message.objects.filter(thread=thread, status="streaming").exists()
    # Its lost attempt wrote text: the run does not say "Not executed" (its open calls do).
    assert Run.objects.get(pk=run.pk).error == {"code": "cancelled", "message": "Cancelled by the user."}


def recover_lost_worker(thread, user, scripted_model, sink_for, settings, *, question: str, half_answer: str,
                        answer: str, last_event_seq: int, logged: list[dict] | None = None):
    """A run whose worker died while streaming ``half_answer`` (its message still
    ``streaming``, the branch's leaf, ``last_event_seq`` events published — ``logged``, when
    given, are the lost worker's events as its event log holds them) is claimed again
    and the model answers ``answer``. Returns (created, the half answer's message, the
    thread's sink, the recovered attempt's events up to the terminal one)."""
    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=thread, user=user, content=question)
    partial = message_create(thread_id=thread.pk, run=created.run, role="assistant", status="streaming",
                             content=half_answer)
    for event in logged or ():
        assert run_coroutine(event_log().append(str(created.run.pk), {**event, "run_id": str(created.run.pk)}))
    Run.objects.filter(pk=created.run.pk).update(attempts=1, last_event_seq=last_event_seq, started_at=timezone.now())
    scripted_model.script(says(answer))
    sink = sink_for(thread.pk)
    settings.RUN_EXECUTOR = "embedded"
    enqueue_run(created.run.pk)
    return created, partial, sink, sink.until_terminal(created.run.pk)


def test_a_recovered_round_is_asked_again_without_the_half_answer(thread, users, scripted_model, sink_for, settings):
    """The worker died mid-answer and the run was re-queued: the next worker keeps the half
    answer in the thread (``truncated``) but does not send it back to the model, which would
    answer the round after it (OpenAI-compatible) or continue it as a prefill (Anthropic) —
    nor does any later turn (found trying a worker kill from a fresh clone)."""
    created, partial, sink, events = recover_lost_worker(
        thread, users["alice"], scripted_model, sink_for, settings, question="tell me everything",
        half_answer="Here is half an ans", answer="Here is the whole answer.", last_event_seq=7)
    assert types(events)[-1] == "run.completed" and joined_text(events) == "Here is the whole answer."
    # Live clients hold the half answer's text: they are told it ended before the new text.
    assert (events[0]["type"], events[0]["seq"], events[0]["message_id"], events[0]["status"]) == \
        ("message.completed", 8, str(partial.pk), "truncated")
    assert types(events)[1] == "text.delta"
    sent = [(m.role, m.content) for m in scripted_model.requests[0].messages]
    assert sent[-1] == ("user", "tell me everything") and "Here is half an ans" not in str(sent)
    partial.refresh_from_db()
    assert (partial.status, partial.content) == ("truncated", "Here is half an ans")  # kept, shown cut off
    answers = Message.objects.filter(run=created.run, role="assistant").order_by("position")
    assert [(m.status, m.content) for m in answers] == [("truncated", "Here is half an ans"),
                                                        ("complete", "Here is the whole answer.")]
    scripted_model.script(says("And then this."))
    follow_up = run_create(thread=thread, user=users["alice"], content="and then?")
    assert types(sink.until_terminal(follow_up.run.pk))[-1] == "run.completed"
    sent = [(m.role, m.content) for m in scripted_model.requests[1].messages]
    assert sent == [("user", "tell me everything"), ("assistant", "Here is the whole answer."), ("user", "and then?")]


def test_an_answer_stored_whole_before_its_worker_lost_the_run_is_not_asked_again(thread, users, scripted_model,
                                                                                   sink_for, settings):
    """The worker stored the whole answer, then lost the run before it ended it (fenced: its
    heartbeat could not renew while database connections were being killed — found from a
    fresh clone), and the reaper re-queued it. The next worker ends the run with that answer:
    the model was asked again, with its own answer in the history, and the thread got two."""
    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=thread, user=users["alice"], content="tell me once")
    answer = message_create(thread_id=thread.pk, run=created.run, role="assistant", status="complete",
                            content="The one answer.")
    Run.objects.filter(pk=created.run.pk).update(attempts=1, last_event_seq=9, started_at=timezone.now())
    sink = sink_for(thread.pk)
    settings.RUN_EXECUTOR = "embedded"
    enqueue_run(created.run.pk)
    events = sink.until_terminal(created.run.pk)
    assert [(e["type"], e.get("message_id")) for e in events if e["type"] != "run.started"] == [
        ("message.completed", str(answer.pk)), ("run.completed", None)]
    assert events[-1]["seq"] > 9
    assert scripted_model.requests == []  # nobody asked the model again
    run = Run.objects.get(pk=created.run.pk)
    assert run.status == Run.Status.COMPLETED
    assert [(m.status, m.content) for m in Message.objects.filter(run=run, role="assistant")] == [
        ("complete", "The one answer.")]


def test_a_database_failure_is_recorded_only_by_the_runs_owner(thread, users, settings):
    """A worker whose turn found no database connection fails the run — unless the run is no
    longer its own: its lease expired meanwhile and the reaper handed the run to another
    worker, whose answer a late failure ended under it (found killing database connections
    mid-run from a fresh clone: the page stayed "writing…" for good)."""
    from agents.runs.driver import run_fail_unavailable

    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=thread, user=users["alice"], content="hello")
    assert run_fail_unavailable(run_id=created.run.pk, message="m", owner="") is True
    created.run.refresh_from_db()
    assert created.run.status == Run.Status.FAILED  # never claimed and still queued: it fails visibly

    created = run_create(thread=thread, user=users["alice"], content="again")
    assert lifecycle.run_claim(run_id=created.run.pk, owner="second:1") is not None  # another worker has it
    assert run_fail_unavailable(run_id=created.run.pk, message="m", owner="first:1") is False
    assert run_fail_unavailable(run_id=created.run.pk, message="m", owner="") is False  # not queued either
    created.run.refresh_from_db()
    assert (created.run.status, created.run.lease_owner) == (Run.Status.RUNNING, "second:1")
    assert run_fail_unavailable(run_id=created.run.pk, message="m", owner="second:1") is True
    created.run.refresh_from_db()
    assert (created.run.status, created.run.error["code"]) == (Run.Status.FAILED, "database_unavailable")


def test_a_half_answer_nobody_was_told_of_is_closed_without_an_event(thread, users, scripted_model, sink_for,
                                                                      settings):
    """The worker died after creating its message but before ``run.started`` went out: the
    next attempt closes that message ``truncated`` and starts the run's events with
    ``run.started`` for its own message, as a first attempt would."""
    created, lost, _sink, events = recover_lost_worker(thread, users["alice"], scripted_model, sink_for, settings,
                                                       question="hello", half_answer="", answer="Hi.", last_event_seq=0)
    answer = Message.objects.filter(run=created.run, role="assistant").order_by("position").last()
    assert (events[0]["type"], events[0]["seq"], events[0]["assistant_message_id"]) == ("run.started", 1, str(answer.pk))
    assert [e for e in events if e["type"] == "message.completed"] == [
        {**next(e for e in events if e["type"] == "message.completed"), "message_id": str(answer.pk), "status": "complete"}]
    lost.refresh_from_db()
    assert lost.status == "truncated"


def test_one_reaper_pass_per_period_however_many_processes_wake(settings):
    """Every worker and web process wakes its reaper each period; the first to claim the
    period in the shared cache (Redis on the PostgreSQL run) does the pass, the rest skip it."""
    settings.RUN_REAPER_PERIOD_S = 2.0
    start = 1_000_000.0  # the start of a period
    assert reaper_pass_claim(start + 0.3) is True  # the first process to wake
    assert [reaper_pass_claim(start + t) for t in (0.3, 1.0, 1.99)] == [False, False, False]  # the others
    assert reaper_pass_claim(start + 2.0) is True  # the next period has its own claim
    assert reaper_pass_claim(start + 2.5) is False


def test_a_reaper_passes_when_the_cache_is_down(settings, monkeypatch):
    """More reapers than needed are safe (conditional updates); none would strand runs."""
    from django.core import cache as cache_module

    def down(*args, **kwargs):
        raise ConnectionError("cache down")

    monkeypatch.setattr(cache_module.cache, "add", down)
    assert [reaper_pass_claim(1_000_000.0), reaper_pass_claim(1_000_000.5)] == [True, True]


# --- races ----------------------------------------------------------------------------------
def race(n: int, action):
    """Run ``action(i)`` in ``n`` threads released together; return the results in order."""
    barrier = threading.Barrier(n)

    def one(i):
        try:
            barrier.wait()
            return action(i)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def test_simultaneous_sends_to_one_thread_start_exactly_one_run(thread, users, api_for, settings):
    settings.RUN_EXECUTOR = "none"
    url = f"/api/v1/threads/{thread.pk}/runs/"
    codes = race(8, lambda i: api_for(users["alice"]).post(url, {"content": f"send {i}"}, format="json").status_code)
    assert sorted(codes) == [202] + [409] * 7
    assert Run.objects.filter(thread=thread).count() == 1


def test_the_per_user_cap_holds_under_simultaneous_sends(users, workspaces, openai_provider, api_for, settings):
    settings.RUN_EXECUTOR = "none"
    settings.MAX_ACTIVE_RUNS_PER_USER = 2
    threads = [make_thread(users["alice"], workspaces["demo"], openai_provider) for _ in range(6)]
    codes = race(6, lambda i: api_for(users["alice"]).post(f"/api/v1/threads/{threads[i].pk}/runs/",
                                                           {"content": "go"}, format="json").status_code)
    assert sorted(codes) == [202, 202, 429, 429, 429, 429]
    assert Run.objects.filter(user=users["alice"], status=Run.Status.QUEUED).count() == 2


def test_a_decision_racing_a_new_message_never_lets_both_through(thread, users, roles, api_for, sink_for, settings,
                                                                   scripted_model):
    box, scope = scoped_toolbox()
    with scope:
        note = ToolPolicy.objects.create(tool_name="note_write", risk="write", approval_mode="always")
        note.allowed_roles.set(Role.objects.filter(name__in=("member", "admin")))  # write tools: roles named
        scripted_model.script(calls(call("c1", "note_write", {"text": "x"})))
        sink = sink_for(thread.pk)
        created = run_create(thread=thread, user=users["alice"], content="write it")
        request = sink.until_parked(created.run.pk)[-1]
        settings.RUN_EXECUTOR = "none"  # keep the re-queued run queued: the race is about the requests
        client = api_for(users["alice"])
        decide = f"/api/v1/tool-calls/{request['tool_call_id']}/decision/"
        send = f"/api/v1/threads/{thread.pk}/runs/"
        results = race(2, lambda i: (client.post(decide, {"decision": "approve"}, format="json") if i == 0
                                     else client.post(send, {"content": "never mind"}, format="json")).status_code)
    decided, sent = results
    ledger = ToolCall.objects.get(pk=request["tool_call_id"])
    assert (decided, sent) in ((200, 409), (409, 202))
    if decided == 200:  # the approval won: the call will run, the new message was refused
        assert ledger.status == ToolCall.Status.APPROVED
        assert Run.objects.get(pk=created.run.pk).status == Run.Status.QUEUED
    else:  # the new message won: the call is closed and can never run
        assert ledger.status == ToolCall.Status.EXPIRED
        assert Run.objects.get(pk=created.run.pk).status == Run.Status.CANCELLED
    assert not box.calls


# --- a broker or database that is down ------------------------------------------------------
def test_a_send_while_the_broker_is_down_is_accepted_and_kept_queued(thread, users, api_for, settings, monkeypatch,
                                                                       caplog):
    from celery import Celery

    settings.RUN_EXECUTOR = "celery"
    down = Celery("broker-down", broker="redis://127.0.0.1:9/0", set_as_current=False)  # nothing listens there
    monkeypatch.setattr("agents.runs.executors.celery_app", lambda: down)
    response = api_for(users["alice"]).post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "hello"}, format="json")
    assert response.status_code == 202, response.content
    assert "could not reach the broker" in caplog.text
    run = Run.objects.get(pk=response.json()["run_id"])
    assert run.status == Run.Status.QUEUED and run.queued_at is not None  # the reaper will enqueue it again


def test_a_lost_backing_service_is_a_json_503_not_an_html_500(thread, users, api_for, monkeypatch):
    from django.db import OperationalError

    def down(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr("chat.api.views.run_create", down)
    response = api_for(users["alice"]).post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "hi"}, format="json")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "service_unavailable"
    assert response["Retry-After"] == "5"


class _MeterWithoutDatabase:
    """The real meter, except that recording a round's usage finds no database connection —
    as when PostgreSQL went away between the model's last token and the turn's next write."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def after_round(self, **kwargs):
        from django.db import OperationalError

        raise OperationalError("connection failed: server closed the connection unexpectedly")


def test_a_turn_that_loses_the_database_after_its_stream_keeps_every_word(thread, users, scripted_model, sink_for,
                                                                          settings, monkeypatch):
    """The text a failed turn keeps is all it streamed — what the page showed — not the lease
    heartbeat's last save (up to ``STREAM_PERSIST_INTERVAL_S`` older; here never, the interval
    is longer than the turn)."""
    from agents.metering import meter as real_meter

    settings.STREAM_PERSIST_INTERVAL_S = 30.0
    monkeypatch.setattr("agents.backends.model.meter", lambda: _MeterWithoutDatabase(real_meter()))
    scripted_model.script(says("Every word the page showed."))
    sink = sink_for(thread.pk)
    created = run_create(thread=thread, user=users["alice"], content="go")
    events = sink.until_terminal(created.run.pk)
    assert events[-1]["type"] == "run.failed" and events[-1]["error"]["code"] == "database_unavailable"
    assert joined_text(events) == "Every word the page showed."
    answer = Message.objects.get(run=created.run, role="assistant")
    assert (answer.status, answer.content, answer.error["code"]) == (
        "truncated", "Every word the page showed.", "database_unavailable")
    closed = [e for e in events if e["type"] == "message.completed"]
    assert [(e["message_id"], e["status"]) for e in closed] == [(str(answer.pk), "truncated")]


def test_a_database_failure_recorded_later_closes_the_answer_or_leaves_an_empty_one(thread, users, settings):
    """``run_fail_unavailable`` (the worker's second try, once a connection is free): the run's
    streaming message is closed with all the text the turn streamed, and a run with no answer
    at all gets an empty ``error`` message — either way a reload shows how the turn ended, not
    "writing…" for good or the question alone."""
    from agents.runs.driver import run_fail_unavailable

    settings.RUN_EXECUTOR = "none"
    created = run_create(thread=thread, user=users["alice"], content="hello")
    assert lifecycle.run_claim(run_id=created.run.pk, owner="w:1") is not None
    streaming = message_create(thread_id=thread.pk, run=created.run, role=Message.Role.ASSISTANT,
                               status=Message.Status.STREAMING, content="Half")  # the heartbeat's last save
    assert run_fail_unavailable(run_id=created.run.pk, message="no database", owner="w:1",
                                latest=(streaming.pk, {"content": "Half and the rest"})) is True
    streaming.refresh_from_db()
    assert (streaming.status, streaming.content, streaming.error) == (
        "truncated", "Half and the rest", {"code": "database_unavailable", "message": "no database"})

    created = run_create(thread=thread, user=users["alice"], content="again")
    assert run_fail_unavailable(run_id=created.run.pk, message="no database", owner="") is True  # still queued
    [empty] = Message.objects.filter(run=created.run, role="assistant")
    assert (empty.status, empty.content, empty.error["code"]) == ("error", "", "database_unavailable")


def test_a_half_answer_keeps_all_the_text_live_clients_were_shown(thread, users, scripted_model, sink_for,
                                                                   settings):
    """The lost worker streamed on after its last save (here the database was away while the
    model kept answering): the half answer keeps all the text its events carried — what the
    page showed — not the last save (found stopping PostgreSQL for 25 s mid-answer: 140
    characters kept of ~650 shown)."""
    shown = ["Here is ", "half an ", "answer that ", "went on."]
    logged = [{"type": "run.started", "seq": 1},
              *({"type": "text.delta", "seq": n, "delta": d} for n, d in enumerate(shown, start=2))]
    created, partial, _sink, events = recover_lost_worker(
        thread, users["alice"], scripted_model, sink_for, settings, question="go on",
        half_answer="Here is half", answer="The whole answer.", last_event_seq=2, logged=logged)
    assert types(events)[-1] == "run.completed" and joined_text(events) == "The whole answer."
    assert (events[0]["type"], events[0]["seq"], events[0]["message_id"]) == ("message.completed", 6, str(partial.pk))
    partial.refresh_from_db()
    assert (partial.status, partial.content) == ("truncated", "".join(shown))


def test_shown_text_starts_again_after_each_closed_message():
    from agents.replay import shown_text

    events = [{"type": "text.delta", "delta": "Let me look."}, {"type": "message.completed"},
              {"type": "tool.started"}, {"type": "text.delta", "delta": "Found "},
              {"type": "text.delta", "delta": "it."}]
    assert shown_text(events) == "Found it."
    assert shown_text(events[:2]) == "" and shown_text([]) == ""
