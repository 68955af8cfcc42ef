"""The production channel layer (``chatplatform.layers.RedisPubSubLayer``) when its Redis goes
away, against a private ``redis-server`` this module stops and starts: an outage longer than
``lost_after_s`` ends every waiting ``receive`` with ``LayerLost`` — and a websocket closes
with 4503, so the page says "reconnecting…" instead of "connected" while nothing arrives (found
trying a Stop during a Redis outage from a fresh clone) — while a shorter one stays invisible."""

from __future__ import annotations

import asyncio

import pytest
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from chat.consumers import CLOSE_LAYER_LOST
from chatplatform.layers import LayerLost, RedisPubSubLayer
from tests.conftest import make_thread
from tests.e2e.harness import require_services
from tests.e2e.private_services import PrivateRedis, missing_reason

pytestmark = pytest.mark.services


@pytest.fixture
def private_redis():
    require_services(missing_reason(redis=True))
    server = PrivateRedis().start()
    yield server
    server.close()


def layer_on(server: PrivateRedis, lost_after_s: float) -> RedisPubSubLayer:
    return RedisPubSubLayer(hosts=[{"address": server.url()}], lost_after_s=lost_after_s)


async def wait_until(predicate, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


def test_an_outage_longer_than_lost_after_s_ends_every_receive(private_redis):
    async def scenario():
        layer = layer_on(private_redis, lost_after_s=0.5)
        in_group, alone = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("thread-1", in_group)
        receives = [asyncio.create_task(layer.receive(name)) for name in (in_group, alone)]
        await layer.group_send("thread-1", {"type": "run.event", "n": 1})  # the layer works
        assert (await receives[0])["n"] == 1
        receives[0] = asyncio.create_task(layer.receive(in_group))
        await asyncio.sleep(0.1)  # both wait on their queues

        await asyncio.to_thread(private_redis.stop)
        async with asyncio.timeout(15):  # a liveness bound, not a timing check
            outcomes = await asyncio.gather(*receives, return_exceptions=True)
        assert [type(o) for o in outcomes] == [LayerLost, LayerLost]
        assert "down for 0.5 s" in str(outcomes[0])
        assert in_group not in layer._get_layer().channels  # forgotten: nothing buffers for it

        await asyncio.to_thread(private_redis.start)  # a reconnecting client gets a working layer
        fresh = await layer.new_channel()
        await layer.group_add("thread-1", fresh)
        await layer.group_send("thread-1", {"type": "run.event", "n": 2})
        async with asyncio.timeout(15):
            assert (await layer.receive(fresh))["n"] == 2
        await layer.flush()

    asyncio.run(scenario())


def test_a_short_outage_keeps_receivers_waiting_and_delivering(private_redis):
    async def scenario():
        layer = layer_on(private_redis, lost_after_s=30.0)
        channel = await layer.new_channel()
        await layer.group_add("thread-2", channel)
        waiting = asyncio.create_task(layer.receive(channel))
        await asyncio.sleep(0.1)
        subscriber = layer._get_layer()._shards[0]._subscriber
        before = subscriber._proto

        await asyncio.to_thread(private_redis.restart, 0.3)
        await wait_until(lambda: subscriber._proto not in (None, before) and len(subscriber._subscribed) == 2)
        assert not waiting.done()
        await layer.group_send("thread-2", {"type": "run.event", "n": 3})
        async with asyncio.timeout(15):
            assert (await waiting)["n"] == 3
        await layer.flush()

    asyncio.run(scenario())


@pytest.mark.django_db(transaction=True)
def test_a_thread_socket_closes_4503_and_leaves_its_groups_when_the_layer_is_lost(
        private_redis, settings, users, workspaces, offline):
    settings.CHANNEL_LAYERS = {"default": {
        "BACKEND": "chatplatform.layers.RedisPubSubLayer",
        "CONFIG": {"hosts": [{"address": private_redis.url()}], "lost_after_s": 0.5},
    }}
    from channels.layers import get_channel_layer

    from config.asgi import application

    thread = make_thread(users["alice"], workspaces["demo"], offline)
    key = Token.objects.get_or_create(user=users["alice"])[0].key

    async def scenario():
        comm = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/",
                                     headers=[(b"authorization", f"Token {key}".encode())])
        connected, _ = await comm.connect(timeout=10)
        assert connected
        layer = get_channel_layer()
        loop_layer = layer._get_layer()
        group = layer.group_channel_name(thread.group_name)
        assert group in loop_layer.groups

        await asyncio.to_thread(private_redis.stop)
        closed = await comm.receive_output(timeout=15)
        assert closed == {"type": "websocket.close", "code": CLOSE_LAYER_LOST}
        assert group not in loop_layer.groups  # left, not subscribed for good
        assert group not in loop_layer._shards[0]._subscriber._wanted
        assert not loop_layer.channels
        await comm.wait()
        # A new socket while Redis is still down is accepted, then closed 4503: a close before
        # the accept is a refused handshake (HTTP 403), and a browser never sees the 4503.
        refused = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/",
                                        headers=[(b"authorization", f"Token {key}".encode())])
        connected, _ = await refused.connect(timeout=15)
        assert connected
        assert await refused.receive_output(timeout=15) == {"type": "websocket.close", "code": CLOSE_LAYER_LOST}
        await refused.wait()
        await asyncio.to_thread(private_redis.start)

        comm = WebsocketCommunicator(application, f"/ws/threads/{thread.pk}/",
                                     headers=[(b"authorization", f"Token {key}".encode())])
        connected, _ = await comm.connect(timeout=15)  # the browser's reconnect works
        assert connected
        await comm.send_json_to({"type": "run.resume", "run_id": "nope"})
        assert (await comm.receive_json_from(timeout=10))["type"] == "error"
        await comm.disconnect()
        await get_channel_layer().flush()

    asyncio.run(scenario())
