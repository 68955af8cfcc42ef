"""A deliberately slow consumer against the real Redis channel layer: the layer drops what
exceeds a channel's capacity, and the cursor refills the gap from the Redis event log."""

import asyncio

import pytest
from channels.layers import channel_layers, get_channel_layer

from agents.events import thread_group
from agents.replay import RunStreamCursor
from agents.services import run_create
from chat.models import Message
from chatplatform.loops import run_coroutine
from knowledge.services import knowledge_item_create
from tests.conftest import make_thread

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tiny_capacity_layer(settings):
    config = dict(settings.CHANNEL_LAYERS["default"])
    config["CONFIG"] = {**config["CONFIG"], "capacity": 5}
    settings.CHANNEL_LAYERS = {"default": config}
    channel_layers.backends.pop("default", None)
    yield get_channel_layer()
    channel_layers.backends.pop("default", None)


def test_slow_consumer_loses_live_messages_but_not_events(users, workspaces, offline, tiny_capacity_layer, settings):
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "chatplatform.layers.RedisPubSubLayer"
    settings.EVENTS_COALESCE_WINDOW_S = 0.0  # every delta its own event: far over capacity
    knowledge_item_create(workspace=workspaces["demo"], owner=users["admin"], title="The with statement",
                          content="The with statement wraps a block with a context manager. " * 20)
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    layer = tiny_capacity_layer
    channel = run_coroutine(layer.new_channel())
    run_coroutine(layer.group_add(thread_group(thread.pk), channel))

    created = run_create(thread=thread, user=users["alice"], content="How does the with statement work?")
    import time

    deadline = time.monotonic() + 30
    while created.run.__class__.objects.get(pk=created.run.pk).status != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)

    async def drain():
        got = []
        while True:
            try:
                got.append((await asyncio.wait_for(layer.receive(channel), 0.5))["event"])
            except TimeoutError:
                return got

    received = run_coroutine(drain())
    run_coroutine(layer.group_discard(thread_group(thread.pk), channel))
    created.run.refresh_from_db()
    assert len(received) < created.run.last_event_seq  # the layer really dropped messages

    async def through_cursor():
        cursor = RunStreamCursor()
        out = []
        for event in received:
            out.extend(await cursor.accept(event))
        # The layer dropped the tail: nothing live would reveal it, the idle catch-up does.
        out.extend(await cursor.catch_up(str(created.run.pk)))
        return out

    delivered = run_coroutine(through_cursor())
    assert [e["seq"] for e in delivered] == list(range(1, created.run.last_event_seq + 1))
    final = Message.objects.filter(thread=thread, role="assistant").order_by("-position").first()
    assert "".join(e["delta"] for e in delivered if e["type"] == "text.delta") == final.content
