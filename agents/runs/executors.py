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
import json
import logging
import threading
from collections.abc import Callable

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


_turn_runner: Callable[..., None] | None = None


def celery_app():
    """The project's Celery app (``config.celery``: the current app once Django has started);
    looked up, not imported, so this layer never imports the composition root."""
    from celery import current_app

    return current_app._get_current_object()


def set_turn_runner(runner: Callable[..., None]) -> None:
    """The function the embedded pool runs for a run id (``run_turn_or_fail(run_id=…)``, the
    driver's; set once by ``AgentsConfig.ready``, as the Celery task names it): the executors
    sit beside the driver and never import it."""
    global _turn_runner
    _turn_runner = runner


def _run_embedded(run_id: str) -> None:
    close_old_connections()
    try:
        if _turn_runner is None:
            raise RuntimeError("no turn runner: AgentsConfig.ready() has not run")
        _turn_runner(run_id=run_id)
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
        app = celery_app()

        try:
            app.send_task(RUN_TURN_TASK, args=[str(run_id)], retry=True, retry_policy=PUBLISH_RETRY_POLICY,
                          priority=PRIORITY_REQUEUED if requeued else app.conf.task_default_priority)
        except Exception as exc:  # kombu OperationalError, redis ConnectionError, …
            logger.warning("run %s: could not reach the broker (%s: %s); the reaper will enqueue it again",
                           run_id, type(exc).__name__, exc)
        return None
    # The caller's context (an OpenTelemetry span of the request) goes along into the thread.
    future = _embedded_pool().submit(contextvars.copy_context().run, _run_embedded, str(run_id))
    future.run_id = str(run_id)  # waiting_turns
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


def waiting_turns(run_ids) -> set[str] | None:
    """Of ``run_ids``, those whose turn the executor still holds, waiting for a free worker
    thread: a message in the Celery broker's lists for the turn task's queue (every priority
    step's list read, each message's arguments decoded: one Redis round trip per step, the
    whole backlog read), or a turn in the embedded pool not started yet. None when it cannot be
    known (the broker unreachable or not Redis, ``RUN_EXECUTOR`` none). The reaper tells a run
    waiting behind busy workers from one whose message was lost (a Redis restart) by it — a
    count of the backlog could not: the sends that came after a lost message filled it."""
    wanted = {str(run_id) for run_id in run_ids}
    if settings.RUN_EXECUTOR == "celery":
        app = celery_app()
        from celery.exceptions import CeleryError
        from kombu.exceptions import KombuError
        from redis.exceptions import RedisError

        found: set[str] = set()
        try:
            with app.connection_for_read() as conn:
                channel = conn.default_channel
                if not hasattr(channel, "_q_for_pri"):  # not kombu's Redis transport
                    return None
                queue = app.conf.task_default_queue
                for step in channel.priority_steps:
                    for raw in channel.client.lrange(channel._q_for_pri(queue, step), 0, -1):
                        message = channel.Message(json.loads(raw), channel=channel)
                        if message.headers.get("task") != RUN_TURN_TASK:
                            continue
                        args = message.decode()[0]  # Celery's body: [args, kwargs, embed]
                        if args and str(args[0]) in wanted:
                            found.add(str(args[0]))
        except (CeleryError, KombuError, RedisError, OSError, ValueError) as exc:
            logger.info("turns waiting in the broker unknown: %s: %s", type(exc).__name__, exc)
            return None
        return found
    if settings.RUN_EXECUTOR == "embedded":
        with _pool_lock:
            return {f.run_id for f in _pending if f.run_id in wanted and not f.running() and not f.done()}
    return None
