"""Prepared statements on PostgreSQL (real PostgreSQL; issue 18).

With the pool, the settings turn on psycopg's server-side binding and prepared statements
(``DB_PREPARE_THRESHOLD``, default 5): a statement a connection has run that many times is
prepared on it, so PostgreSQL parses and plans a run's hot statements once per connection.
These tests check that the settings really get there (a statement run six times shows in the
session's ``pg_prepared_statements``, one run once does not) and that the turn path works
with them: turns end ``completed`` on connections that hold prepared statements.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from agents.models import Run
from agents.runs.executors import drain_embedded
from agents.services import run_create
from chat.models import Message
from tests.conftest import make_thread

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


def _prepared() -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cur.fetchall()]


def test_a_statement_run_past_the_threshold_is_prepared_on_its_connection(users):
    assert connection.vendor == "postgresql"
    threshold = settings.DB_PREPARE_THRESHOLD
    assert threshold >= 0 and connection.settings_dict["OPTIONS"]["server_side_binding"] is True
    alice = users["alice"]
    with connection.cursor():
        pass  # one connection for the whole test (the pool hands it out until close)
    for _ in range(threshold + 1):
        assert Run.objects.filter(user_id=alice.pk, model="prepared-statement-probe").count() == 0
    list(Message.objects.filter(content="run once, never prepared"))
    statements = _prepared()
    assert any('"agents_run"' in s and "COUNT(*)" in s and "$" in s for s in statements), statements
    assert not any("run once, never prepared" in s or ('"chat_message"' in s and '"content" = $' in s)
                   for s in statements), statements


def test_turns_complete_on_connections_with_prepared_statements(users, workspaces, offline, settings):
    settings.MAX_ACTIVE_RUNS_PER_USER = 100
    settings.RUN_RATE_LIMIT = "1000/60"
    alice = users["alice"]
    runs = []
    for i in range(settings.DB_PREPARE_THRESHOLD + 3):  # past the threshold on the turn threads' connections
        thread = make_thread(alice, workspaces["demo"], offline)
        runs.append(run_create(thread=thread, user=alice, content=f"Question {i}: what is a generator?").run)
        assert drain_embedded(30) == 0  # none still running
    assert [Run.objects.get(pk=r.pk).status for r in runs] == ["completed"] * len(runs)
    for run in runs:
        reply = Message.objects.filter(run=run, role="assistant").order_by("-position").first()
        assert reply.status == "complete" and reply.content.strip()


@pytest.mark.parametrize(("env", "expected"), [
    ({}, {"server_side_binding": True, "prepare_threshold": 5}),
    ({"DB_PREPARE_THRESHOLD": "0"}, {"server_side_binding": True, "prepare_threshold": 0}),
    ({"DB_PREPARE_THRESHOLD": "-1"}, {"server_side_binding": None, "prepare_threshold": None}),
    ({"DB_POOL": "false"}, {"server_side_binding": None, "prepare_threshold": None}),  # e.g. behind PgBouncer
])
def test_prepared_statement_settings(env, expected):
    """What the settings make of the environment (a fresh process: settings read it once)."""
    code = ("import json; from django.conf import settings; o = settings.DATABASES['default'].get('OPTIONS', {}); "
            "print(json.dumps({k: o.get(k) for k in ('server_side_binding', 'prepare_threshold')}))")
    base = {k: v for k, v in os.environ.items() if k not in ("DB_PREPARE_THRESHOLD", "DB_POOL")}
    out = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT, capture_output=True, text=True,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings.base", **env}, timeout=60, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected
