"""Run context on log lines: while a run executes (:func:`run_context`), every log record
carries ``run_id``, ``thread_id`` and ``user_id`` (empty outside a run). With
``LOG_FORMAT=json`` they are fields of each JSON line."""

from __future__ import annotations

import contextlib
import contextvars
import logging

_context: contextvars.ContextVar[dict | None] = contextvars.ContextVar("run_log_context", default=None)


@contextlib.contextmanager
def run_context(*, run_id, thread_id, user_id):
    token = _context.set({"run_id": str(run_id), "thread_id": str(thread_id), "user_id": str(user_id)})
    try:
        yield
    finally:
        _context.reset(token)


class RunContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _context.get() or {}
        for key in ("run_id", "thread_id", "user_id"):
            if not hasattr(record, key):
                setattr(record, key, ctx.get(key, ""))
        return True
