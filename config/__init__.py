"""The composition root: settings, URLs, the ASGI application, the Celery app and the server
entry. Nothing below it imports it (the plumbing library is ``chatplatform``)."""

from .celery import app as celery_app

__all__ = ["celery_app"]
