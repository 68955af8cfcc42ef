"""chatplatform: a self-hosted multi-user AI chat platform on Django."""

from .celery import app as celery_app

__all__ = ["celery_app"]
