"""The process's schedule ticker: a daemon thread calling ``services.schedules_tick`` every
``SCHEDULE_TICK_S`` seconds — in every Celery worker (``worker_ready``) and in the embedded
web process (``config.loop_binding``, beside the reaper). Many tickers are safe: each due
schedule and each pending fire is claimed by one transaction (skip-locked), so a fire happens
once across hosts; the tick period only bounds how late a fire starts."""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import OperationalError, close_old_connections, connection

from chatplatform.db import error_line
from chatplatform.dbconn import is_database_unavailable

from .services import schedules_tick

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_started = False


def tick_once() -> None:
    """One tick with fresh connections; errors are logged, never raised (the next tick retries)."""
    close_old_connections()
    try:
        try:
            schedules_tick()
        except OperationalError:  # a connection the server dropped while idle: one fresh try
            connection.close()
            schedules_tick()
    except Exception as exc:
        if is_database_unavailable(exc):
            logger.warning("schedule tick skipped: no database connection (%s)", error_line(exc))
        else:
            logger.exception("schedule tick failed")
    finally:
        close_old_connections()


def _loop() -> None:
    while True:
        time.sleep(settings.SCHEDULE_TICK_S)
        tick_once()


def start_ticker(**_signal_kwargs) -> None:
    """Start this process's ticker thread once (idempotent); off with ``SCHEDULE_TICKER_ENABLED``
    false (the tests drive ``schedules_tick`` themselves). Also a ``worker_ready`` receiver."""
    global _started
    if not settings.SCHEDULE_TICKER_ENABLED:
        return
    with _lock:
        if _started:
            return
        _started = True
    threading.Thread(target=_loop, name="schedule-ticker", daemon=True).start()
