"""The one place that publishes run events to a thread's Channels group (DESIGN §7, §8).

Each run has a :class:`RunEmitter`: it stamps ``run_id`` and ``seq`` (1, 2, 3… per run, no
gaps), coalesces text deltas adaptively and hands events, in order, to the process's one
delivery, which owns the Redis / channel-layer connection. Worker threads never create an
event loop or a Redis connection per event.

Who delivers: in production (the Redis event log and the Redis Pub/Sub channel layer) one
daemon thread per process, :class:`ThreadPublisher`, logs and publishes every run's events
with a synchronous Redis connection — one script call per event, pipelined when several are
ready. Otherwise (embedded mode, other layers) an event loop does: the web server's own loop
when this process serves ASGI (the in-memory channel layer lives there), else one daemon loop
thread per process (Celery workers, the ``ask`` command). Production uses a thread rather than
a loop because an event loop pays for wake-ups, timers and tasks on every event besides the
send to Redis, which costs the same from either (figures: docs/performance.md).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import heapq
import itertools
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from chatplatform.dbasync import db_async
from chatplatform.event_log import Appended, event_log
from chatplatform.loops import publisher_loop, run_coroutine

from .event_types import check_event
from .runs.lifecycle import run_seq_release, run_seq_reserve, run_seq_save

logger = logging.getLogger(__name__)

GROUP_MESSAGE_TYPE = "run.event"  # handled by ChatConsumer.run_event

# What became of an event handed to the event log (RunEmitter._log_with_retry).
LOGGED, REFUSED, UNLOGGED = "logged", "refused", "unlogged"

def thread_group(thread_id: Any) -> str:
    return f"thread.{thread_id}"


_streaming: weakref.WeakSet = weakref.WeakSet()  # emitters not yet closed in this process


def coalesce_window_s(*, on_loop: bool = False) -> float:
    """The adaptive coalescing window (seconds): ``EVENTS_COALESCE_WINDOW_S`` (30 ms) while
    few runs stream in this process, growing with every ``EVENTS_COALESCE_STREAMS_PER_STEP``
    (16) concurrent streams up to ``EVENTS_COALESCE_MAX_WINDOW_S`` (100 ms). Under load one
    process cannot publish one event per token from turn threads: fewer, larger deltas keep
    every stream moving instead of all falling behind, and cost less CPU per token.

    ``on_loop``: the text is given on the delivery's own event loop (the model read there,
    embedded mode), where an event wakes no thread: the window is then
    ``EVENTS_COALESCE_LOOP_WINDOW_S`` (5 ms) up to ``EVENTS_COALESCE_LOOP_STREAMS`` (64)
    streams, the adaptive one beyond. It does not widen below that: a window shorter than the
    time between two tokens (20 ms at 50 tokens/s) merges nothing, and only holds back a token
    that came early, which shows up as per-token latency."""
    base, per_step, most, _gather, loop_base, loop_streams = _event_settings()
    streams = len(_streaming)
    if on_loop and streams <= loop_streams:
        return loop_base
    return min(max(base, base * streams / per_step), max(base, most))


def publish_gather_s() -> float:
    """How long (seconds) the production publisher (:class:`ThreadPublisher`) lets a ready
    event wait for other runs' events, so that one Redis round trip carries several: none
    while at most ``EVENTS_COALESCE_STREAMS_PER_STEP`` (16) runs stream in this process —
    where the coalescing window is still at its base — and ``EVENTS_PUBLISH_GATHER_S``
    (10 ms) beyond, where the process is loaded and CPU is what runs short: gathering trades
    a few ms of latency for less CPU per token, most of it in the web process, which then
    wakes for every batch instead of every message."""
    _base, per_step, _most, gather, _loop_base, _loop_streams = _event_settings()
    return gather if len(_streaming) > per_step else 0.0


def _event_settings() -> tuple[float, int, float, float, float, int]:
    """(window, streams per step, largest window, gather, loop window, loop streams), read once: this runs
    for every delta (settings are a lazy object); a test's settings change resets it."""
    global _cached_settings
    if _cached_settings is None:
        _cached_settings = (settings.EVENTS_COALESCE_WINDOW_S, max(1, settings.EVENTS_COALESCE_STREAMS_PER_STEP),
                            settings.EVENTS_COALESCE_MAX_WINDOW_S, settings.EVENTS_PUBLISH_GATHER_S,
                            settings.EVENTS_COALESCE_LOOP_WINDOW_S, settings.EVENTS_COALESCE_LOOP_STREAMS)
    return _cached_settings


_cached_settings: tuple[float, int, float, float, float, int] | None = None


@receiver(setting_changed)
def _event_settings_changed(*, setting: str, **kwargs: Any) -> None:
    global _cached_settings
    if setting.startswith(("EVENTS_COALESCE_", "EVENTS_PUBLISH_")):
        _cached_settings = None


