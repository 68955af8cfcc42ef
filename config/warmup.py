"""Start-up imports a web process would otherwise make on its first requests."""

from __future__ import annotations

from django.conf import settings


def warm_web_process() -> None:
    """Import now what a web process's first requests import lazily:

    * the URLconf: every view module and what they import (DRF, drf-spectacular,
      BeautifulSoup for knowledge snippets), about 0.3 CPU s;
    * in production (``RUN_EXECUTOR=celery``), the parts of the Celery publisher that its
      first ``send_task`` loads: kombu's producer pool with the Redis transport (about
      0.1 s) and the result backend (disabled, but resolved through the installed
      packages' entry points, about 16 ms).

    Made lazily, these imports run on request threads during a burst of first chats, while
    every other request of the burst waits for the import lock or the GIL. Opens no connection, so it
    is safe before a server forks its workers. Idempotent; called by ``config.asgi``
    before the start-up heap is frozen (``chatplatform.heap``)."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 — imports the URLconf and every view module
    if settings.RUN_EXECUTOR == "celery":
        from config.celery import app

        app.backend  # noqa: B018
        app.amqp.producer_pool  # noqa: B018
