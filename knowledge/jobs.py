"""Where uploaded files are imported: the same executor choice as runs (``RUN_EXECUTOR``).

* ``embedded`` — a small thread pool of the web process (``KNOWLEDGE_IMPORT_THREADS``, 2):
  parsing a PDF is CPU-bound, so a few threads are enough and chat turns keep theirs.
* ``celery`` — the task ``knowledge.import_upload`` on any worker.
* ``none`` — nothing runs (tests of the HTTP layer only).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable

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
                max_workers=int(getattr(settings, "KNOWLEDGE_IMPORT_THREADS", 2)), thread_name_prefix="kb-import"
            )
        return _pool


IMPORT_UPLOAD_TASK = "knowledge.import_upload"  # knowledge.tasks.import_upload_task

_processor: Callable[..., str] | None = None


def set_upload_processor(processor: Callable[..., str]) -> None:
    """What the embedded pool runs for an upload id (``knowledge_upload_process(upload_id=…)``;
    set once by ``KnowledgeConfig.ready``, as the Celery task names it): the executor never
    imports the import code, which enqueues through it."""
    global _processor
    _processor = processor


def _run_embedded(upload_id: str) -> str:
    close_old_connections()
    try:
        if _processor is None:
            raise RuntimeError("no upload processor: KnowledgeConfig.ready() has not run")
        return _processor(upload_id=upload_id)
    except Exception:
        logger.exception("upload %s failed in the embedded executor", upload_id)
        return ""
    finally:
        close_old_connections()


def enqueue_upload(upload_id) -> concurrent.futures.Future | None:
    """Hand upload ``upload_id`` to the executor; call after commit. Returns the Future in
    embedded mode (tests may wait on it)."""
    executor = settings.RUN_EXECUTOR
    if executor == "none":
        return None
    if executor == "celery":
        from celery import current_app as app  # the project's (config.celery)

        # The default priority said explicitly: app.send_task does not apply task_default_priority
        # (only Task.apply_async does), and a message without one was taken ahead of every turn.
        app.send_task(IMPORT_UPLOAD_TASK, args=[str(upload_id)], priority=app.conf.task_default_priority)
        return None
    return _embedded_pool().submit(_run_embedded, str(upload_id))
