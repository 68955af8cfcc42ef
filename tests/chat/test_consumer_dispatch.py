"""A websocket consumer's receive loops (``chatplatform.consumer_dispatch``) keep Channels'
dispatch rules, and the websocket session middleware hands the server's own ``send`` on."""

from __future__ import annotations

import asyncio

import pytest
from channels.exceptions import StopConsumer
from django.contrib.sessions.backends.db import SessionStore

from chat.ws_auth import WebsocketSessionMiddleware
from chatplatform.consumer_dispatch import dispatch_each


class Source:
    """A message source like ``receive`` or a channel layer's: ``await source()``."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()

    async def __call__(self):
        message = await self.queue.get()
        if isinstance(message, BaseException):
            raise message
        return message


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_messages_are_dispatched_one_at_a_time_in_each_sources_order():
    client, layer = Source(), Source()
    seen, running, most = [], 0, 0

    async def dispatch(message):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001 if message[1] % 3 == 0 else 0)  # some handlers suspend
        seen.append(message)
        running -= 1

    task = asyncio.ensure_future(dispatch_each([client, layer], dispatch))
    for i in range(30):
        layer.queue.put_nowait(("layer", i))
        if i % 5 == 0:
            client.queue.put_nowait(("client", i))
    while len(seen) < 36:
        await asyncio.sleep(0.002)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert most == 1
    assert [m for m in seen if m[0] == "layer"] == [("layer", i) for i in range(30)]
    assert [m for m in seen if m[0] == "client"] == [("client", i) for i in range(0, 30, 5)]


async def test_stop_consumer_ends_it_and_nothing_is_dispatched_after():
    client, layer = Source(), Source()
    seen = []

    async def dispatch(message):
        if message == "disconnect":
            await asyncio.sleep(0.001)  # the layer's next message arrives meanwhile
            raise StopConsumer
        seen.append(message)

    task = asyncio.ensure_future(dispatch_each([client, layer], dispatch))
    layer.queue.put_nowait("event 1")
    await settle()
    client.queue.put_nowait("disconnect")
    await settle()
    layer.queue.put_nowait("event 2")
    with pytest.raises(StopConsumer):
        await task
    await settle()

    assert seen == ["event 1"]
    assert layer.queue.empty()  # taken by the loop, which was then cancelled or stopped


async def test_a_source_error_waits_for_the_running_handler_and_is_raised():
    client, layer = Source(), Source()
    finished = []

    async def dispatch(message):
        await asyncio.sleep(0.005)
        finished.append(message)

    task = asyncio.ensure_future(dispatch_each([client, layer], dispatch))
    client.queue.put_nowait("run.resume")
    await settle()
    layer.queue.put_nowait(ConnectionError("Redis went away"))
    with pytest.raises(ConnectionError, match="Redis went away"):
        await task

    assert finished == ["run.resume"]


async def test_cancelling_the_consumer_cancels_both_loops():
    client, layer = Source(), Source()
    started = asyncio.Event()
    cancelled = []

    async def dispatch(message):
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(message)
            raise

    task = asyncio.ensure_future(dispatch_each([client, layer], dispatch))
    layer.queue.put_nowait("slow")
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert cancelled == ["slow"]
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


@pytest.mark.django_db(transaction=True)
async def test_websocket_session_middleware_resolves_the_session_and_passes_send_on(settings):
    from channels.db import database_sync_to_async

    session = SessionStore()
    session["who"] = "alice"
    await database_sync_to_async(session.save)()
    received = {}

    async def inner(scope, receive, send):
        received["send"] = send
        received["who"] = await database_sync_to_async(lambda: scope["session"].get("who"))()

    async def server_send(message):
        pass

    scope = {"type": "websocket", "cookies": {settings.SESSION_COOKIE_NAME: session.session_key}, "headers": []}
    await WebsocketSessionMiddleware(inner)(scope, None, server_send)

    assert received == {"send": server_send, "who": "alice"}
