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
        executors.enqueue_run(f"00000000-0000-0000-0000-00000000000{n}")
    assert executors.backlog() == 3
    executors.enqueue_run("00000000-0000-0000-0000-000000000009", requeued=True)  # another priority's list
    assert executors.backlog() == 4


def test_a_requeued_turn_is_taken_before_the_new_turns_and_imports_sent_before_it(broker):
    """A run handed on from a dead worker (or going on after an approval) waits behind no send
    that came after it began; new turns and knowledge imports keep their order among
    themselves (an import sent without a priority went ahead of every new turn)."""
    from knowledge.jobs import enqueue_upload

    executors.enqueue_run("00000000-0000-0000-0000-000000000000")
    enqueue_upload("00000000-0000-0000-0000-0000000000a1")
    executors.enqueue_run("00000000-0000-0000-0000-000000000001")
    executors.enqueue_run("00000000-0000-0000-0000-000000000009", requeued=True)
    taken = []
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(app.conf.task_default_queue, no_ack=True)) is not None:
            args = message.decode()[0]  # Celery's body: [args, kwargs, embed]
            taken.append((message.headers["task"].split(".")[-1], args[0][-2:]))
    assert taken == [("run_turn", "09"), ("run_turn", "00"), ("import_upload", "a1"), ("run_turn", "01")]


def test_an_unreachable_broker_is_an_unknown_backlog(settings, monkeypatch):
    settings.RUN_EXECUTOR = "celery"
    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    assert executors.backlog() is None
