"""The production channel layer's receiving side: one Redis Pub/Sub connection per event
loop, read by an ``asyncio.Protocol`` that feeds hiredis's reply parser.

Why not redis-py's asyncio ``PubSub``, as channels-redis drives it (``get_message(timeout=0.1)``
in a loop): every message then costs a timeout handle, a retry wrapper, a stream reader's
wake-up and a second turn of the event loop — most of a web process's whole share of a run
event (``bench/pubsub_receive.py`` compares the two). Replies are still parsed by hiredis; this
module only owns the socket, the handshake and the subscriptions.

What it guarantees (:class:`Subscriber`):

* ``subscribe`` returns once Redis confirmed the subscription, so nothing published after it
  is missed; it raises ``redis.exceptions.ConnectionError`` / ``TimeoutError`` when Redis
  cannot be reached or does not answer within the reply timeout (the websocket consumer closes
  with 4503 then, and the browser reconnects).
* A connection lost later (a Redis restart) is re-opened in the background with backoff
  (0.1 s doubling to 2 s) and every subscription is renewed. What was published meanwhile is
  lost here, as with any Pub/Sub reader: subscribers see the gap by ``seq`` and refill it from
  the event log (``agents.replay``).
* A Redis that stops answering without closing the socket is noticed by a ``PING`` every
  ``ping_interval_s`` (15 s) that must be answered within the reply timeout; the connection is
  then dropped and re-opened.
* ``on_state(False, error)`` is called when a connection carrying subscriptions is lost,
  ``on_state(True, None)`` when a connection is ready (its subscriptions sent): the channel
  layer uses them to end its receivers' waits when an outage lasts
  (:mod:`chatplatform.layers`).

Connection specs it understands (:func:`subscriber_target`): channels-redis host entries whose
``address`` is a ``redis://``, ``rediss://`` or ``unix://`` URL or a ``(host, port)`` pair,
with an optional username and password, and Sentinel entries (``sentinels``, ``master_name``,
``sentinel_kwargs``; ``chatplatform.redis_clients.channel_layer_host``): then every connection,
the first and each reconnect, asks the Sentinels for the master's address first (redis-py's
``discover_master``), so after a failover the subscriptions are renewed on the new master.
Anything else keeps channels-redis's own reader.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hiredis
from redis.asyncio.connection import RedisSSLContext
from redis.asyncio.sentinel import Sentinel
from redis.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)

_SSL_OPTIONS = set(inspect.signature(RedisSSLContext.__init__).parameters) - {"self"}


@dataclass
class Target:
    """Where and how to connect: TCP ``host``/``port`` (TLS when ``ssl`` holds
    ``RedisSSLContext`` options), or a unix socket ``path``, or the master ``master_name``
    that the Sentinels at ``sentinels`` (``(host, port)`` pairs) name at connect time; AUTH
    with ``password`` (and ``username``, an ACL user) when given. Timeouts in seconds."""

    host: str | None = None
    port: int = 6379
    path: str | None = None
    username: str | None = None
    password: str | None = None
    ssl: dict[str, Any] | None = None
    connect_timeout_s: float = 5.0
    reply_timeout_s: float = 5.0
    master_name: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_kwargs: dict[str, Any] | None = None

    def describe(self) -> str:
        if self.master_name:
            where = f" at {self.host}:{self.port}" if self.host else ""
            return f"master {self.master_name}{where}"
        return self.path or f"{self.host}:{self.port}"


def subscriber_target(host: dict) -> Target | None:
    """A channels-redis host entry (``decode_hosts``) as a :class:`Target`, or None when it is
    a form this reader does not handle (Sentinel, unknown URL schemes): the caller then keeps
    channels-redis's reader. ``socket_connect_timeout`` and ``socket_timeout`` bound the
    connect and each awaited reply (capped at 5 s: a reply on a healthy Redis takes
    microseconds, and a subscriber must not wait 30 s to learn it is cut off)."""
    host = dict(host)
    address = host.pop("address", None)
    if address is None and "host" in host:
        address = (host.pop("host"), host.pop("port", 6379))
    master_name, sentinels = host.pop("master_name", None), host.pop("sentinels", None)
    if (address is None) == (master_name is None) or (master_name is None) != (sentinels is None):
        return None
    target = Target(connect_timeout_s=float(host.pop("socket_connect_timeout", None) or 5.0),
                    reply_timeout_s=min(5.0, float(host.pop("socket_timeout", None) or 5.0)))
    if master_name is not None:
        target.master_name = str(master_name)
        target.sentinels = tuple((str(h), int(p)) for h, p in sentinels)
        target.sentinel_kwargs = host.pop("sentinel_kwargs", None)
    elif isinstance(address, (tuple, list)):
        target.host, target.port = str(address[0]), int(address[1])
    else:
        try:
            parsed = parse_url(str(address))
        except ValueError:
            return None
        connection_class = parsed.pop("connection_class", None)
        parsed.pop("db", None)  # Pub/Sub channels are not per database
        target.host = parsed.pop("host", None)
        target.port = int(parsed.pop("port", 6379) or 6379)
        target.path = parsed.pop("path", None)
        target.username = parsed.pop("username", None)
        target.password = parsed.pop("password", None)
        if connection_class is not None and connection_class.__name__ == "SSLConnection":
            target.ssl = {k[4:]: v for k, v in parsed.items() if k.startswith("ssl_") and k[4:] in _SSL_OPTIONS}
    target.username = host.pop("username", None) or target.username
    target.password = host.pop("password", None) or target.password
    return target


def pack_command(*args: str | bytes | int) -> bytes:
    """One Redis command as RESP: an array of bulk strings (``str`` as UTF-8, ``int`` in
    decimal). Raises TypeError for any other type. What redis-py's packer does, without its
    per-argument encoder objects: the production publisher packs one script call per run
    event (``chatplatform.event_log.RedisEventLog.append_and_publish_many``)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, int):
            data = b"%d" % arg
        else:
            raise TypeError(f"a Redis command argument is str, bytes or int, not {type(arg).__name__}")
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Protocol(asyncio.Protocol):
    """One connection: parses replies with hiredis, hands messages to its :class:`Subscriber`
    and every other reply to the command it answers (Redis answers in order: one FIFO)."""

    def __init__(self, owner: Subscriber) -> None:
        self.owner = owner
        self.reader = hiredis.Reader(replyError=ResponseError)
        self.transport: asyncio.Transport | None = None
        self.pending: collections.deque[asyncio.Future | None] = collections.deque()  # one per command sent
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while True:
            try:
                reply = self.reader.gets()
            except hiredis.ProtocolError as exc:  # not Redis, or a corrupted stream
                logger.error("pub/sub %s: unreadable reply (%s); reconnecting", self.owner.target.describe(), exc)
                self.transport.abort()
                return
            if reply is False:
                return
            if type(reply) is list and len(reply) == 3 and reply[0] == b"message":
                try:
                    self.owner.on_message(reply[1], reply[2])
                except Exception:  # a bug there must not cost the connection every other message
                    logger.exception("pub/sub: handling a message on %r failed", reply[1])
                continue
            if type(reply) is list and reply and reply[0] == b"subscribe":
                self.owner._confirmed(reply[1])
            waiter = self.pending.popleft() if self.pending else None
            if waiter is not None and not waiter.done():
                (waiter.set_exception if isinstance(reply, ResponseError) else waiter.set_result)(reply)
            elif isinstance(reply, ResponseError):
                logger.warning("pub/sub %s: Redis replied %s", self.owner.target.describe(), reply)

    def connection_lost(self, exc: Exception | None) -> None:
        lost = RedisConnectionError(f"pub/sub connection to {self.owner.target.describe()} lost"
                                    + (f": {exc}" if exc else ""))
        while self.pending:
            waiter = self.pending.popleft()
            if waiter is not None and not waiter.done():
                waiter.set_exception(lost)
        if not self.closed.done():
            self.closed.set_result(None)
        self.owner._lost(self, lost)

    def command(self, *args: str | bytes, waiter: asyncio.Future | None = None) -> None:
        """Write one command. Its reply — a subscription's confirmation, PING's pong, AUTH's
        OK or an error — settles ``waiter`` if given."""
        self.pending.append(waiter)
        self.transport.write(pack_command(*args))

    async def call(self, *args: str | bytes, timeout: float, what: str | None = None) -> Any:
        """Write a command and await its reply; raises ``ResponseError`` for an error reply,
        redis's ``TimeoutError`` after ``timeout`` s (the connection is then dropped: the
        replies would no longer match their commands)."""
        waiter = asyncio.get_running_loop().create_future()
        self.command(*args, waiter=waiter)
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            self.transport.abort()
            raise RedisTimeoutError(f"Redis {self.owner.target.describe()} did not answer "
                                    f"{what or args[0]} within {timeout:g} s") from None


