"""A cancel reaches the turn at once, not at its worker's next heartbeat (agents/runs/control.py).

The heartbeat intervals are set to a minute here, so only the wake can stop a stream before
it ends. Marked ``db_backends``: SQLite with the in-memory layer (the process wakes its own
heartbeat) and PostgreSQL + Redis (the cancel also goes out on the channel layer); the
Redis path alone is checked by the ``services`` test at the end, and across real processes
by ``tests/e2e/test_cancel.py``."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from channels.layers import get_channel_layer

from agents.models import Run
from agents.runs import control, lifecycle
from agents.runs.lease import RunLease, lease_check_now
from agents.services import run_cancel, run_create
from chat.models import Message
from chatplatform.loops import publisher_loop
from tests.conftest import joined_text
from tests.fakes.openai_server import text_chunks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slow_heartbeat(settings):
    settings.RUN_HEARTBEAT_S = settings.STREAM_PERSIST_INTERVAL_S = 60.0
    settings.RUN_LEASE_S = 300.0


@pytest.mark.db_backends
def test_a_cancel_stops_the_stream_without_waiting_for_the_heartbeat(users, alice_thread, fake_openai, sink_for,
                                                                       slow_heartbeat):
    words = " ".join(f"w{n}" for n in range(200))
    fake_openai.delay_s = 0.05  # 10 s of answer, far less than the heartbeat's minute
    fake_openai.script(text_chunks(words, pieces=200))
    sink = sink_for(alice_thread.pk)
    created = run_create(thread=alice_thread, user=users["alice"], content="talk")
    seen: list[dict] = []
    while joined_text(seen).count("w") < 3:
        seen.append(sink.until_any(created.run.pk))
    run_cancel(run=created.run, user=users["alice"])
    seen += sink.until_terminal(created.run.pk)
    assert seen[-1]["type"] == "run.cancelled"
    msg = Message.objects.get(thread=alice_thread, role="assistant")
    # What the person saw is what is kept, and the model was stopped mid-answer.
    assert msg.status == "cancelled" and msg.content == joined_text(seen)
    assert 0 < len(msg.content) < len(words) / 2
    assert Run.objects.get(pk=created.run.pk).status == "cancelled"


@pytest.mark.db_backends
def test_a_wake_beats_only_in_the_process_that_holds_the_run(users, alice_thread, settings, slow_heartbeat):
    settings.RUN_EXECUTOR = "none"
    run = run_create(thread=alice_thread, user=users["alice"], content="hi").run
    assert lifecycle.run_claim(run_id=run.pk, owner="test:1") is not None
    lease = RunLease(run_id=run.pk, owner="test:1").start()
    try:
        assert lease_check_now(uuid.uuid4()) is False  # not this process's run
        assert lifecycle.run_cancel_running(run_id=run.pk)
        assert lease_check_now(run.pk) is True
        deadline = time.monotonic() + 20  # far inside the heartbeat's minute
        while not lease.tick() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lease.tick() is True
    finally:
        lease.stop()


@pytest.mark.services
def test_a_run_check_through_redis_reaches_the_listener(monkeypatch):
    """Another process's cancel arrives as a ``run.check`` on the Redis channel layer; a
    malformed message is ignored and the listener goes on."""
    layer = get_channel_layer()
    assert type(layer).__name__ == "RedisPubSubLayer"
    woken: list[str] = []
    monkeypatch.setattr(control, "lease_check_now", woken.append)
    monkeypatch.setattr(control, "_listening", None)
    control.listen()
    loop = publisher_loop()
    wanted = str(uuid.uuid4())

    def send(message: dict) -> None:  # a PUBLISH to Redis, received back through the subscription
        asyncio.run_coroutine_threadsafe(layer.group_send(control.GROUP, message), loop).result(10)

    deadline = time.monotonic() + 20
    while wanted not in woken and time.monotonic() < deadline:  # until the listener has joined
        send({"type": control.MESSAGE_TYPE})  # no run id: ignored
        send({"type": "something.else", "run_id": "x"})  # not a check: ignored
        send({"type": control.MESSAGE_TYPE, "run_id": wanted})
        time.sleep(0.2)
    assert woken and set(woken) == {wanted}
    for task in asyncio.all_tasks(loop):  # this test's listener only (the patched module)
        if task.get_name() == "run-control":
            loop.call_soon_threadsafe(task.cancel)