class _Outage:
    """One emitter's view of an event-log outage: the retry policy both deliveries share
    (``RunEmitter._log_with_retry`` on a loop, :class:`ThreadPublisher` on a thread). Retry
    with backoff (0.2 s doubling to 2 s) until ``EVENTS_LOG_RETRY_S`` after the outage began;
    after that each further event gets one try until the log answers again."""

    def __init__(self) -> None:
        self.down_since: float | None = None  # monotonic time of the first failed append
        self.gave_up = False  # an event of the current outage was given up
        self.delay = 0.2

    def failed(self, run_id: str, exc: BaseException, now: float, what: str) -> float | None:
        """An append of ``what`` (e.g. "text.delta seq 7", "seq 7–9") failed at ``now``: the
        seconds to wait before retrying it, or None to give it up (logged: an error once per
        outage, then at debug level)."""
        if self.down_since is None:
            self.down_since = now
            logger.warning("run %s: event log unreachable (%s: %s); retrying for up to %.0f s", run_id,
                           type(exc).__name__, exc, settings.EVENTS_LOG_RETRY_S)
        if self.gave_up or now + self.delay > self.down_since + settings.EVENTS_LOG_RETRY_S:
            log = logger.debug if self.gave_up else logger.error
            log("run %s: could not log %s (%s: %s); giving it up (and each later event after one try until "
                "the log answers)", run_id, what, type(exc).__name__, exc)
            self.gave_up = True
            return None
        delay, self.delay = self.delay, min(self.delay * 2, 2.0)
        return delay

    def answered(self) -> None:
        self.down_since, self.gave_up, self.delay = None, False, 0.2


class _Sweep:
    """Which emitters hold text waiting to go out, and when their delivery (the publisher
    thread, or an event loop) wakes next to send what is due — without a wake-up per delta.

    A delta that comes ``window`` or more after the run's last event goes out with it at once
    (``RunEmitter.text``); one that comes sooner waits for the next delta past the window,
    or ``window`` at most (its *due* time). A steady stream is flushed by its own deltas: at
    50 tokens/s with a 30 ms window, every second token takes the first along, 20 ms late.
    The sweep only sends what a pause left behind. After every batch it publishes, the
    delivery stays ready to wake (``linger``) 1.5 windows later, so a delta that starts to
    wait in that time needs no wake-up: it goes out at most half a window late. Otherwise
    ``waiting`` asks for one. Before, every delta that waited armed a timer at the window's
    end, which woke the delivery twice (armed, fired) and always beat the next delta, so
    fewer tokens shared an event; every wake-up of the thread costs CPU.

    Not thread-safe on its own: the caller holds its lock (the publisher's condition, or
    the loop delivery's lock)."""

    def __init__(self) -> None:
        self._waiting: dict[RunEmitter, None] = {}  # emitters whose _due was set
        self._wake_at = math.inf  # when the delivery wakes next by itself (now, while awake)
        self._linger_until = 0.0

    def waiting(self, emitter: RunEmitter, due: float, window: float) -> bool:
        """Note ``emitter``'s text due at ``due``; True when the delivery must be woken to
        send it in time (it would sleep past ``due + window / 2``)."""
        self._waiting[emitter] = None
        return self._wake_at > due + window / 2

    def take_due(self, now: float) -> list[RunEmitter]:
        """Emitters whose text is due at ``now`` (each re-checks under its own lock); those
        flushed meanwhile by a later delta are forgotten."""
        due = []
        for emitter in list(self._waiting):
            when = emitter._due
            if not when or when <= now:
                del self._waiting[emitter]
                if when:
                    due.append(emitter)
        return due

    def next_wake(self, now: float) -> float:
        """The earliest due text, or the end of the linger after the last batch."""
        wake = min((e._due for e in self._waiting if e._due), default=math.inf)
        if self._linger_until > now:
            wake = min(wake, self._linger_until)
        return wake

    def linger(self, now: float) -> None:
        self._linger_until = now + 1.5 * coalesce_window_s()

    def wakes_after(self, when: float) -> bool:
        """True when the delivery would sleep past ``when`` (so it must be woken for it)."""
        return self._wake_at > when

    def awake(self, now: float) -> None:
        self._wake_at = now  # it looks at the waiting text again before it sleeps

    def asleep(self, wake_at: float) -> None:
        self._wake_at = wake_at