class Subscriber:
    """The Pub/Sub subscriptions of one event loop on one Redis.

    ``on_message(channel, data)`` (both ``bytes``) is called on the loop for every message, in
    the order Redis sent them; it must not block. ``on_state(up, error)``, if given, is called
    on the loop with ``(False, RedisConnectionError)`` when a connection with subscriptions is
    lost and ``(True, None)`` when a connection is ready; it must not block either. Methods
    are called on that same loop."""

    RECONNECT_FIRST_S = 0.1
    RECONNECT_MAX_S = 2.0

    def __init__(self, target: Target, on_message: Callable[[bytes, bytes], None], *,
                 ping_interval_s: float = 15.0,
                 on_state: Callable[[bool, RedisConnectionError | None], None] | None = None) -> None:
        self.target = target
        self.on_message = on_message
        self.on_state = on_state
        self.ping_interval_s = ping_interval_s
        self._wanted: set[str] = set()  # what the layer listens to; renewed on every connection
        self._subscribed: set[str] = set()  # confirmed on the current connection
        self._subscribing: dict[str, asyncio.Future] = {}  # SUBSCRIBE sent, confirmation awaited
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Task | None = None
        self._closed = False
        self._keepalive: asyncio.Task | None = None
        self._sentinel: Sentinel | None = None

    @property
    def connected(self) -> bool:
        return self._proto is not None

    async def subscribe(self, channel: str) -> None:
        """Subscribe to ``channel``; returns once Redis confirmed it (see the module docstring
        for the errors)."""
        self._wanted.add(channel)
        if channel in self._subscribed:  # the layer asks on every group_add: no round trip then
            return
        proto = await self._connected()
        if channel not in self._wanted:  # unsubscribed while we connected
            return
        waiter = self._subscribing.get(channel) or self._send_subscribe(proto, channel)
        try:
            async with asyncio.timeout(self.target.reply_timeout_s):
                await asyncio.shield(waiter)  # shared by every caller waiting for this channel
        except TimeoutError:
            proto.transport.abort()  # a Redis that does not answer: start over
            raise RedisTimeoutError(f"Redis {self.target.describe()} did not confirm the subscription to "
                                    f"{channel} within {self.target.reply_timeout_s:g} s") from None

    async def unsubscribe(self, channel: str) -> None:
        """Stop receiving ``channel`` (not awaited: messages already on the way are still
        handed to ``on_message``, which ignores a channel nobody listens to)."""
        self._wanted.discard(channel)
        self._subscribed.discard(channel)
        if self._proto is not None:
            self._proto.command("UNSUBSCRIBE", channel)

    async def close(self) -> None:
        """Drop the connection and every subscription; the subscriber can be used again."""
        self._closed = True
        self._wanted.clear()
        self._subscribed.clear()
        for task in (self._connecting, self._keepalive):
            if task is not None:
                task.cancel()
        proto, self._proto = self._proto, None
        if proto is not None:
            proto.transport.close()
            await proto.closed
        sentinel, self._sentinel = self._sentinel, None
        if sentinel is not None:
            await sentinel.aclose()
        self._closed = False

    # -- internals ----------------------------------------------------------------------
    async def _connected(self) -> _Protocol:
        if self._proto is not None:
            return self._proto
        task = self._connecting
        if task is None or task.done():
            task = self._connecting = asyncio.get_running_loop().create_task(self._connect())
        # A reconnect after a loss retries until Redis is back; a caller waits a bounded time.
        bound = self.target.connect_timeout_s + self.target.reply_timeout_s
        try:
            async with asyncio.timeout(bound):
                proto = await asyncio.shield(task)
        except TimeoutError:
            raise RedisConnectionError(f"Redis {self.target.describe()} unreachable for {bound:g} s") from None
        if proto is None:
            raise RedisConnectionError(f"pub/sub connection to {self.target.describe()} closed")
        return proto

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        target = self.target
        if target.master_name:  # where the master is now (raises MasterNotFoundError, a ConnectionError)
            if self._sentinel is None:
                self._sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=target.sentinel_kwargs)
            target.host, target.port = await self._sentinel.discover_master(target.master_name)
        try:
            async with asyncio.timeout(target.connect_timeout_s):
                if target.path:
                    _, proto = await loop.create_unix_connection(lambda: _Protocol(self), target.path)
                else:
                    ssl = RedisSSLContext(**target.ssl).get() if target.ssl is not None else None
                    _, proto = await loop.create_connection(lambda: _Protocol(self), target.host, target.port,
                                                            ssl=ssl)
        except (OSError, TimeoutError) as exc:
            raise RedisConnectionError(f"cannot open a pub/sub connection to {target.describe()}: "
                                       f"{type(exc).__name__}: {exc}") from exc
        try:
            if target.password:
                auth = ("AUTH", target.username, target.password) if target.username else ("AUTH", target.password)
                await proto.call(*auth, timeout=target.reply_timeout_s)
        except BaseException:
            proto.transport.abort()
            raise
        self._proto = proto
        self._subscribing.clear()  # those of a lost connection failed with it
        for channel in sorted(self._wanted):  # a reconnect renews every subscription
            self._send_subscribe(proto, channel)
        if self._keepalive is None or self._keepalive.done():
            self._keepalive = loop.create_task(self._ping_forever())
        self._tell(True, None)
        return proto

    def _send_subscribe(self, proto: _Protocol, channel: str) -> asyncio.Future:
        waiter = asyncio.get_running_loop().create_future()

        def settled(future: asyncio.Future) -> None:
            if self._subscribing.get(channel) is future:
                del self._subscribing[channel]
            if not future.cancelled() and future.exception() is not None and not self._closed:
                logger.warning("pub/sub %s: subscribing to %s failed: %s", self.target.describe(), channel,
                               future.exception())

        waiter.add_done_callback(settled)
        self._subscribing[channel] = waiter
        proto.command("SUBSCRIBE", channel, waiter=waiter)
        return waiter

    def _confirmed(self, channel: bytes) -> None:
        name = channel.decode()
        if name in self._wanted:
            self._subscribed.add(name)

    def _lost(self, proto: _Protocol, error: RedisConnectionError) -> None:
        if self._proto is not proto:
            return  # a connection that never finished its handshake, or one already replaced
        self._proto = None
        self._subscribed.clear()
        if self._closed or not self._wanted:
            return
        logger.warning("%s; reconnecting and renewing %d subscription(s)", error, len(self._wanted))
        self._tell(False, error)
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.get_running_loop().create_task(self._reconnect())

    def _tell(self, up: bool, error: RedisConnectionError | None) -> None:
        if self.on_state is None:
            return
        try:
            self.on_state(up, error)
        except Exception:  # a bug there must not stop the reconnect
            logger.exception("pub/sub %s: on_state failed", self.target.describe())

    async def _reconnect(self) -> _Protocol | None:
        delay = self.RECONNECT_FIRST_S
        attempts = 0
        while self._wanted and not self._closed:
            await asyncio.sleep(delay)
            attempts += 1
            try:
                proto = await self._connect()
            except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
                log = logger.warning if attempts == 1 else logger.debug
                log("pub/sub %s: reconnect failed (%s); retrying", self.target.describe(), exc)
                delay = min(delay * 2, self.RECONNECT_MAX_S)
                continue
            logger.info("pub/sub %s: reconnected after %d attempt(s); %d subscription(s) renewed",
                        self.target.describe(), attempts, len(self._wanted))
            return proto
        return None

    async def _ping_forever(self) -> None:
        """Every ``ping_interval_s``: a PING that must be answered within the reply timeout,
        else the connection is dropped (and re-opened by ``_lost``)."""
        while not self._closed:
            await asyncio.sleep(self.ping_interval_s)
            proto = self._proto
            if proto is None:
                continue
            try:
                await proto.call("PING", timeout=self.target.reply_timeout_s)
            except RedisTimeoutError as exc:
                logger.warning("pub/sub %s; dropping the connection", exc)
                proto.transport.abort()
            except (RedisConnectionError, ResponseError):
                pass  # lost meanwhile: _lost reconnects
