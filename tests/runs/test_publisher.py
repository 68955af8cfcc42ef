"""The production publisher thread (``agents.events.ThreadPublisher``) against real Redis:
every run's events reach the event log and the channel layer in order, concurrent runs share
one pipelined connection, and a log outage follows the retry policy without blocking the
turn. Marked ``services``: the thread delivers only with the Redis event log and layer."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis
from channels.layers import get_channel_layer

from agents.events import RunEmitter, ThreadPublisher, publish_gather_s, thread_publisher
from chatplatform.event_log import Appended, event_log
from chatplatform.loops import run_coroutine
from tests.conftest import EventSink

pytestmark = [pytest.mark.django_db, pytest.mark.services]


def logged(run_id: str) -> list[dict]:
    return run_coroutine(event_log().read(run_id))


def test_concurrent_runs_reach_the_log_and_the_group_in_order(settings):
    settings.EVENTS_COALESCE_WINDOW_S = 0.002
    sink = EventSink("t-publisher")
    emitters = [RunEmitter(run_id=uuid.uuid4(), thread_id="t-publisher") for _ in range(4)]
    assert all(isinstance(emitter._publisher, ThreadPublisher) for emitter in emitters)
    pieces = [f"w{i} " for i in range(150)]

    def stream(emitter):
        for piece in pieces:
            emitter.text(piece)
        emitter.emit("run.completed", status="completed", truncated=None)
        emitter.close()

    workers = [threading.Thread(target=stream, args=(emitter,)) for emitter in emitters]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    received: dict[str, list[dict]] = {emitter.run_id: [] for emitter in emitters}
    while any(not events or events[-1]["type"] != "run.completed" for events in received.values()):
        event = run_coroutine(sink.layer.receive(sink.channel))["event"]
        received[event["run_id"]].append(event)
    for emitter in emitters:
        log = logged(emitter.run_id)
        assert [e["seq"] for e in log] == list(range(1, emitter.seq + 1))
        assert received[emitter.run_id] == log  # the group got exactly what the log kept, in order
        assert "".join(e.get("delta", "") for e in log) == "".join(pieces)
        assert log[-1]["type"] == "run.completed"
        assert emitter.settled_seq == emitter.seq and emitter.sent_count == emitter.seq


class FlakyLog:
    """The real Redis event log's batch append behind a switch: while ``down``, nothing is
    taken, as when the connection is refused."""

    def __init__(self, append) -> None:
        self.append, self.down, self.tries = append, True, []

    def __call__(self, runs):
        self.tries.append([seq for _run, _channel, items in runs for seq, _json, _payload in items])
        if self.down:
            refused = redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
            return [Appended([], refused) for _ in runs]
        return self.append(runs)


@pytest.fixture
def flaky(monkeypatch):
    log = thread_publisher(get_channel_layer()).log
    flaky = FlakyLog(log.append_and_publish_many)
    monkeypatch.setattr(log, "append_and_publish_many", flaky)
    return flaky


def test_a_short_outage_delays_events_and_loses_none(settings, flaky):
    settings.EVENTS_LOG_RETRY_S = 30
    emitter = RunEmitter(run_id=uuid.uuid4(), thread_id="t-outage", window_s=0)
    emitter.text("before ")
    emitter.text("during ")
    timer = threading.Timer(0.5, lambda: setattr(flaky, "down", False))
    timer.start()
    emitter.close(timeout=10)
    timer.join()
    assert "".join(e["delta"] for e in logged(emitter.run_id)) == "before during "
    assert len(flaky.tries) >= 3  # retried with backoff (0.2 s, 0.4 s …) until the log answered
    assert emitter.settled_seq == 2 and emitter.sent_count == 2


def test_a_long_outage_costs_the_retry_window_once(settings, flaky):
    settings.EVENTS_LOG_RETRY_S = 0.5
    emitter = RunEmitter(run_id=uuid.uuid4(), thread_id="t-outage", window_s=0)
    emitter.text("a ")
    emitter.close(timeout=10)  # returns once "a" is given up, after the retry window
    assert emitter.settled_seq == 1 and emitter.sent_count == 0
    given_up_after = len(flaky.tries)
    assert given_up_after >= 2
    emitter.text("b ")  # the outage goes on: one try, then given up at once
    emitter.close(timeout=10)
    assert len(flaky.tries) == given_up_after + 1 and emitter.settled_seq == 2
    flaky.down = False
    emitter.text("c ")
    emitter.close(timeout=10)
    assert [e["delta"] for e in logged(emitter.run_id)] == ["c "]  # kept from the moment the log answered
    assert emitter.sent_count == 1


def test_a_refusal_after_a_failed_try_counts_as_logged(settings, flaky):
    # The connection broke after Redis had run the script: the retry is refused (the seq is
    # in the log already), which must count as logged, not as a stale writer.
    settings.EVENTS_LOG_RETRY_S = 30
    real = flaky.append
    tries = []

    def reached_then_broke(runs):
        tries.append(runs)
        if len(tries) == 1:  # Redis ran the script, then the connection broke before the reply
            real(runs)
            return [Appended([], redis.ConnectionError("Connection reset by peer"), unknown=True) for _ in runs]
        return real(runs)

    flaky.append = reached_then_broke
    flaky.down = False
    emitter = RunEmitter(run_id=uuid.uuid4(), thread_id="t-outage", window_s=0)
    emitter.text("once ")
    emitter.close(timeout=10)
    assert [e["delta"] for e in logged(emitter.run_id)] == ["once "]
    assert emitter.sent_count == 1 and emitter.fenced_count == 0


def drain_to(emitter, text_pieces):
    for piece in text_pieces:
        emitter.text(piece)
    emitter.close(timeout=10)


def test_a_restarted_redis_without_its_scripts_loses_and_reorders_nothing(settings):
    settings.EVENTS_COALESCE_WINDOW_S = 0.0
    emitters = [RunEmitter(run_id=uuid.uuid4(), thread_id="t-noscript", window_s=0) for _ in range(3)]
    for emitter in emitters:
        drain_to(emitter, ["a ", "b "])
    redis.Redis.from_url(settings.REDIS_URL).script_flush()  # what a restart does to the script cache
    for emitter in emitters:
        drain_to(emitter, ["c ", "d "])
    for emitter in emitters:
        assert "".join(e["delta"] for e in logged(emitter.run_id)) == "a b c d "
        assert emitter.sent_count == 4 and emitter.fenced_count == 0


def test_an_error_reply_for_one_run_stops_only_that_run_and_keeps_its_order(settings):
    settings.EVENTS_LOG_RETRY_S = 0.5
    broken, fine = (RunEmitter(run_id=uuid.uuid4(), thread_id="t-wrongtype", window_s=0) for _ in range(2))
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.set(event_log().key(broken.run_id), "not a stream", ex=60)  # every XADD to it: WRONGTYPE
    for emitter in (broken, fine):
        emitter.text("one ")
        emitter.text("two ")
    fine.close(timeout=10)
    assert [e["delta"] for e in logged(fine.run_id)] == ["one ", "two "] and fine.sent_count == 2
    broken.close(timeout=10)  # retried for EVENTS_LOG_RETRY_S, then given up, in order
    assert broken.settled_seq == 2 and broken.sent_count == 0
    client.delete(event_log().key(broken.run_id))
    broken.text("three ")
    broken.close(timeout=10)
    assert [(e["seq"], e["delta"]) for e in logged(broken.run_id)] == [(3, "three ")]


def test_an_event_that_cannot_be_serialised_is_dropped_alone(settings):
    emitter = RunEmitter(run_id=uuid.uuid4(), thread_id="t-bad-event", window_s=0)
    emitter.text("before ")
    emitter.emit("run.completed", status=object(), truncated=None)  # a bug upstream: not JSON
    emitter.text("after ")
    emitter.close(timeout=10)
    assert [(e["seq"], e.get("delta")) for e in logged(emitter.run_id)] == [(1, "before "), (3, "after ")]
    assert emitter.settled_seq == 3


def test_under_load_events_of_runs_streaming_together_share_round_trips(monkeypatch, settings):
    # Beyond EVENTS_COALESCE_STREAMS_PER_STEP streams in the process, an event waits up to
    # publish_gather_s() for the others' (one pipelined round trip for several runs); a run
    # streaming alone is sent at once.
    settings.EVENTS_COALESCE_STREAMS_PER_STEP = 4  # five streams: under load
    log = thread_publisher(get_channel_layer()).log
    batches: list[int] = []
    real = log.append_and_publish_many

    def counting(runs):
        batches.append(sum(len(items) for _run, _channel, items in runs))
        return real(runs)

    monkeypatch.setattr(log, "append_and_publish_many", counting)
    emitters = [RunEmitter(run_id=uuid.uuid4(), thread_id="t-gather", window_s=0) for _ in range(5)]
    assert publish_gather_s() == settings.EVENTS_PUBLISH_GATHER_S > 0
    barrier = threading.Barrier(len(emitters))

    def stream(n, emitter):
        for i in range(20):
            barrier.wait(5)  # the five runs' deltas come within 4 ms, as 5 chats' tokens do
            time.sleep(n * 0.001)
            emitter.text(f"{i} ")
        emitter.close(timeout=10)

    workers = [threading.Thread(target=stream, args=item) for item in enumerate(emitters)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    for emitter in emitters:
        assert "".join(e["delta"] for e in logged(emitter.run_id)) == "".join(f"{i} " for i in range(20))
    assert sum(batches) == 100
    assert len(batches) <= 50  # 20 rounds of 5 events: most rounds share one trip (one per event: 100)

    batches.clear()
    alone = RunEmitter(run_id=uuid.uuid4(), thread_id="t-gather", window_s=0)
    alone.text("solo ")
    alone.close(timeout=10)
    assert batches == [1]


def test_under_light_load_a_ready_event_does_not_wait_for_company(settings):
    # At most EVENTS_COALESCE_STREAMS_PER_STEP streams: the publisher is due at once for a
    # queued event (no gathering), so production streams as soon as embedded mode does.
    settings.EVENTS_COALESCE_STREAMS_PER_STEP = 4
    settings.EVENTS_PUBLISH_GATHER_S = 0.5
    publisher = ThreadPublisher(event_log())
    publisher._ensure_thread = lambda: None  # never started: its schedule is what is looked at
    emitters = [RunEmitter(run_id=uuid.uuid4(), thread_id="t-light", window_s=60) for _ in range(4)]
    assert publish_gather_s() == 0.0
    emitters[0]._outbox.append({"type": "text.delta", "seq": 1})
    before = time.monotonic()
    publisher.wake(emitters[0])
    assert publisher._ready_at <= time.monotonic()  # due now, not gathering

    emitters.append(RunEmitter(run_id=uuid.uuid4(), thread_id="t-light", window_s=60))  # five: under load
    assert publish_gather_s() == 0.5
    publisher._ready.clear()
    publisher.wake(emitters[1])
    assert publisher._ready_at >= before + 0.5  # gathers for company
    for emitter in emitters:
        emitter._outbox.clear()
        emitter.close(timeout=1)
