"""Channel layers: the embedded mode's in-memory layer and the production mode's Redis
pub/sub layer, each minus the per-message costs that profiling found.

Embedded (:class:`EmbeddedChannelLayer`): Channels' in-memory layer, minus three per-message costs.

Profiling simultaneous streams showed the stock ``InMemoryChannelLayer`` spending its time
in a ``deepcopy`` of every message per receiving channel, in an expiry sweep over every
channel and group on every ``receive``, and in ``group_send`` creating one task per member
channel and awaiting them through ``as_completed`` (a quarter of the event loop's time at 10
streams). Here messages are passed by reference (run events are built fresh by
``agents.events.RunEmitter`` and never mutated after sending), the sweep runs at most once per
second, and a group send puts the message on each member's queue directly. A full channel
still drops the message (as the stock layer does), now with a log line; subscribers detect the
gap by ``seq`` and refill it from the event log.

Production (:class:`RedisPubSubLayer`): channels-redis's pub/sub layer. The list-based
``RedisChannelLayer`` costs four Redis round trips per group message on the sending side
(expiry sweep, member list, a second sweep, a Lua push) and four more on the receiving side,
where one process-wide lock lets a web process pop only one message per round-trip chain:
measured with ``bench/ours_bench.py``, one daphne process fell seconds behind at 10 chats × 50
tokens/s with idle CPUs. With pub/sub a group message is one ``PUBLISH`` and every web process
reads its subscriptions as a stream. Delivery is at most once, exactly like a full list
channel: subscribers detect a gap by ``seq`` and refill it from the event log
(``agents.replay``). Three changes to the stock layer: publishes do not queue behind one lock
per shard (they share the connection pool, so many runs publish concurrently); each channel's
queue is bounded by ``capacity`` (a stalled socket drops messages with a log line instead of
growing without bound); and subscriptions are read by ``chatplatform.pubsub`` (an asyncio
protocol over hiredis, about a third of the CPU per message of redis-py's asyncio ``PubSub``).
"""

from __future__ import annotations

import asyncio
import logging
import time

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer
from channels_redis.pubsub import (
    RedisPubSubChannelLayer,
    RedisPubSubLoopLayer,
    RedisSingleShardConnection,
)
from channels_redis.utils import _wrap_close, decode_hosts

from .pubsub import Subscriber, subscriber_target

SWEEP_INTERVAL_S = 1.0
logger = logging.getLogger(__name__)


class EmbeddedChannelLayer(InMemoryChannelLayer):
    _last_sweep = 0.0

    async def send(self, channel, message):
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        assert "__asgi_channel__" not in message
        queue = self.channels.get(channel)
        if queue is None:
            queue = self.channels.setdefault(channel, asyncio.Queue(maxsize=self.get_capacity(channel)))
        try:
            queue.put_nowait((time.time() + self.expiry, message))
        except asyncio.QueueFull:
            raise ChannelFull(channel) from None

    async def group_send(self, group, message):
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        expires = time.time() + self.expiry
        for channel in list(self.groups.get(group, ())):
            queue = self.channels.get(channel)
            if queue is None:
                queue = self.channels.setdefault(channel, asyncio.Queue(maxsize=self.get_capacity(channel)))
            try:
                queue.put_nowait((expires, message))
            except asyncio.QueueFull:
                logger.info("channel %s is full: message to group %s dropped", channel, group)

    def _clean_expired(self):
        now = time.monotonic()
        if now - self._last_sweep < SWEEP_INTERVAL_S:
            return
        self._last_sweep = now
        super()._clean_expired()


class _Shard(RedisSingleShardConnection):
    """One Redis of the layer, on one event loop: publishes through redis-py's pool and
    receives through :class:`chatplatform.pubsub.Subscriber` (channels-redis's own reader for
    host specs it does not handle, such as Sentinel)."""

    def __init__(self, host, channel_layer):
        super().__init__(host, channel_layer)
        target = subscriber_target(host)
        self._subscriber = Subscriber(target, self._deliver) if target is not None else None

    async def publish(self, channel, message):
        # The stock shard holds its (subscribe/unsubscribe) lock across every PUBLISH, so all
        # runs of a process publish one round trip at a time. PUBLISH needs no ordering
        # against subscriptions, and the client's pool gives each concurrent call a connection.
        self._ensure_redis()
        await self._redis.publish(channel, message)

    async def subscribe(self, channel):
        if self._subscriber is None:
            return await super().subscribe(channel)
        await self._subscriber.subscribe(channel)

    async def unsubscribe(self, channel):
        if self._subscriber is None:
            return await super().unsubscribe(channel)
        await self._subscriber.unsubscribe(channel)

    async def flush(self):
        if self._subscriber is not None:
            await self._subscriber.close()
        await super().flush()

    def _receive_message(self, message):  # channels-redis's reader (Sentinel)
        if message is not None:
            self._deliver(message["channel"], message["data"])

    def _deliver(self, name, data):
        if isinstance(name, bytes):
            name = name.decode()
        layer = self.channel_layer
        targets = [name] if name in layer.channels else layer.groups.get(name, ())
        for channel_name in targets:
            queue = layer.channels.get(channel_name)
            if queue is None:
                continue
            try:
                queue.put_nowait(data)
            except asyncio.QueueFull:
                logger.info("channel %s is full: message on %s dropped", channel_name, name)


class _LoopLayer(RedisPubSubLoopLayer):
    def __init__(self, *args, capacity: int = 2000, **kwargs):
        super().__init__(*args, **kwargs)
        self.capacity = capacity
        self._shards = [_Shard(host, self) for host in decode_hosts(kwargs.get("hosts"))]

    async def _subscribe_to_channel(self, channel):
        self.channels[channel] = asyncio.Queue(maxsize=self.capacity)
        await self._get_shard(channel).subscribe(channel)


class RedisPubSubLayer(RedisPubSubChannelLayer):
    """Production channel layer (``REDIS_URL``). CONFIG: ``hosts`` as for channels-redis,
    ``capacity`` (messages buffered per channel in the receiving process, default 2000)."""

    def group_channel_name(self, group: str) -> str:
        """The pub/sub channel a group's messages are published on: with :meth:`serialize`,
        lets the event log publish an event in the same round trip that logs it
        (``agents.event_log.RedisEventLog.append_and_publish_many``)."""
        return RedisPubSubLoopLayer._get_group_channel_name(self, group)  # needs only ``prefix``: any thread

    @property
    def prefix(self) -> str:
        """The layer's channel prefix, as each loop's layer has it (``prefix`` in CONFIG)."""
        return self._kwargs.get("prefix", "asgi")

    def _get_layer(self):
        loop = asyncio.get_running_loop()
        layer = self._layers.get(loop)
        if layer is None:
            layer = self._layers[loop] = _LoopLayer(*self._args, **self._kwargs, channel_layer=self)
            _wrap_close(self, loop)
        return layer
