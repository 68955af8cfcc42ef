"""Run leases: which worker owns a running turn, renewed by a heartbeat thread.

A worker claims a run (``lifecycle.run_claim``) and the process's heartbeat thread (one per
process, one database connection, however many runs) renews its lease every
``min(RUN_HEARTBEAT_S, STREAM_PERSIST_INTERVAL_S)`` seconds for as long as the turn runs —
independently of upstream traffic, so a model that takes 20 s to its first token (or stalls mid-stream) is not taken for
a dead worker. The heartbeat renews through its own database alias (``LEASE_DB_ALIAS``: a
connection of its own on PostgreSQL, kept while the process lives and opened again at the
next beat after an error), so renewals never queue behind turns for connections: a heartbeat
waiting for the shared pool under load would fence healthy runs, which would then stop with no
terminal event and run again from the start; and a pool of its own re-opens cut connections
only after a backoff, which would fence runs after a few seconds of killed connections. A worker that dies stops
renewing; the reaper (``agents.runs.reaper``) sees the expired lease within ``RUN_LEASE_S`` +
``RUN_REAPER_PERIOD_S`` seconds of the last renewal and re-queues the run, at most
``RUN_MAX_ATTEMPTS`` times (``Run.attempts`` counts these recoveries).

Fencing: a worker whose lease may have expired must not write. When no renewal has succeeded
for ``FENCE_FRACTION`` × ``RUN_LEASE_S`` (the database unreachable, the process frozen) — before
anyone else can take the run — the lease is *suspended*: the run's emitter holds its events
(``RunEmitter.hold``) instead of publishing them, and the turn's thread waits at its next
check (``tick()``, ``wait_owned()``) while the model's stream, read on the event loop, goes on
into the held events. A renewal that succeeds proves the run is still this worker's (the
renewal's UPDATE matches its owner and ``running``) and extends the lease: the held events go
out in order and the turn goes on — a PostgreSQL restart of a minute in the middle of an answer
no longer costs the answer (the model was asked again). The lease is *lost* when a renewal
finds another owner, or after ``RUN_LEASE_HOLD_S`` of suspension: from then on ``tick()``
raises :class:`LeaseLost` and the emitter drops every event, held ones too, so two writers
never publish the same seq. While its beats fail, the heartbeat tells the reaper through the
default cache that the run's worker is alive (:func:`unrenewed_key`, expiring after
``RUN_LEASE_S``): the reaper leaves such a run to it, so the worker's first beat after the
database is back renews the lease before a reaper can hand the run on.

The heartbeat also reads the cancel flag, so a cancelled run stops within a heartbeat — at once
when the cancel wakes it (:func:`lease_check_now`, ``agents.runs.control``) — and it
saves the text each turn has streamed so far (``RunLease.persist_stream``) in the renewal's
transaction: one UPDATE of the process's streaming messages per beat instead of one save per
run per interval from each turn thread, and never a write from a worker that lost the run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, OperationalError, connections, transaction

from agents.models import Run
from chat.services import messages_save_streamed
from chatplatform.db import error_line

from . import lifecycle

logger = logging.getLogger(__name__)

FENCE_FRACTION = 0.8  # of RUN_LEASE_S without a successful renewal: hold events, wait
IDLE_WAIT_S = 60.0  # an idle heartbeat (its own alias) wakes this often, or at a new lease


class LeaseLost(Exception):
    """Another worker took the run over, or may have: stop without writing."""


def worker_identity() -> str:
    """``host:pid:thread`` — unique per worker thread, readable in the admin."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class RunLease:
    """The running worker's side of a lease.

    ``start()`` starts the heartbeat thread; ``tick()`` (cheap: no I/O) raises ``LeaseLost``
    once the lease is lost, waits while it is suspended (on a turn's thread, never on an event
    loop) and returns True once the run was cancelled; ``stop()`` ends the heartbeat;
    ``release()`` clears the lease in the database, unless the run's end already did
    (``cleared``: ``lifecycle.run_finish`` clears it with the status).
    """

    def __init__(self, *, run_id, owner: str, seq_source: Callable[[], int] | None = None) -> None:
        self.run_id = run_id
        self.owner = owner
        self.seq_source = seq_source  # () -> int: the emitter's seq, saved with each renewal
        self.interval = min(settings.RUN_HEARTBEAT_S, settings.STREAM_PERSIST_INTERVAL_S)
        self.fence_after_s = settings.RUN_LEASE_S * FENCE_FRACTION
        self.hold_s = settings.RUN_LEASE_HOLD_S
        self._renewed_at = time.monotonic()  # the claim was the first renewal
        self._renewal = threading.Condition()  # notified at each renewal (wait_owned)
        self._suspended_logged = False
        self._cancelled = threading.Event()
        self._lost = threading.Event()
        self._stopped = False  # left the heartbeat: the run's end is being written
        self.cleared = False  # the run's final transition cleared the lease already
        # (message id, () -> fields) the heartbeat saves; the last saved (message id, fields)
        self._streamed: tuple[Any, Callable[[], dict[str, str]]] | None = None
        self._last_streamed: tuple[Any, Callable[[], dict[str, str]]] | None = None  # kept after the stream
        self._saved: tuple[Any, dict[str, str]] | None = None

    # -- the worker thread's side -------------------------------------------------------------
    def tick(self) -> bool:
        """True once the run was cancelled; raises :class:`LeaseLost` once the lease is lost.
        While the lease is suspended (no renewal for ``fence_after_s``) a call on a turn's
        thread waits for a renewal (:meth:`wait_owned`); on an event loop it returns at once
        (the emitter holds the events meanwhile)."""
        if self.lost:
            raise LeaseLost(f"run {self.run_id}: lease lost")
        if self.suspended and asyncio._get_running_loop() is None:
            self.wait_owned()
        return self._cancelled.is_set()

    @property
    def suspended(self) -> bool:
        """No renewal for ``fence_after_s`` (and not lost): publish nothing, write nothing, wait
        for the next renewal to show the run is still this worker's."""
        since = time.monotonic() - self._renewed_at
        if since <= self.fence_after_s or self.lost:
            return False
        if not self._suspended_logged:
            self._suspended_logged = True
            logger.warning("run %s: lease not renewed for %.1f s; holding its events until a renewal succeeds "
                           "(up to %.0f s)", self.run_id, since, self.hold_s)
        return True

    @property
    def lost(self) -> bool:
        """Another owner took the run; or no renewal for ``fence_after_s`` + ``RUN_LEASE_HOLD_S``;
        or for ``fence_after_s`` once the run was cancelled (its renewals stop then, and the
        reaper closes a cancel its worker left open once the lease expires)."""
        if not self._lost.is_set():
            since = time.monotonic() - self._renewed_at
            if since > self.fence_after_s and (self._cancelled.is_set() or since > self.fence_after_s + self.hold_s):
                logger.warning("run %s: lease not renewed for %.1f s; this worker gives the run up", self.run_id,
                               since)
                self._lost.set()
        return self._lost.is_set()

    def wait_owned(self) -> None:
        """On a turn's thread, before it writes: wait while this worker cannot show the run is
        still its own — the lease suspended, or the process's heartbeat failing (its last beat
        found no database, so a write now would wait ``DB_POOL_TIMEOUT_S`` and fail) — until a
        renewal of this lease succeeds. Raises :class:`LeaseLost` once the lease is lost
        (another owner, or ``RUN_LEASE_HOLD_S`` of suspension); returns at once otherwise."""
        if not (self.suspended or _heartbeat.failing):
            if self.lost:
                raise LeaseLost(f"run {self.run_id}: lease lost")
            return
        waited_from = time.monotonic()
        with self._renewal:
            while self._renewed_at < waited_from:
                if self.lost:
                    raise LeaseLost(f"run {self.run_id}: lease lost")
                if self._stopped or self._cancelled.is_set():
                    return
                self._renewal.wait(0.5)
        logger.info("run %s: lease renewed after %.1f s without; the turn goes on", self.run_id,
                    time.monotonic() - waited_from)

    def _renewed(self, now: float) -> None:
        with self._renewal:
            self._renewed_at = now
            self._suspended_logged = False
            self._renewal.notify_all()

    def persist_stream(self, message_id: Any = None, fields: Callable[[], dict[str, str]] | None = None) -> None:
        """Have the heartbeat save ``fields()`` (``{"content": str, "reasoning": str?}``: what
        the turn has streamed so far) into the streaming message ``message_id`` at each beat —
        every ``interval`` seconds, so a crash loses at most that much text — when it changed
        since the last save, in the renewal's transaction: nothing is written once another
        worker owns the run, nor once the message is no longer ``streaming``. ``fields`` runs
        on the heartbeat thread: it must only read (e.g. join the pieces the turn appends).
        Called with no arguments, it stops; the turn then saves the message itself."""
        self._streamed = (message_id, fields) if fields is not None else None
        if fields is not None:
            self._last_streamed = self._streamed

    def streamed_text(self) -> tuple[Any, dict[str, str]] | None:
        """``(message_id, fields)`` of the text the turn streamed last (the current stream, or the
        last one that ended), read now — all of it, not what the heartbeat last saved (up to an
        interval older): for closing that message when the turn fails after its stream (the
        message's own save found no database). None when the turn streamed nothing. Call on
        the turn's thread."""
        source = self._last_streamed
        return (source[0], source[1]()) if source is not None else None

    def start(self) -> RunLease:
        """Join the process's heartbeat."""
        _heartbeat.add(self)
        return self

    def stop(self) -> None:
        """Leave the heartbeat (no renewal can race the run's final transition)."""
        self._stopped = True
        _heartbeat.discard(self)

    def release(self) -> None:
        self.stop()
        if not self.lost and not self.cleared:
            lifecycle.run_release(run_id=self.run_id, owner=self.owner)

    # -- called on the heartbeat thread ------------------------------------------------------
    def _renew(self) -> None:
        seq = self.seq_source() if self.seq_source is not None else None
        if lifecycle.run_lease_renew(run_id=self.run_id, owner=self.owner, seq=seq, using=_alias()):
            self._renewed(time.monotonic())
            return
        self._not_renewed()

    def _not_renewed(self) -> None:
        if self._stopped:  # the renewal raced the run's own end (the driver stops before it finishes)
            return
        row = Run.objects.using(_alias()).filter(pk=self.run_id).values("status", "lease_owner").first()
        if row is None or row["status"] == Run.Status.CANCELLED:
            self._cancelled.set()
        elif row["lease_owner"] != self.owner:
            logger.warning("run %s: lease taken over by %s", self.run_id, row["lease_owner"])
            self._lost.set()


