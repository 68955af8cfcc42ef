"""RunEmitter: seq numbering and adaptive coalescing of text deltas (DESIGN §8)."""

import time

import pytest

from agents.events import RunEmitter
from tests.conftest import EventSink

pytestmark = pytest.mark.django_db


def collect(sink, n):
    from chatplatform.loops import run_coroutine

    out = []
    for _ in range(n):
        import asyncio

        out.append(run_coroutine(asyncio.wait_for(sink.layer.receive(sink.channel), 5))["event"])
    return out


def test_idle_delta_is_sent_at_once_and_burst_is_merged():
    sink = EventSink("t-coalesce")
    emitter = RunEmitter(run_id="r1", thread_id="t-coalesce", window_s=0.2, max_chars=10_000)
    emitter.text("Hello")  # nothing sent within the window: goes out immediately
    for piece in [" wor", "ld", "!"]:
        emitter.text(piece)  # inside the window: merged
    emitter.emit("run.completed", status="completed", truncated=None)  # flushes the buffer first
    emitter.close()
    events = collect(sink, 3)
    sink.close()
    assert [(e["type"], e.get("delta")) for e in events] == [
        ("text.delta", "Hello"), ("text.delta", " world!"), ("run.completed", None),
    ]
    assert [e["seq"] for e in events] == [1, 2, 3]
    assert all(e["run_id"] == "r1" for e in events)


