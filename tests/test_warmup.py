"""Start-up warm-up (config.warmup): the ASGI application's import loads what a web
process's first requests would otherwise import on their threads, and opens no connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
import config.asgi
from django.urls import get_resolver
from config.celery import app
print(json.dumps({
    "urlconf": "url_patterns" in get_resolver().__dict__,  # the cached_property was evaluated
    "views": [m in sys.modules for m in ("knowledge.api", "knowledge.snippets", "chat.api.views", "bs4")],
    "pool": app.amqp._producer_pool is not None,
}))
"""


@pytest.mark.parametrize("executor", ["celery", "embedded"])
def test_importing_the_asgi_application_warms_the_process(executor):
    """In a fresh process with the real settings; the broker URL points at a closed port, so a
    warm-up that tried to connect would hang or fail here."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.local", "SECRET_KEY": "t",
           "RUN_EXECUTOR": executor, "CELERY_BROKER_URL": "redis://127.0.0.1:9/0"}
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout.strip().splitlines()[-1])
    assert state["urlconf"] is True
    assert state["views"] == [True, True, True, True]
    assert state["pool"] is (executor == "celery")  # embedded mode publishes nothing
