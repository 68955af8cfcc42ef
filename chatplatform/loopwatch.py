"""Event-loop stall watch: a process's event loop that does not come round is logged with
where it is, and counted — every stream the loop serves waits meanwhile, and nothing else
would say so.

One loop serves every websocket of a web process and, since models are read on it
(``PROVIDER_STREAM_ON_LOOP``), every model stream of a worker or of the embedded server. A
callback that blocks it (a synchronous database call, a large JSON document, a C extension
that keeps the GIL) stalls all of them at once, and from outside that looks like a slow model
or a dead worker. :class:`LoopWatch` makes it visible:

* a beat callback on the loop, every ``interval_s``, observes how late it ran in
  ``chatplatform_event_loop_lag_seconds`` and books the next beat;
* a daemon thread sleeps until the pending beat would be ``EVENT_LOOP_STALL_S`` late: if it
  has not run by then, the loop has not come round for at least that long, and the thread
  logs one warning naming the loop and the innermost frames of the loop's thread as they are
  at that moment (the code that holds the loop), and counts the stall in
  ``chatplatform_event_loop_stalls``. One warning per stall, however long it lasts.

A stall is measured from when the beat was due, so it is never overstated: a loop held for
``EVENT_LOOP_STALL_S`` + ``interval_s`` is always reported, a shorter hold only if a beat fell
due early in it.

Cost: every beat wakes an idle loop and the thread wakes about three times a second, so the
defaults (a beat every ``EVENT_LOOP_STALL_S`` / 2 = 125 ms) keep the watch to a small, fixed
CPU cost per process; beating more often multiplies it (``bench/loopwatch_cost.py``).
``EVENT_LOOP_STALL_S`` = 0 turns the watch off.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import weakref

from django.conf import settings
from prometheus_client import Counter, Histogram

logger = logging.getLogger(__name__)

LAG = Histogram(
    "chatplatform_event_loop_lag_seconds",
    "How late the event loop ran a timer callback (its lag: the time every stream of the process waited)",
    ["loop"], buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
STALLS = Counter("chatplatform_event_loop_stalls",
                 "Times the event loop did not come round for EVENT_LOOP_STALL_S (each logged with its stack)",
                 ["loop"])

STACK_FRAMES = 8  # innermost frames of the loop's thread in the warning
_watched: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> its LoopWatch
_lock = threading.Lock()


class LoopWatch:
    """Watch ``loop`` (running, or about to run, in one thread) under the label ``name``
    (``web``, ``worker``…). ``stall_s``: seconds a beat may be overdue before it counts as a
    stall; ``interval_s``: seconds between beats (default and at most ``stall_s`` / 2). The
    thread looks when the pending beat would be ``stall_s`` late, and every ``interval_s``
    during a reported stall. :meth:`stop` ends both; a closed loop ends them too."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, name: str, stall_s: float,
                 interval_s: float | None = None) -> None:
        self.loop = loop
        self.name = name
        self.stall_s = stall_s
        self.interval_s = min(interval_s or stall_s / 2, stall_s / 2)
        self.stalls = 0  # how many were reported (also in STALLS)
        self._due = time.monotonic()  # when the pending beat should run (monotonic s)
        self._loop_thread: int | None = None
        self._reported = False  # the current stall was logged
        self._stopped = threading.Event()
        self._lag = LAG.labels(name)
        self._count = STALLS.labels(name)

    def start(self) -> LoopWatch:
        """Schedule the beat on the loop (from any thread) and start the watching thread."""
        self.loop.call_soon_threadsafe(self._first_beat)
        threading.Thread(target=self._watch, name=f"loop-watch-{self.name}", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    # -- on the loop ------------------------------------------------------------------------
    def _first_beat(self) -> None:
        self._loop_thread = threading.get_ident()
        self._beat(time.monotonic())

    def _beat(self, due: float) -> None:
        now = time.monotonic()
        self._lag.observe(max(0.0, now - due))
        self._due = now + self.interval_s
        self._reported = False
        if not self._stopped.is_set():
            self.loop.call_at(self.loop.time() + self.interval_s, self._beat, self._due)

    # -- the watching thread ----------------------------------------------------------------
    def late_s(self) -> float:
        """Seconds the pending beat is overdue (0 while it is not due): the loop has not come
        round for at least this long."""
        return max(0.0, time.monotonic() - self._due)

    def _watch(self) -> None:
        wait = self.stall_s
        while not self._stopped.wait(wait):
            if self.loop.is_closed():
                return
            late = self.late_s()
            if late >= self.stall_s and not self._reported and self._loop_thread is not None:
                self._reported = True
                self.stalls += 1
                self._count.inc()
                frames = sys._current_frames()  # one snapshot for both
                busy = self.busy_threads(frames)
                logger.warning("event loop %s has not come round for %.0f ms: every stream it serves waits. "
                               "Its thread is at: %s.%s", self.name, late * 1000, self.where(frames),
                               f" Other threads running Python: {'; '.join(busy)}." if busy else "")
            # Look next when the pending beat would be stall_s late; during a reported stall,
            # every interval (a beat that runs ends it, and the next hold is a new stall).
            wait = self.interval_s if self._reported else max(self._due + self.stall_s - time.monotonic(), 0.005)

    def where(self, frames: dict | None = None) -> str:
        """The innermost ``STACK_FRAMES`` frames of the loop's thread, innermost first:
        ``function (file:line) <- caller (file:line) …`` — the callback that holds the loop —
        or, when it is in the loop's own machinery, ``between callbacks, waiting for the GIL or
        the OS (…)``: then :meth:`busy_threads` names who runs; ``"(not running)"`` if the
        thread has no frame. ``frames``: a ``sys._current_frames()`` snapshot (default: now)."""
        frame = (frames if frames is not None else sys._current_frames()).get(self._loop_thread)
        if frame is None:
            return "(not running)"
        stack = _frames(frame, STACK_FRAMES)
        code = frame.f_code
        if code.co_name in _BETWEEN_CALLBACKS and code.co_filename.endswith(_LOOP_FILES):
            return f"between callbacks, waiting for the GIL or the OS ({stack})"
        return stack

    def busy_threads(self, frames: dict | None = None, most: int = 4) -> list[str]:
        """Up to ``most`` other threads that are running Python code rather than waiting
        (``name: function (file:line) <- caller …``, three frames each). When the loop's own
        thread is between callbacks (its innermost frame is the loop's ``run``), it is waiting
        for the GIL or for the OS: one of these holds it."""
        names = {t.ident: t.name for t in threading.enumerate()}
        out = []
        for ident, frame in (frames if frames is not None else sys._current_frames()).items():
            if ident in (self._loop_thread, threading.get_ident()):
                continue
            code = frame.f_code
            if code.co_name in _IDLE or code.co_filename.endswith(_IDLE_FILES):
                continue
            out.append(f"{names.get(ident, ident)}: {_frames(frame, 3)}")
            if len(out) == most:
                break
        return out


# A thread whose innermost Python frame is one of these is waiting, not working.
_IDLE = frozenset({"wait", "_wait_for_tstate_lock", "get", "select", "poll", "sleep", "acquire", "_worker",
                   "run_forever", "accept", "readinto", "recv", "recv_into", "serve_forever", "_wait"})
_IDLE_FILES = (os.sep + "selectors.py", os.sep + "queue.py", os.sep + "threading.py")
# The loop's own thread at one of these is between callbacks: waiting for the GIL or the OS.
_BETWEEN_CALLBACKS = frozenset({"select", "_run_once", "run_forever", "run"})
_LOOP_FILES = ("selectors.py", "base_events.py", "runners.py")  # uvloop runs its loop in C, under runners.run


def _frames(frame, most: int) -> str:
    """``function (file:line) <- caller (file:line) …``, innermost first, at most ``most``
    frames. Read from the frame objects alone: this runs while a loop is stalled, so no
    source lines are read (``traceback.extract_stack`` would read every file)."""
    out = []
    while frame is not None and len(out) < most:
        out.append(f"{frame.f_code.co_name} ({_short(frame.f_code.co_filename)}:{frame.f_lineno})")
        frame = frame.f_back
    return " <- ".join(out)


def _short(path: str) -> str:
    """A project file relative to the project, ``…/site-packages/x/y.py`` → ``x/y.py``, the
    standard library's by its last two parts (``asyncio/events.py``)."""
    for marker in (str(settings.BASE_DIR) + os.sep, "site-packages" + os.sep):
        if marker in path:
            return path.split(marker, 1)[1]
    return os.sep.join(path.split(os.sep)[-2:])


def watch_loop(loop: asyncio.AbstractEventLoop, *, name: str) -> LoopWatch | None:
    """Watch ``loop`` once (idempotent per loop) with ``EVENT_LOOP_STALL_S``; None when that
    is 0 (off)."""
    stall_s = settings.EVENT_LOOP_STALL_S
    if stall_s <= 0:
        return None
    with _lock:
        watch = _watched.get(loop)
        if watch is None:
            watch = _watched[loop] = LoopWatch(loop, name=name, stall_s=stall_s).start()
        return watch