class _LoopSweep:
    """The event-loop delivery's sweep (embedded mode): the same :class:`_Sweep` on one
    loop's timer, with a lock because deltas come from turn threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._sweep = _Sweep()
        self._ready_at = 0.0  # when the ready emitters' events go out (they may gather until then)
        self._handle: asyncio.TimerHandle | None = None
        self._handle_at = math.inf

    def waiting(self, emitter: RunEmitter, due: float, window: float, *, on_loop: bool = False) -> None:
        """Any thread; ``on_loop``: called on ``loop`` itself (no cross-thread wake-up)."""
        with self._lock:
            late = self._sweep.waiting(emitter, due, window)
        if late:
            (self.loop.call_soon if on_loop else self.loop.call_soon_threadsafe)(self._schedule)

    def linger(self) -> None:  # on the loop, after an event was handed over
        # Per event, so no lock and no rescheduling: the loop thread alone writes the linger's
        # end (one attribute), and a wake-up already planned re-plans when it fires. At 50
        # chats in one process the loop is the bottleneck, and taking a lock the turn threads
        # also take stalled it whenever a holder was waiting for the GIL.
        self._sweep.linger(time.monotonic())
        if self._handle is None:
            self._schedule()

    def _schedule(self) -> None:  # on the loop
        now = time.monotonic()
        with self._lock:
            wake_at = self._sweep.next_wake(now)
            self._sweep.asleep(wake_at)
        if wake_at == self._handle_at and self._handle is not None:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle_at = wake_at
        self._handle = self.loop.call_later(max(0.0, wake_at - now), self._fire) if wake_at < math.inf else None

    def _fire(self) -> None:  # on the loop
        self._handle, self._handle_at = None, math.inf
        now = time.monotonic()
        with self._lock:
            self._sweep.awake(now)
            due = self._sweep.take_due(now)
        for emitter in due:
            try:
                emitter._flush_due(now)
            except Exception:
                logger.exception("run %s: a text flush failed", emitter.run_id)
        self._schedule()


_loop_sweeps: dict[int, _LoopSweep] = {}
_loop_sweeps_lock = threading.Lock()


def _loop_sweep(loop: asyncio.AbstractEventLoop) -> _LoopSweep:
    """The sweep of ``loop`` (one per loop; those of closed loops are dropped)."""
    with _loop_sweeps_lock:
        sweep = _loop_sweeps.get(id(loop))
        if sweep is None or sweep.loop is not loop:
            for key in [k for k, v in _loop_sweeps.items() if v.loop.is_closed()]:
                del _loop_sweeps[key]
            sweep = _loop_sweeps[id(loop)] = _LoopSweep(loop)
        return sweep


class ThreadPublisher:
    """Production delivery: one daemon thread per process drains every emitter's outbox into
    the Redis event log and the Pub/Sub channel (``RedisEventLog.append_and_publish_many``),
    and fires the emitters' coalescing timers.

    Each wake-up takes every ready emitter's queued events (at most ``BATCH`` in all) into one
    pipelined round trip; a run's events keep their order. When Redis is unreachable, each
    emitter in the failed batch follows :class:`_Outage` — its events wait (the emitter is
    skipped until its retry time, the others go on), or, once the outage is older than
    ``EVENTS_LOG_RETRY_S``, the events that were tried are given up — so a restart costs a run
    at most ``EVENTS_LOG_RETRY_S`` and never blocks the turn thread. Redis calls time out after
    ``RedisEventLog.SOCKET_TIMEOUT_S``. A refusal of a seq that a failed batch had carried
    counts as logged: that try reached the log before the connection broke."""

    BATCH = 256

    def __init__(self, log) -> None:
        self.log = log
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # the publisher thread waits on it
        self._drained = threading.Condition(lock)  # closing emitters wait on it (wait_drained)
        self._ready: dict[RunEmitter, None] = {}  # insertion-ordered set
        self._timers: list[tuple[float, int, Callable, tuple]] = []  # heap of (deadline, n, fn, args)
        self._counter = itertools.count()
        self._thread: threading.Thread | None = None
        self._sweep = _Sweep()

    # -- any thread -------------------------------------------------------------------------
    def call_at(self, deadline: float, fn: Callable, *args: Any) -> None:
        """Run ``fn(*args)`` on the publisher thread at ``deadline`` (``time.monotonic()``)."""
        with self._cond:
            heapq.heappush(self._timers, (deadline, next(self._counter), fn, args))
            if self._timers[0][0] == deadline:
                self._ensure_thread()
                self._cond.notify()

    def waiting(self, emitter: RunEmitter, due: float, window: float) -> None:
        """``emitter`` holds text that must go out by ``due`` if no later delta takes it
        along; the thread is woken only when it would otherwise sleep past ``due + window / 2``."""
        with self._cond:
            if self._sweep.waiting(emitter, due, window):
                self._ensure_thread()
                self._cond.notify()

    def wake(self, emitter: RunEmitter) -> None:
        """``emitter`` has queued events (a blocked emitter waits for its retry timer). Under
        load they wait up to :func:`publish_gather_s` for company, so one round trip carries
        several runs' events; the thread is woken only if it would not wake by then anyway."""
        with self._cond:
            now = time.monotonic()
            if emitter._blocked_until <= now:
                if not self._ready:
                    self._ready_at = now + publish_gather_s()
                self._ready[emitter] = None
                if self._sweep.wakes_after(self._ready_at):
                    self._ensure_thread()
                    self._cond.notify()

    def wait_drained(self, emitter: RunEmitter, timeout: float) -> bool:
        """Block until ``emitter``'s outbox is empty and nothing of it is in flight; False on
        timeout."""
        deadline = time.monotonic() + timeout
        with self._drained:  # its own condition: a notify() meant for the thread never wakes a closer
            while emitter._outbox or emitter._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._drained.wait(left)
        return True

    def _ensure_thread(self) -> None:  # holding _cond
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="event-publisher", daemon=True)
            self._thread.start()

    # -- the publisher thread ---------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                self._step()
            except Exception:  # a bug must not silence every stream of the process
                logger.exception("event publisher: unexpected error; continuing")
                time.sleep(0.1)

    def _step(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                due = []
                while self._timers and self._timers[0][0] <= now:
                    due.append(heapq.heappop(self._timers))
                text_due = self._sweep.take_due(now)
                if due or text_due or (self._ready and self._ready_at <= now):
                    self._sweep.awake(now)
                    break
                wake_at = min(self._timers[0][0] if self._timers else math.inf, self._sweep.next_wake(now),
                              self._ready_at if self._ready else math.inf)
                self._sweep.asleep(wake_at)
                self._cond.wait(wake_at - now if wake_at < math.inf else None)
        for _deadline, _n, fn, args in due:
            try:
                fn(*args)  # outage retries: they queue events and wake()
            except Exception:  # one emitter's bug must not drop the other timers of this round
                logger.exception("event publisher: a timer failed")
        for emitter in text_due:
            try:
                emitter._flush_due(now)  # queues its text.delta and wake()s
            except Exception:
                logger.exception("event publisher: a text flush failed")
        batch: dict[RunEmitter, list[dict]] = {}  # each ready emitter's events, in order
        try:
            with self._cond:
                ready, self._ready = list(self._ready), {}
                room = self.BATCH
                for emitter in ready:
                    if emitter._blocked_until > now:  # the log is down for it: its retry timer wakes it
                        continue
                    take = list(itertools.islice(emitter._outbox, max(0, room)))
                    if take:
                        emitter._in_flight = True
                        batch[emitter] = take
                        room -= len(take)
                    if len(emitter._outbox) > len(take):
                        self._ready[emitter] = None  # the rest in the next round
                        self._ready_at = now
            if batch:
                self._publish(batch)
                self._sweep.linger(time.monotonic())
        finally:
            if batch:
                with self._cond:
                    for emitter in batch:
                        emitter._in_flight = False
                    self._drained.notify_all()  # wait_drained()

    def _publish(self, batch: dict[RunEmitter, list[dict]]) -> None:
        runs, sending = [], []
        for emitter, events in batch.items():
            channel = emitter._layer.group_channel_name(emitter.group)
            items = []
            for event in events:
                try:
                    payload = emitter._layer.serialize({"type": GROUP_MESSAGE_TYPE, "event": event})
                    items.append((event["seq"], json.dumps(event, separators=(",", ":")), payload))
                except (TypeError, ValueError):  # a bug in what was emitted, not an outage
                    break
            if not items:  # the first cannot be serialised: give it up alone
                logger.exception("run %s: %s seq %s cannot be serialised; not published", emitter.run_id,
                                 events[0]["type"], events[0]["seq"])
                self._give_up(emitter, events[:1])
                continue
            runs.append((emitter.run_id, channel, items))
            sending.append((emitter, events[:len(items)]))
        try:
            outcomes = self.log.append_and_publish_many(runs)
        except Exception as exc:  # it reports Redis errors itself; anything else: as if the connection broke
            logger.exception("event publisher: the batch append failed")
            outcomes = [Appended([], exc, unknown=True) for _ in runs]
        for (emitter, events), appended in zip(sending, outcomes, strict=True):
            if appended.done:
                emitter._outage.answered()
            for event, logged in zip(events, appended.done, strict=False):
                emitter._outbox.popleft()
                if logged or event["seq"] <= emitter._tried_upto:  # a refusal after a failed try: it got there
                    emitter.sent_count += 1
                else:
                    emitter.fenced_count += 1
                    logger.warning("run %s: seq %s refused by the event log (stale writer); not published",
                                   emitter.run_id, event["seq"])
                emitter._settled_seq = event["seq"]
            rest = events[len(appended.done):]
            if rest:
                if appended.unknown:  # they may have reached the log: a refusal on retry means they did
                    emitter._tried_upto = max(emitter._tried_upto, rest[-1]["seq"])
                self._failed(emitter, rest, appended.error)
            elif len(events) < len(batch[emitter]):
                self.wake(emitter)  # an unserialisable event was held back: it goes alone next round

    def _failed(self, emitter: RunEmitter, events: list[dict], exc: BaseException | None) -> None:
        """``events`` (the head of ``emitter``'s outbox) were not taken: wait and retry, or give
        them up (``_Outage``)."""
        now = time.monotonic()
        delay = emitter._outage.failed(emitter.run_id, exc or ConnectionError("no reply"), now,
                                       f"seq {events[0]['seq']}–{events[-1]['seq']}")
        if delay is None:  # later events get one try each
            self._give_up(emitter, events)
        else:
            emitter._blocked_until = now + delay
            self.call_at(emitter._blocked_until, self._unblock, emitter)

    def _give_up(self, emitter: RunEmitter, events: list[dict]) -> None:
        """Drop ``events`` (the head of the outbox) as settled; the rest goes on."""
        for event in events:
            emitter._outbox.popleft()
            emitter._settled_seq = event["seq"]
        if emitter._outbox:
            self.wake(emitter)

    def _unblock(self, emitter: RunEmitter) -> None:
        emitter._blocked_until = 0.0
        if emitter._outbox:
            self.wake(emitter)


_thread_publisher: ThreadPublisher | None = None
_thread_publisher_lock = threading.Lock()


def thread_publisher(layer) -> ThreadPublisher | None:
    """The process's :class:`ThreadPublisher` when events go to the Redis event log and the
    Redis Pub/Sub layer (production); None otherwise (the event-loop delivery)."""
    global _thread_publisher
    log = event_log()
    if not (hasattr(log, "append_and_publish_many") and hasattr(layer, "group_channel_name")):
        return None
    with _thread_publisher_lock:
        if _thread_publisher is None or _thread_publisher.log is not log:
            _thread_publisher = ThreadPublisher(log)
        return _thread_publisher


class RunEmitter:
    """Publishes one run's events in order.

    ``text(delta)`` coalesces: a delta is sent at once (with any text waiting) when nothing
    was sent for this run within the window (``coalesce_window_s()``: 30 ms, wider under
    load; a fixed ``window_s`` may be given) or the buffer holds ``max_chars``; otherwise it
    waits for the next delta past the window, or a window at most (half a window more when
    the delivery need not be woken for it: ``_Sweep``). Any other event flushes buffered text
    first. Events carry deltas, never the accumulated text.

    Thread-safe: the loop's worker thread calls ``text``/``emit``; the sweep flushes on the
    delivery's thread or loop. ``clock`` (``time.monotonic`` by default) is what the window is
    measured with; the sweep's timers run on the delivery's own clock.
    """

    def __init__(
        self,
        *,
        run_id: Any,
        thread_id: Any,
        start_seq: int = 0,
        window_s: float | None = None,
        max_chars: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_id = str(run_id)
        self._clock = clock  # seconds, monotonic: when text was sent and is due (tests give their own)
        self.group = thread_group(thread_id)
        self.window_s = window_s  # None: adaptive (coalesce_window_s())
        self.max_chars = settings.EVENTS_COALESCE_MAX_CHARS if max_chars is None else max_chars
        self._seq = start_seq
        self._settled_seq = start_seq
        self._lock = threading.Lock()
        self._buffer: list[str] = []
        self._buffered = 0
        self._last_sent = 0.0
        self._due = 0.0  # monotonic time by which buffered text goes out (0: nothing waits)
        self._outbox: collections.deque[dict] = collections.deque()
        _streaming.add(self)
        self._drain_task: asyncio.Task | None = None
        self._layer = get_channel_layer()
        self._publisher = thread_publisher(self._layer)  # None: deliver on an event loop
        self._loop = None if self._publisher else publisher_loop()
        self._loop_sweep = None if self._publisher else _loop_sweep(self._loop)
        self._in_flight = False  # ThreadPublisher: events of this run are being sent
        self._blocked_until = 0.0  # ThreadPublisher: the log is down, retry at this monotonic time
        self._tried_upto = 0  # the last seq of a failed append: a later refusal up to it means logged
        self._outage = _Outage()
        self.sent_count = 0
        self._saves_seq = False  # for_run(): close() saves last_event_seq on the run
        self._saved_seq = 0  # a seq the run's row holds already (seq_saved)
        # for_run() with the event-loop delivery, whose event log dies with the process: the
        # highest seq the run's row has reserved for this writer (Run.seq_reserved); nothing
        # above it is logged or published before a higher reservation is saved.
        self._reserves = False
        self._reserved = 0
        # () -> bool: True once this writer may have lost the run (agents.runs.lease): every
        # later event is dropped, so a stale writer never publishes a seq the new owner uses.
        self.fence: Callable[[], bool] = lambda: False
        self.fenced_count = 0
        # () -> bool: True while this writer cannot show the run is still its own (its lease
        # suspended: no renewal for a while): events are held, unnumbered, and go out in order
        # once it is False again — or are dropped once ``fence`` is True.
        self.hold: Callable[[], bool] = lambda: False
        self._held: list[dict] = []

    @classmethod
    def for_run(cls, run, *, from_log: bool = False, **kwargs) -> RunEmitter:
        """An emitter continuing ``run``'s numbering after its saved ``last_event_seq`` — or
        after ``seq_reserved`` when that is larger (a writer died holding a reservation: it may
        have published up to it); for a run recovered from a dead worker (``attempts`` > 0) or
        with ``from_log``, after the event log's last seq if that is larger still (the worker
        may have published past the saved value). Reading the log only then keeps a run's
        start off the publisher loop.

        With the event-loop delivery (embedded mode: the event log lives in this process and
        dies with it) the emitter reserves ``EVENTS_SEQ_RESERVE`` seqs at once and again each
        time its drain reaches the reservation, before logging or publishing past it; it
        gives the unused ones back when it closes cleanly (:meth:`save_seq`)."""
        logged = 0
        if run.attempts or from_log:  # the log may be ahead of the row
            try:
                logged = run_coroutine(event_log().last_seq(str(run.pk)), timeout=5)
            except Exception:
                logger.exception("run %s: could not read the event log's last seq", run.pk)
        start = max(run.last_event_seq, getattr(run, "seq_reserved", 0) or 0, logged)
        emitter = cls(run_id=run.pk, thread_id=run.thread_id, start_seq=start, **kwargs)
        emitter._saves_seq = True
        if emitter._publisher is None:
            upto = start + max(1, int(settings.EVENTS_SEQ_RESERVE))
            run_seq_reserve(run_id=run.pk, upto=upto)
            emitter._reserves, emitter._reserved = True, upto
        return emitter

    @property
    def seq(self) -> int:
        """The last seq numbered (it may still wait in the outbox)."""
        return self._seq

    @property
    def settled_seq(self) -> int:
        """The last seq the drain is done with (logged, or given up after EVENTS_LOG_RETRY_S),
        in order. The lease heartbeat saves this one: a seq saved ahead of the log (events
        still retrying into a restarted Redis) made a resuming client report them missing."""
        return self._settled_seq

    # -- called from the worker thread -------------------------------------------------
    def text(self, delta: str) -> None:
        """Queue ``delta``: sent at once (with any text waiting) when the run's last event is
        ``window`` or more old, or the buffer holds ``max_chars``; otherwise it waits for the
        next delta past the window, or ``window`` at most (the delivery's sweep, ``_Sweep``).
        Called on the delivery's own loop (a model read there), the loop's shorter window
        applies (``coalesce_window_s(on_loop=True)``)."""
        if not delta:
            return
        on_loop = self._loop is not None and asyncio._get_running_loop() is self._loop
        with self._lock:
            self._buffer.append(delta)
            self._buffered += len(delta)
            now = self._clock()
            window = self.window_s if self.window_s is not None else coalesce_window_s(on_loop=on_loop)
            if self._buffered >= self.max_chars or now - self._last_sent >= window:
                self._flush_locked(on_loop=on_loop)
                return
            if not self._publisher:
                self._live_loop()  # a closed loop: its waiting text moves to the new loop's sweep
            if self._due:  # already waiting, and due
                return
            self._due = now + window
            if self._publisher:
                self._publisher.waiting(self, self._due, window)
            else:
                self._loop_sweep.waiting(self, self._due, window, on_loop=on_loop)

    def emit(self, type_: str, **fields: Any) -> dict:
        """Flush buffered text, then send one event; returns the event as sent. Raises
        ValueError for a type or field not declared in ``agents.event_types``."""
        check_event(type_, fields)
        with self._lock:
            self._flush_locked()
            return self._send_locked({"type": type_, **fields})

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def close(self, timeout: float = 10.0, *, save_seq: bool = True) -> None:
        """Flush, wait until every event has been handed to the channel layer, and — for an
        emitter made by :meth:`for_run` — save the last seq on the run (``last_event_seq``)
        and give back the seqs reserved past it (:meth:`save_seq`). ``save_seq=False``: a
        worker that lost its lease writes nothing more (its reservation stays: the next
        writer numbers above whatever it may have published)."""
        _streaming.discard(self)
        self._drain_all(timeout)
        if save_seq:
            self._save_seq()

    def save_seq(self, timeout: float = 10.0) -> None:
        """Wait until every event numbered so far went out, then save the last seq on the run
        (``last_event_seq``) and lower its reservation (``seq_reserved``) to it, so the run's
        next writer (a decision, the continuation) numbers right after it. For an emitter
        made by :meth:`for_run`; the emitter may go on (it reserves again before it
        publishes past the saved seq)."""
        self._drain_all(timeout)
        self._save_seq()

    def drain(self, timeout: float) -> None:
        """Flush and wait up to ``timeout`` seconds until every event numbered so far has been
        logged and published (or given up: ``EVENTS_LOG_RETRY_S``); the emitter goes on."""
        self._drain_all(timeout)

    def _drain_all(self, timeout: float) -> None:
        self.flush()
        if self._publisher:
            if not self._publisher.wait_drained(self, timeout):
                logger.warning("run %s: events not drained within %.1f s", self.run_id, timeout)
        else:
            try:
                asyncio.run_coroutine_threadsafe(self._wait_drained(), self._live_loop()).result(timeout)
            except (concurrent.futures.TimeoutError, RuntimeError):
                logger.warning("run %s: events not drained within %.1f s", self.run_id, timeout)

    def _save_seq(self) -> None:
        if not self._saves_seq:
            return
        seq = self._seq
        if self._reserves and self._reserved > seq:
            reserved, self._reserved = self._reserved, seq
            run_seq_release(run_id=self.run_id, reserved=reserved, seq=seq)
            self._saved_seq = max(self._saved_seq, seq)
        elif seq > self._saved_seq:
            run_seq_save(run_id=self.run_id, seq=seq)
            self._saved_seq = seq

    def seq_saved(self, seq: int) -> None:
        """The run's row holds ``seq`` already (written with its end): :meth:`close` saves
        only a later one."""
        self._saved_seq = max(self._saved_seq, seq)

    # -- internals -----------------------------------------------------------------------
    def _flush_due(self, now: float) -> None:
        """The sweep's flush, on the delivery's thread or loop: the waiting text, if it is
        still waiting and due at ``now``."""
        with self._lock:
            if self._due and self._due <= now:
                self._flush_locked(on_loop=True)

    def _flush_locked(self, *, on_loop: bool = False) -> None:
        self._due = 0.0
        if not self._buffer:
            if self._held and not self.hold() and not self.fence():  # renewed since: what was held goes out
                self._release_held_locked(on_loop=on_loop)
            return
        delta = "".join(self._buffer)
        self._buffer.clear()
        self._buffered = 0
        self._send_locked({"type": "text.delta", "delta": delta}, on_loop=on_loop)

    def _send_locked(self, body: dict, *, on_loop: bool = False) -> dict:
        """Number ``body`` and queue it for the drain — after any events held while the run's
        lease was suspended — or hold it (``hold``), or drop it (``fence``). ``on_loop``: called
        on the publisher loop itself (the sweep), which needs no cross-thread wake-up."""
        if self.fence():
            self.fenced_count += 1 + len(self._held)
            self._held.clear()
            return {"type": body["type"], "run_id": self.run_id, "seq": None, "fenced": True}
        if self.hold():
            self._hold_locked(body)
            return {"type": body["type"], "run_id": self.run_id, "seq": None, "held": True}
        self._release_held_locked(on_loop=on_loop)
        return self._number_locked(body, on_loop=on_loop)

    def _release_held_locked(self, *, on_loop: bool = False) -> None:
        """Number and queue the events held while the lease was suspended, in order."""
        if self._held:
            held, self._held = self._held, []
            for earlier in held:
                self._number_locked(earlier, on_loop=on_loop)

    HELD_DELTA_MAX_CHARS = 65536  # held text deltas merge up to this size per event

    def _hold_locked(self, body: dict) -> None:
        """Keep ``body`` until the lease is renewed; consecutive text deltas merge into one."""
        last = self._held[-1] if self._held else None
        if (body["type"] == "text.delta" and last is not None and last["type"] == "text.delta"
                and len(last["delta"]) < self.HELD_DELTA_MAX_CHARS):
            last["delta"] += body["delta"]
        else:
            self._held.append(body)

    def _number_locked(self, body: dict, *, on_loop: bool = False) -> dict:
        self._seq += 1
        event = {"type": body.pop("type"), "run_id": self.run_id, "seq": self._seq, **body}
        self._last_sent = self._clock()
        if self._publisher:
            self._outbox.append(event)
            self._publisher.wake(self)
            return event
        loop = self._live_loop()
        if on_loop:
            loop.call_soon(self._enqueue, event)  # the same FIFO queue, so the order holds
        else:
            loop.call_soon_threadsafe(self._enqueue, event)
        return event

    def _live_loop(self) -> asyncio.AbstractEventLoop:
        """The publisher loop; if the one we started on has closed (a server shutting down,
        a test's loop), move to the current publisher loop with whatever was still queued."""
        if self._loop.is_closed():
            self._loop = publisher_loop()
            self._loop_sweep = _loop_sweep(self._loop)
            self._drain_task = None
            if self._due:  # text waiting on the closed loop's sweep: the new one sends it
                window = self.window_s if self.window_s is not None else coalesce_window_s()
                self._loop_sweep.waiting(self, self._due, window)
            if self._outbox:
                self._loop.call_soon_threadsafe(self._restart_drain)
        return self._loop

    def _restart_drain(self) -> None:
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = self._loop.create_task(self._drain())

    def _enqueue(self, event: dict) -> None:  # on the loop
        self._outbox.append(event)
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = self._loop.create_task(self._drain())
        if event["type"] == "text.delta":
            self._loop_sweep.linger()

    async def _drain(self) -> None:
        """The event-loop delivery (embedded mode, or a layer other than Redis Pub/Sub): log,
        then publish through the layer — a subscriber that sees a gap fills it from the log."""
        log = event_log()
        while self._outbox:
            event = self._outbox.popleft()
            if self._reserves and event["seq"] > self._reserved:
                await self._reserve_past(event["seq"])
            if await self._log_with_retry(event, functools.partial(log.append, self.run_id, event)) != REFUSED:
                try:
                    await self._layer.group_send(self.group, {"type": GROUP_MESSAGE_TYPE, "event": event})
                    self.sent_count += 1
                except Exception:  # a broken layer must not kill the run; the DB keeps the text
                    logger.exception("run %s: could not publish %s seq %s", self.run_id, event["type"],
                                     event["seq"])
            self._settled_seq = event["seq"]

    async def _reserve_past(self, seq: int) -> None:
        """Save a reservation of ``EVENTS_SEQ_RESERVE`` seqs from ``seq`` on (a database write
        off the loop) before ``seq`` is logged or published. While the database does not
        answer, the run's events wait (retried every 0.5 s); after ``EVENTS_LOG_RETRY_S`` they go
        out unreserved — a stream stalled for good is worse than the rare reuse it guards."""
        upto = seq + max(1, int(settings.EVENTS_SEQ_RESERVE)) - 1
        give_up_at = time.monotonic() + settings.EVENTS_LOG_RETRY_S
        while True:
            try:
                await db_async(run_seq_reserve)(run_id=self.run_id, upto=upto)
            except Exception as exc:
                if time.monotonic() >= give_up_at:
                    logger.error("run %s: could not reserve seqs past %s (%s: %s); publishing unreserved",
                                 self.run_id, seq, type(exc).__name__, exc)
                    self._reserved = max(self._reserved, seq)
                    return
                await asyncio.sleep(0.5)
                continue
            self._reserved = max(self._reserved, upto)
            return

    async def _log_with_retry(self, event: dict, append) -> str:
        """Run ``append()`` — the event log's append — retrying with backoff (0.2 s doubling to 2 s) while the log
        is unreachable (a Redis restart), until ``EVENTS_LOG_RETRY_S`` after the outage began
        for this emitter; the run's later events wait behind it, so the order holds. The
        deadline is per outage, not per event: once it has passed, each further event gets
        one try until an append succeeds again, so a long outage costs the run
        ``EVENTS_LOG_RETRY_S`` once instead of once per event (the outbox would otherwise
        drain at one event per ``EVENTS_LOG_RETRY_S`` and the stream stall for hours).

        Returns ``LOGGED``; ``REFUSED`` when the log refused the seq on the first try (another
        writer owns the run: not published); ``UNLOGGED`` when the log stayed down (the caller
        may still publish live). A refusal after a failed try means that try reached the log
        before its connection broke, so it counts as logged."""
        attempt = 0
        while True:
            attempt += 1
            try:
                logged = await append()
            except Exception as exc:
                delay = self._outage.failed(self.run_id, exc, time.monotonic(), f"{event['type']} seq {event['seq']}")
                if delay is None:
                    return UNLOGGED
                await asyncio.sleep(delay)
                continue
            self._outage.answered()
            if logged or attempt > 1:
                return LOGGED
            self.fenced_count += 1
            logger.warning("run %s: seq %s refused by the event log (stale writer); not published",
                           self.run_id, event["seq"])
            return REFUSED

    async def _wait_drained(self) -> None:
        await asyncio.sleep(0)  # let call_soon_threadsafe callbacks queued before us run
        while self._drain_task is not None and not self._drain_task.done():
            await asyncio.shield(self._drain_task)
            await asyncio.sleep(0)
