"""Log output: one line per record, no tracebacks for expected 4xx answers."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests.conftest import make_thread

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("debug", ["true", "false"])
def test_a_log_line_is_printed_once(debug):
    """In a fresh process with the real settings (pytest adds its own handlers here)."""
    code = (f"import logging; logging.getLogger('django.request').error('marker-{debug}'); "
            f"logging.getLogger('agents.loop.turn').warning('marker-{debug}')")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.local", "DEBUG": debug, "SECRET_KEY": "t"}
    result = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert output.count(f"marker-{debug}") == 2, output


@pytest.mark.django_db(transaction=True)
def test_expected_403_and_404_answers_are_not_logged(users, workspaces, offline, caplog):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    client = APIClient()
    client.force_authenticate(users["bob"])
    with caplog.at_level(logging.INFO):
        assert client.get(f"/api/v1/threads/{thread.pk}/").status_code == 404
        client.force_authenticate(None)
        assert client.get("/api/v1/threads/").status_code in (401, 403)
    assert [r for r in caplog.records if r.name.startswith("django")] == []
