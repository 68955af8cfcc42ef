"""``agents.runs.executors.backlog`` against the real Celery broker (Redis): the reaper tells
a queue that is only backed up (every worker busy) from a lost broker message by it."""

from __future__ import annotations

import pytest

from agents.runs import executors
from chatplatform.celery import app

pytestmark = pytest.mark.services


@pytest.fixture
def broker(settings):
    settings.RUN_EXECUTOR = "celery"
    assert app.conf.broker_url.startswith("redis://")
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(app.conf.task_default_queue)
    yield
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(app.conf.task_default_queue)


def test_the_backlog_counts_the_turns_waiting_in_the_broker(broker):
    assert executors.backlog() == 0  # an empty queue has no key on Redis: counted as 0, not unknown
    for n in range(3):
        app.send_task(executors.RUN_TURN_TASK, args=[f"00000000-0000-0000-0000-00000000000{n}"])
    assert executors.backlog() == 3


def test_an_unreachable_broker_is_an_unknown_backlog(settings, monkeypatch):
    settings.RUN_EXECUTOR = "celery"
    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    assert executors.backlog() is None
