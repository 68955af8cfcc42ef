"""PostgreSQL's connection pool under load (real PostgreSQL and Redis; issue 18).

* A burst of simultaneous turns larger than the pool completes: turn threads hand their
  connection back while the model streams, and the rest wait for one.
* A turn that cannot get a connection within ``DB_POOL_TIMEOUT_S`` fails visibly
  (``run.failed`` with ``database_unavailable``, the user's message kept) instead of staying
  queued with no event — the silent stall seen at 50 chats when PostgreSQL ran out of clients.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.db import connection

from agents.models import Run
from agents.runs.executors import drain_embedded
from agents.services import run_create
from chat.models import Message
from tests.conftest import make_thread

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def small_pool():
    """Replace the process's pool with one of ``max_size`` connections for the test."""
    options = connection.settings_dict["OPTIONS"]
    original = options["pool"]

    def resize(max_size: int, timeout: float) -> None:
        drain_embedded(30)
        connection.close()
        connection.close_pool()
        options["pool"] = {**original, "min_size": 1, "max_size": max_size, "timeout": timeout}

    yield resize
    drain_embedded(30)
    connection.close()
    connection.close_pool()
    options["pool"] = original


def _wait_terminal(run_ids, timeout: float = 60.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        statuses = dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "status"))
        connection.close()  # back to the pool: the test thread must not hold one while polling
        if all(s in Run.TERMINAL for s in statuses.values()) or time.monotonic() > deadline:
            return {str(k): v for k, v in statuses.items()}
        time.sleep(0.1)


def test_burst_of_turns_larger_than_the_pool_completes(users, workspaces, offline, small_pool, settings):
    assert connection.vendor == "postgresql"
    settings.OFFLINE_DELTA_DELAY_S = 0.01  # turns stream long enough to overlap
    settings.MAX_ACTIVE_RUNS_PER_USER = 100
    settings.RUN_RATE_LIMIT = "1000/60"
    small_pool(3, 10.0)
    threads = [make_thread(users["alice"], workspaces["demo"], offline) for _ in range(12)]
    runs = [run_create(thread=t, user=users["alice"], content=f"Question {i}: what is a context manager?").run
            for i, t in enumerate(threads)]
    connection.close()
    statuses = _wait_terminal([r.pk for r in runs])
    assert sorted(statuses.values()) == ["completed"] * 12
    stats = connection.pool.get_stats()
    assert stats["pool_max"] == 3
    assert stats.get("requests_queued", 0) > 0  # the burst really waited for connections
    for run in runs:
        reply = Message.objects.filter(run=run, role="assistant").order_by("-position").first()
        assert reply.status == "complete" and reply.content.strip()


def test_turn_without_a_connection_fails_visibly(users, workspaces, offline, small_pool, sink_for, caplog):
    small_pool(2, 1.0)
    thread = make_thread(users["alice"], workspaces["demo"], offline)  # the test thread's connection
    sink = sink_for(thread.pk)
    caplog.set_level(logging.WARNING, logger="agents.runs.driver")
    holding = threading.Event()

    def hog():  # holds the pool's other connection until the turn has given up waiting
        from django.db import connection as own

        with own.cursor() as cursor:
            cursor.execute("SELECT 1")
            holding.set()
            deadline = time.monotonic() + 30
            while not any("no database connection" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the turn never reported the missing connection"
                time.sleep(0.02)
        own.close()

    hogger = threading.Thread(target=hog)
    hogger.start()
    assert holding.wait(10)
    # The test thread keeps its connection: the turn's thread finds the pool empty.
    run = run_create(thread=thread, user=users["alice"], content="Still there?").run
    hogger.join(40)
    assert not hogger.is_alive()

    events = sink.until_terminal(run.pk, timeout=30)
    assert events[-1]["type"] == "run.failed"
    assert events[-1]["error"]["code"] == "database_unavailable"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert drain_embedded(10) == 0
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error["code"] == "database_unavailable"
    assert Message.objects.get(pk=run.user_message_id).content == "Still there?"  # the message is kept
