"""Where ``run_turn`` executes: one code path, two executors.

* ``embedded`` — a bounded thread pool inside the web process (no Redis, no worker).
* ``celery`` — ``agents.tasks.run_turn_task`` on a Celery worker (production).

Chosen by ``settings.RUN_EXECUTOR`` (``embedded`` unless ``REDIS_URL`` is set).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading

from django.conf import settings
from django.db import close_old_connections

logger = logging.getLogger(__name__)

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _embedded_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=settings.EMBEDDED_EXECUTOR_THREADS, thread_name_prefix="run"
            )
        return _pool


def _run_embedded(run_id: str) -> None:
    from agents.loop import run_turn

    close_old_connections()
    try:
        run_turn(run_id=run_id)
    except Exception:
        logger.exception("run %s failed in the embedded executor", run_id)
    finally:
        close_old_connections()


def enqueue_run(run_id) -> concurrent.futures.Future | None:
    """Hand run ``run_id`` to the configured executor. Call after the run is committed
    (``transaction.on_commit``). Returns the Future in embedded mode (tests may wait on it)."""
    if settings.RUN_EXECUTOR == "none":  # tests of the HTTP layer only; nothing executes
        return None
    if settings.RUN_EXECUTOR == "celery":
        from agents.tasks import run_turn_task

        run_turn_task.delay(str(run_id))
        return None
    return _embedded_pool().submit(_run_embedded, str(run_id))