def lease_check_now(run_id) -> bool:
    """Have this process's heartbeat beat now when it holds ``run_id``'s lease (a cancel just
    committed, ``agents.runs.control``): the beat's renewal finds the run cancelled and the
    turn stops at its next check — the next token, tool tick or ``PROVIDER_STREAM_POLL_S`` —
    instead of up to a heartbeat interval later. Returns whether this process holds the run;
    no I/O here (safe on an event loop)."""
    return _heartbeat.wake(run_id)


def unrenewed_key(run_id) -> str:
    """The default cache's key saying ``run_id``'s worker is alive but could not renew its lease
    (its value: the worker's identity), set by :func:`report_unrenewed`."""
    return f"run-lease:unrenewed:{run_id}"


def report_unrenewed(leases: list[RunLease]) -> None:
    """After a failed beat: tell the reaper, through the default cache (Redis in production),
    that these runs' worker is alive and holds them — each key expires after ``RUN_LEASE_S``,
    so a worker that dies stops vouching for its runs within a lease. Best effort: a cache
    error (Redis down too) is logged at debug level, and the reaper then hands the runs on
    once their leases have expired, as for a dead worker."""
    if not leases:
        return
    try:
        cache.set_many({unrenewed_key(lease.run_id): lease.owner for lease in leases},
                       timeout=max(1, int(settings.RUN_LEASE_S)))
    except Exception:  # noqa: BLE001 - the reaper then treats the runs as a dead worker's
        logger.debug("could not report %d unrenewed leases to the cache", len(leases), exc_info=True)


