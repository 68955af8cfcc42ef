"""Where ``run_turn`` executes: one code path, two executors.

* ``embedded`` — a bounded thread pool inside the web process (no Redis, no worker).
* ``celery`` — the ``agents.run_turn`` task on a Celery worker (production), sent by name so
  this module does not import the task module.

Chosen by ``settings.RUN_EXECUTOR`` (``embedded`` unless ``REDIS_URL`` is set; ``none`` in
tests of the HTTP layer only).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import logging
import threading

from django.conf import settings
from django.db import close_old_connections

logger = logging.getLogger(__name__)

RUN_TURN_TASK = "agents.run_turn"

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_pending: set[concurrent.futures.Future] = set()  # embedded turns not finished yet


def _embedded_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=settings.EMBEDDED_EXECUTOR_THREADS, thread_name_prefix="run"
            )
        return _pool


def _run_embedded(run_id: str) -> None:
    from .driver import run_turn_or_fail

    close_old_connections()
    try:
        run_turn_or_fail(run_id=run_id)
    except Exception:
        logger.exception("run %s failed in the embedded executor", run_id)
    finally:
        close_old_connections()


# Publishing to a broker that is down: a few quick tries, then give up (the reaper enqueues the
# run again once it has been queued for RUN_QUEUED_DEADLINE_S).
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}

# A re-queued turn's priority on the Redis broker. kombu's Redis transport keeps one list per
# priority step (0, 3, 6, 9) and a worker takes from the lowest step first: a turn that began
# before (its worker died, its message was lost, or it goes on after an approval decision) is
# taken before every task sent at CELERY_TASK_DEFAULT_PRIORITY (3: new turns, knowledge
# imports), instead of waiting behind the sends that came after it. Redis only: RabbitMQ
# ignores priorities on a queue without x-max-priority, and ranks a higher number first.
PRIORITY_REQUEUED = 0


def enqueue_run(run_id, *, requeued: bool = False) -> concurrent.futures.Future | None:
    """Hand run ``run_id`` to the configured executor. Call after the run is committed
    (``transaction.on_commit``). Returns the Future in embedded mode (tests may wait on it).

    ``requeued``: the run began before (the reaper hands on a dead worker's run or enqueues
    a lost message again; an approval decision lets a parked run go on). With Celery it is
    sent at ``PRIORITY_REQUEUED``, so a free worker thread takes it before every new turn and
    import (``CELERY_TASK_DEFAULT_PRIORITY``); the embedded pool is first come, first served.

    Never raises for an unreachable broker: the run stays ``queued`` and the reaper enqueues
    it again after ``RUN_QUEUED_DEADLINE_S`` (then fails it visibly after
    ``RUN_MAX_ATTEMPTS``), so a send while Redis restarts is accepted, not a 500."""
    if settings.RUN_EXECUTOR == "none":  # tests of the HTTP layer only; nothing executes
        return None
    if settings.RUN_EXECUTOR == "celery":
        from chatplatform.celery import app

        try:
            app.send_task(RUN_TURN_TASK, args=[str(run_id)], retry=True, retry_policy=PUBLISH_RETRY_POLICY,
                          priority=PRIORITY_REQUEUED if requeued else app.conf.task_default_priority)
        except Exception as exc:  # kombu OperationalError, redis ConnectionError, …
            logger.warning("run %s: could not reach the broker (%s: %s); the reaper will enqueue it again",
                           run_id, type(exc).__name__, exc)
        return None
    # The caller's context (an OpenTelemetry span of the request) goes along into the thread.
    future = _embedded_pool().submit(contextvars.copy_context().run, _run_embedded, str(run_id))
    with _pool_lock:
        _pending.add(future)
    future.add_done_callback(_forget)
    return future


def _forget(future: concurrent.futures.Future) -> None:
    with _pool_lock:
        _pending.discard(future)


def drain_embedded(timeout_s: float = 10.0) -> int:
    """Wait up to ``timeout_s`` seconds for every turn handed to this process's embedded pool
    to return (finished, parked or failed). Returns how many were still running at the
    deadline (0 when idle). Used at shutdown and between tests, so that no turn outlives
    the database it writes to."""
    with _pool_lock:
        pending = set(_pending)
    if not pending:
        return 0
    _done, not_done = concurrent.futures.wait(pending, timeout=timeout_s)
    return len(not_done)


def backlog() -> int | None:
    """How many turns wait for a free worker thread: the Celery broker's messages in the turn
    task's queue (``celery``; a passive ``queue_declare``, one Redis round trip), or the
    embedded pool's turns not started yet. None when it cannot be known (the broker is
    unreachable, ``RUN_EXECUTOR`` is ``none``). The reaper tells a queue that is only backed up
    (every worker busy) from a lost broker message with it (``agents.runs.reaper``)."""
    if settings.RUN_EXECUTOR == "celery":
        from celery.exceptions import CeleryError
        from kombu.exceptions import ChannelError, KombuError

        from chatplatform.celery import app

        try:
            with app.connection_for_read() as conn:
                try:
                    return conn.default_channel.queue_declare(queue=app.conf.task_default_queue,
                                                              passive=True).message_count
                except ChannelError:  # the Redis transport has no key for an empty queue
                    return 0
        except (CeleryError, KombuError, OSError) as exc:
            logger.info("broker backlog unknown: %s: %s", type(exc).__name__, exc)
            return None
    if settings.RUN_EXECUTOR == "embedded":
        with _pool_lock:
            return _pool._work_queue.qsize() if _pool is not None else 0
    return None
