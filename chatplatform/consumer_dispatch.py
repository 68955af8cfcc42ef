"""How a websocket consumer takes its messages: one long-lived receive loop per source (the
client's socket, the channel layer) instead of Channels' ``await_many_dispatch``.

Channels waits on both sources with ``asyncio.wait`` and, after every message, starts a new
task for the source that delivered it: per message a wait (a future and a done callback on
each task), a task, and a turn of the event loop more. A run event is one channel-layer
message per socket, so that cost is paid per token per viewer; long-lived loops pay it once
(``bench/consumer_dispatch.py`` compares the two; figures in docs/performance.md).

What stays as in Channels: messages are dispatched one at a time (a handler never runs
while another is suspended), each source's messages in the order it gave them, and an
exception a handler raises — ``StopConsumer`` included — ends the consumer after cancelling
the other loop; nothing is dispatched after it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer
from django.utils import translation

from .locale import language_from_scope


async def dispatch_each(sources: list[Callable[[], Awaitable[Any]]],
                        dispatch: Callable[[Any], Awaitable[None]]) -> None:
    """Await messages from every source and hand each to ``dispatch``, one at a time, until a
    source or ``dispatch`` raises; then cancel the other loops (waiting for them to end) and
    raise that exception. Cancelling the caller cancels every loop."""
    lock = asyncio.Lock()
    failed = False

    async def receive_loop(source: Callable[[], Awaitable[Any]]) -> None:
        nonlocal failed
        while True:
            try:
                message = await source()
            except Exception:
                async with lock:  # a handler that is running ends first, as in Channels
                    failed = True
                raise
            async with lock:  # uncontended: no suspension
                if failed:  # another loop's handler raised while this one held a message
                    return
                try:
                    await dispatch(message)
                except BaseException:
                    failed = True
                    raise

    loops = [asyncio.ensure_future(receive_loop(source)) for source in sources]
    try:
        done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
        for loop in done:
            loop.result()  # raises what ended it
    finally:
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)


class ReceiveLoopsMixin:
    """For an ``AsyncConsumer`` subclass: its ``__call__`` with :func:`dispatch_each` in place
    of Channels' ``await_many_dispatch`` (async consumers only)."""

    async def __call__(self, scope, receive, send) -> None:
        self.scope = scope
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        sources = [receive]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            self.channel_receive = functools.partial(self.channel_layer.receive, self.channel_name)
            sources.append(self.channel_receive)
        self.base_send = send
        # The socket's messages (errors, approval sentences) in its person's language: activated
        # before the receive loops start, so each loop's context carries it.
        translation.activate(language_from_scope(scope))
        try:
            await dispatch_each(sources, self.dispatch)
        except StopConsumer:
            pass