def _alias() -> str:
    """The heartbeat's database alias: ``leases`` when configured (PostgreSQL), else default."""
    return "leases" if "leases" in settings.DATABASES else "default"


class _Heartbeat:
    """One daemon thread per process renewing every registered lease each interval."""

    def __init__(self) -> None:
        self._leases: set[RunLease] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._woken = threading.Event()  # beat now instead of at the end of the interval
        self._failing = False  # the last beat failed (an outage: its traceback was logged once)

    @property
    def failing(self) -> bool:
        """The last beat failed (no database for the renewals)."""
        return self._failing

    def wake(self, run_id) -> bool:
        """Beat now when this process holds ``run_id``'s lease; False when it does not."""
        with self._lock:
            held = any(str(lease.run_id) == str(run_id) for lease in self._leases)
        if held:
            self._woken.set()
        return held

    def add(self, lease: RunLease) -> None:
        with self._lock:
            self._leases.add(lease)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="run-heartbeat", daemon=True)
                self._thread.start()
        self._woken.set()  # an idle heartbeat beats for it now

    def discard(self, lease: RunLease) -> None:
        with self._lock:
            self._leases.discard(lease)

    def _loop(self) -> None:
        while True:
            with self._lock:
                leases = list(self._leases)
                if not leases and _alias() == "default":  # no connection of its own to keep
                    self._thread = None
                    connections[_alias()].close()
                    return
            if not leases:  # idle: keep the thread and its connection for the next run's renewals
                self._woken.wait(IDLE_WAIT_S)
                self._woken.clear()
                continue
            interval = min(lease.interval for lease in leases)
            started = time.monotonic()
            with self._lock:
                due = [lease for lease in leases if lease in self._leases]
            due = [lease for lease in due if not lease.lost and not lease._cancelled.is_set()]
            try:
                try:
                    self._beat(due)
                except OperationalError:  # its connection was dropped while idle: one fresh try
                    connections[_alias()].close()
                    self._beat(due)
            except Exception as exc:  # the database is unreachable: retry at the next beat
                # The traceback once per outage; each later beat one line (an outage logged a
                # traceback every second per worker).
                first = not self._failing
                self._failing = True
                logger.warning("lease renewal of %d runs failed: %s", len(due), error_line(exc), exc_info=first)
                connections[_alias()].close()
                report_unrenewed(due)
            else:
                if self._failing:
                    logger.info("lease renewal works again")
                self._failing = False
            # A wake during the beat is kept: the next wait returns at once and beats again.
            self._woken.wait(max(0.05, interval - (time.monotonic() - started)))
            self._woken.clear()

    @staticmethod
    def _beat(due: list[RunLease]) -> None:
        """Renew every lease in ``due`` and save their streamed text, all in one transaction
        (the renewal's row locks hold off a takeover until the text is written)."""
        if not due:
            return
        streamed = {}
        for lease in due:
            if (source := lease._streamed) is not None:
                saving = (source[0], source[1]())
                if saving != lease._saved:
                    streamed[str(lease.run_id)] = saving
        alias = _alias()
        with transaction.atomic(using=alias):
            renewed = lifecycle.run_leases_renew(leases=[
                (lease.run_id, lease.owner, lease.seq_source() if lease.seq_source is not None else None)
                for lease in due], using=alias)
            texts = {message_id: fields for run_id, (message_id, fields) in streamed.items() if run_id in renewed}
            try:  # a text the database refuses must not cost every run its renewal
                with transaction.atomic(using=alias):
                    messages_save_streamed(texts=texts, using=alias)
            except DatabaseError as exc:
                streamed = {}
                logger.warning("streamed text of %d messages not saved (%s: %s); the next beat tries again",
                               len(texts), type(exc).__name__, exc)
        now = time.monotonic()
        for lease in due:
            if (run_id := str(lease.run_id)) in renewed:
                lease._renewed(now)
                if run_id in streamed:
                    lease._saved = streamed[run_id]
            else:
                lease._not_renewed()


_heartbeat = _Heartbeat()
