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
where one process-wide lock lets a web process pop only one message per round-trip chain, so
a web process falls behind a handful of streaming chats with its CPUs idle. With pub/sub a group message is one ``PUBLISH`` and every web process
reads its subscriptions as a stream. Delivery is at most once, exactly like a full list
channel: subscribers detect a gap by ``seq`` and refill it from the event log
(``agents.replay``). Three changes to the stock layer: publishes do not queue behind one lock
per shard (they share the connection pool, so many runs publish concurrently); each channel's
queue is bounded by ``capacity`` (a stalled socket drops messages with a log line instead of
growing without bound); subscriptions are read by ``chatplatform.pubsub`` (an asyncio
protocol over hiredis, about a third of the CPU per message of redis-py's asyncio ``PubSub``);
and an outage is not silent: while the subscription reconnects in the background nothing
arrives, so once it has been down ``lost_after_s`` (5 s) every ``receive`` waiting on the loop
raises :class:`LayerLost` (a redis ``ConnectionError``) — a websocket consumer then closes with
4503 and the browser shows "reconnecting…" until Redis is back, then resumes from the event
log. A shorter outage stays invisible: the sockets stay open and fill the gap from the log.
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
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from .pubsub import Subscriber, subscriber_target

SWEEP_INTERVAL_S = 1.0
logger = logging.getLogger(__name__)

LAYER_ERRORS = (RedisError, OSError)
"""What a channel layer raises when its Redis connection broke (refused, reset, timed out,
:class:`LayerLost`)."""


class LayerLost(RedisConnectionError):
    """``receive`` ended because the layer's Redis subscription has been down for
    ``lost_after_s``: messages for the channel are being lost, so its reader should reconnect
    (a websocket: close with 4503) rather than wait in silence."""


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


async def receive_within(layer, channel: str, timeout_s: float) -> dict | None:
    """The next message on ``channel``, or None after ``timeout_s`` seconds — also when the
    layer's Redis is unreachable (logged; the call then still takes ``timeout_s``, so a caller
    that polls the event log between receives does not spin). For request-scoped readers that
    fall back on the event log (the SSE endpoint, the OpenAI-compatible API): an outage costs
    them the live feed for its length, not the request. A channel that got :class:`LayerLost`
    subscribes again on the next call."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        return await asyncio.wait_for(layer.receive(channel), timeout_s)
    except TimeoutError:
        return None
    except LAYER_ERRORS as exc:
        logger.info("channel %s: receive failed (%s: %s); reading the event log meanwhile", channel,
                    type(exc).__name__, exc)
        await asyncio.sleep(max(0.0, deadline - loop.time()))
        return None


class _Shard(RedisSingleShardConnection):
    """One Redis of the layer, on one event loop: publishes through redis-py's pool and
    receives through :class:`chatplatform.pubsub.Subscriber` (channels-redis's own reader for
    host specs it does not handle). Through Sentinel both sides find the master at connect
    time: the publishing pool is channels-redis's ``SentinelConnectionPool``, the subscriber
    asks the Sentinels on every (re)connect."""

    def __init__(self, host, channel_layer):
        super().__init__(host, channel_layer)
        target = subscriber_target(host)
        self._subscriber = Subscriber(target, self._deliver, on_state=self._state) if target is not None else None
        self._lost_timer: asyncio.TimerHandle | None = None

    def _state(self, up: bool, error: RedisConnectionError | None) -> None:
        """The subscription went down (``up`` False) or is back: after ``lost_after_s`` down,
        end the receivers' waits (:meth:`_LoopLayer.connection_lost`)."""
        if up:
            if self._lost_timer is not None:
                self._lost_timer.cancel()
                self._lost_timer = None
        elif self._lost_timer is None:
            layer = self.channel_layer
            self._lost_timer = asyncio.get_running_loop().call_later(
                layer.lost_after_s, self._still_down, error)

    def _still_down(self, error: RedisConnectionError | None) -> None:
        self._lost_timer = None
        self.channel_layer.connection_lost(f"{error}; down for {self.channel_layer.lost_after_s:g} s")

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

    def _receive_message(self, message):  # channels-redis's reader
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
    def __init__(self, *args, capacity: int = 2000, lost_after_s: float = 5.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.capacity = capacity
        self.lost_after_s = lost_after_s
        self._shards = [_Shard(host, self) for host in decode_hosts(kwargs.get("hosts"))]

    async def _subscribe_to_channel(self, channel):
        self.channels[channel] = asyncio.Queue(maxsize=self.capacity)
        await self._get_shard(channel).subscribe(channel)

    def connection_lost(self, reason: str) -> None:
        """A shard's subscription has been down ``lost_after_s``: every channel of this loop
        gets a :class:`LayerLost` behind what it holds (a channel's group messages may come
        through any shard). A full queue gives up its oldest message for it — its reader is
        about to reconnect and catch up from the event log anyway."""
        logger.warning("channel layer: %s; ending %d receiver(s) so their clients reconnect", reason,
                       len(self.channels))
        for queue in list(self.channels.values()):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(LayerLost(reason))

    async def receive(self, channel):
        """channels-redis's ``receive``, raising :class:`LayerLost` when it is queued."""
        if channel not in self.channels:
            await self._subscribe_to_channel(channel)
        try:
            message = await self.channels[channel].get()
        except (asyncio.CancelledError, TimeoutError, GeneratorExit):
            await self._forget(channel)  # the consumer is leaving (as in channels-redis)
            raise
        if isinstance(message, LayerLost):
            await self._forget(channel)
            raise message
        return self.channel_layer.deserialize(message)

    async def _forget(self, channel: str) -> None:
        if self.channels.pop(channel, None) is not None:
            try:
                await self._get_shard(channel).unsubscribe(channel)
            except BaseException:
                logger.exception("Unexpected exception while cleaning-up channel:")


class RedisPubSubLayer(RedisPubSubChannelLayer):
    """Production channel layer (``settings.REDIS``). CONFIG: ``hosts`` as for channels-redis
    (``chatplatform.redis_clients.channel_layer_host``: a URL or a Sentinel entry),
    ``capacity`` (messages buffered per channel in the receiving process, default 2000),
    ``lost_after_s`` (seconds a subscription may be down before every ``receive`` raises
    :class:`LayerLost`, default 5)."""

    def group_channel_name(self, group: str) -> str:
        """The pub/sub channel a group's messages are published on: with :meth:`serialize`,
        lets the event log publish an event in the same round trip that logs it
        (``chatplatform.event_log.RedisEventLog.append_and_publish_many``)."""
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
