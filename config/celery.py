"""Celery application.

Workers run the agent loop (``agents.tasks.run_turn_task``). Turns are I/O-bound, so start
workers with a thread pool: ``celery -A config worker --pool threads --concurrency 32``.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("chatplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
