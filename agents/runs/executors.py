"""Where ``run_turn`` executes: one code path, two executors.

* ``embedded`` — a bounded thread pool inside the web process (no Redis, no worker).
* ``celery`` — the ``agents.run_turn`` task on a Celery worker (production), sent by name so
  this module does not import the task module.

Chosen by ``settings.RUN_EXECUTOR`` (``embedded`` unless ``REDIS_URL`` is set; ``none`` in
tests of the HTTP layer only).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading

from django.conf import settings
from django.db import close_old_connections

logger = logging.getLogger(__name__)

RUN_TURN_TASK = "agents.run_turn"

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
    from .driver import run_turn

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
        from chatplatform.celery import app

        app.send_task(RUN_TURN_TASK, args=[str(run_id)])
        return None
    return _embedded_pool().submit(_run_embedded, str(run_id))
