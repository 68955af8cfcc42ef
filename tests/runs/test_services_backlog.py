"""``agents.runs.executors.waiting_turns`` and the turns' priorities against the real Celery
broker (Redis): the reaper tells a run waiting behind busy workers from a lost broker message
by it, and a re-queued turn goes first."""

from __future__ import annotations

import pytest

from agents.runs import executors
from config.celery import app

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


def test_the_turns_waiting_in_the_broker_are_found_by_run(broker):
    """The reaper asks which of its stale runs still have a turn in the broker (every priority
    step's list); a run whose message was lost is not among them, however many other turns
    and imports wait (a count of the backlog took them for it)."""
    from knowledge.jobs import enqueue_upload

    new, requeued, lost = (f"00000000-0000-0000-0000-00000000000{n}" for n in range(3))
    assert executors.waiting_turns([new, requeued, lost]) == set()  # an empty queue has no key on Redis
    executors.enqueue_run(new)
    executors.enqueue_run(requeued, requeued=True)  # another priority's list
    enqueue_upload(lost)  # an import whose argument happens to look like the lost run's id
    for n in range(3):
        executors.enqueue_run(f"00000000-0000-0000-0000-00000000001{n}")
    assert executors.waiting_turns([new, requeued, lost]) == {new, requeued}


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


def test_an_unreachable_broker_is_unknown_not_empty(settings, monkeypatch):
    settings.RUN_EXECUTOR = "celery"
    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    assert executors.waiting_turns(["00000000-0000-0000-0000-000000000000"]) is None