class FakeClock:
    """A monotonic clock the test moves by hand (``RunEmitter(clock=…)``)."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_window_end_flushes_without_another_event():
    sink = EventSink("t-window")
    emitter = RunEmitter(run_id="r2", thread_id="t-window", window_s=0.05, max_chars=10_000)
    emitter.text("a")
    emitter.text("b")
    events = collect(sink, 2)  # the sweep's timer, not a later event or close(), sends "b"
    emitter.close()
    sink.close()
    assert [e["delta"] for e in events] == ["a", "b"]


def test_a_waiting_delta_goes_out_with_the_next_one_past_the_window():
    # A steady stream flushes itself: "b" came too soon after "a" and waits; "c", past the
    # window, takes it along in one event instead of "b" going out alone at the window's end.
    sink = EventSink("t-pair")
    clock = FakeClock()
    # The window is long on the sweep's real clock too: only "c" can send "b".
    emitter = RunEmitter(run_id="r-pair", thread_id="t-pair", window_s=30, max_chars=10_000, clock=clock)
    emitter.text("a")  # idle: at once
    clock.advance(18)
    emitter.text("b")  # 18 s after "a": waits, due 30 s from now at the latest
    clock.advance(15)
    emitter.text("c")  # 33 s after "a", past the window: "b" and "c" together
    emitter.close()
    events = collect(sink, 2)
    sink.close()
    assert [e["delta"] for e in events] == ["a", "bc"]
    assert emitter.seq == 2


def test_size_threshold_flushes_early_and_text_is_never_lost():
    sink = EventSink("t-size")
    emitter = RunEmitter(run_id="r3", thread_id="t-size", window_s=10.0, max_chars=8, start_seq=41)
    pieces = [f"tok{n} " for n in range(50)]
    for piece in pieces:
        emitter.text(piece)
    emitter.emit("message.completed", message_id="m", status="complete")
    emitter.close()
    n = emitter.seq - 41
    events = collect(sink, n)
    sink.close()
    deltas = [e for e in events if e["type"] == "text.delta"]
    assert "".join(e["delta"] for e in deltas) == "".join(pieces)
    assert 1 < len(deltas) < len(pieces)  # merged, but flushed early past 8 chars
    assert [e["seq"] for e in events] == list(range(42, 42 + n))


def test_window_widens_with_concurrent_streams(settings):
    from agents import events

    settings.EVENTS_COALESCE_WINDOW_S = 0.015
    settings.EVENTS_COALESCE_STREAMS_PER_STEP = 8
    settings.EVENTS_COALESCE_MAX_WINDOW_S = 0.1
    emitters = [RunEmitter(run_id=f"w{n}", thread_id="t-adapt") for n in range(4)]
    assert events.coalesce_window_s() == 0.015  # few streams: the base window
    emitters += [RunEmitter(run_id=f"w{n}", thread_id="t-adapt") for n in range(4, 24)]
    assert events.coalesce_window_s() == pytest.approx(0.015 * len(events._streaming) / 8)
    emitters += [RunEmitter(run_id=f"w{n}", thread_id="t-adapt") for n in range(24, 80)]
    assert events.coalesce_window_s() == 0.1  # capped
    for emitter in emitters:
        emitter.close()
    assert events.coalesce_window_s() == 0.015


def test_the_loop_window_stays_put_up_to_its_stream_count_then_adapts(settings):
    """Text given on the delivery's own loop: EVENTS_COALESCE_LOOP_WINDOW_S while at most
    EVENTS_COALESCE_LOOP_STREAMS stream (a window shorter than a token's interval merges
    nothing, so widening it there only delays), the adaptive window beyond."""
    from agents import events

    settings.EVENTS_COALESCE_WINDOW_S = 0.015
    settings.EVENTS_COALESCE_STREAMS_PER_STEP = 8
    settings.EVENTS_COALESCE_MAX_WINDOW_S = 0.1
    settings.EVENTS_COALESCE_LOOP_WINDOW_S = 0.004
    settings.EVENTS_COALESCE_LOOP_STREAMS = 20
    emitters = [RunEmitter(run_id=f"l{n}", thread_id="t-loop") for n in range(20)]
    assert len(events._streaming) == 20
    assert events.coalesce_window_s(on_loop=True) == 0.004  # 20 streams: still the loop's window
    assert events.coalesce_window_s() == pytest.approx(0.015 * 20 / 8)  # a turn thread's widened
    emitters.append(RunEmitter(run_id="l20", thread_id="t-loop"))
    assert events.coalesce_window_s(on_loop=True) == pytest.approx(0.015 * 21 / 8)  # beyond: adaptive
    for emitter in emitters:
        emitter.close()


def test_a_log_outage_costs_the_retry_window_once_not_once_per_event(settings, monkeypatch):
    # Redis down for good: the first event is retried for EVENTS_LOG_RETRY_S, then every later
    # event of the outage gets one try (published live meanwhile, in order) — not a full
    # retry window each, which stalled the stream for (events × window). Once the log
    # answers again, the next outage gets its full window again.
    import collections

    import agents.events as events_module

    settings.EVENTS_LOG_RETRY_S = 0.5
    calls: collections.Counter = collections.Counter()
    state = {"up": False}

    class FlakyLog:
        async def append(self, run_id, event):
            calls[event["seq"]] += 1
            if not state["up"]:
                raise ConnectionError("the event log is unreachable")
            return True

    monkeypatch.setattr(events_module, "event_log", lambda: FlakyLog())
    sink = EventSink("t-log-down")
    emitter = RunEmitter(run_id="r-down", thread_id="t-log-down", window_s=0.0)
    for n in range(5):
        emitter.text(f"d{n} ")
    emitter.flush()
    first = collect(sink, 5)
    state["up"] = True
    emitter.text("back ")
    after = collect(sink, 1)
    state["up"] = False
    emitter.text("down again ")
    emitter.close()
    last = collect(sink, 1)
    sink.close()

    assert [e["delta"] for e in first + after + last] == ["d0 ", "d1 ", "d2 ", "d3 ", "d4 ", "back ", "down again "]
    assert [e["seq"] for e in first + after + last] == [1, 2, 3, 4, 5, 6, 7]
    assert calls[1] >= 2  # the outage's first event was retried
    assert [calls[seq] for seq in (2, 3, 4, 5)] == [1, 1, 1, 1]  # later ones: one try each
    assert calls[6] == 1  # logged at once when the log was back
    assert calls[7] >= 2  # a new outage: retried again
