"""``chatplatform.pubsub.Subscriber`` — the production channel layer's reader — against real
Redis servers (the machine's, and private ones it may restart), and against loopback servers
that accept a connection and then hang or stop answering PING."""

from __future__ import annotations

import asyncio
import os
import socket
import threading

import hiredis
import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from chatplatform.pubsub import Subscriber, Target, subscriber_target
from tests.e2e.harness import require_services, services_unreachable_reason
from tests.e2e.private_services import PrivateRedis, missing_reason

pytestmark = pytest.mark.services

REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/14"


@pytest.fixture(scope="module")
def shared_redis():
    require_services(services_unreachable_reason())
    return REDIS_URL


class Inbox:
    """Collects ``(channel, data)`` and lets a test wait for a count."""

    def __init__(self) -> None:
        self.items: list[tuple[bytes, bytes]] = []
        self._changed = asyncio.Event()

    def __call__(self, channel: bytes, data: bytes) -> None:
        self.items.append((channel, data))
        self._changed.set()

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[bytes, bytes]]:
        async with asyncio.timeout(timeout):
            while len(self.items) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.items


def publish(url: str, channel: str, *payloads: bytes) -> list[int]:
    """PUBLISH each payload from another connection; the receiver counts per publish."""
    client = redis.Redis.from_url(url)
    try:
        return [client.publish(channel, payload) for payload in payloads]
    finally:
        client.close()


def test_subscribe_returns_once_confirmed_and_messages_arrive_in_order(shared_redis):
    async def scenario():
        inbox = Inbox()
        sub = Subscriber(subscriber_target({"address": shared_redis}), inbox)
        await sub.subscribe("t.a")
        await sub.subscribe("t.b")
        # Confirmed before subscribe() returned: Redis already counts one receiver each.
        assert await asyncio.to_thread(publish, shared_redis, "t.a", b"1", b"2") == [1, 1]
        await asyncio.to_thread(publish, shared_redis, "t.b", b"3")
        await asyncio.to_thread(publish, shared_redis, "t.other", b"nobody")
        await asyncio.to_thread(publish, shared_redis, "t.a", b"4" * 70_000)  # spans many reads
        items = await inbox.wait_for(4)
        assert items == [(b"t.a", b"1"), (b"t.a", b"2"), (b"t.b", b"3"), (b"t.a", b"4" * 70_000)]

        await sub.unsubscribe("t.a")
        await asyncio.sleep(0.05)
        assert await asyncio.to_thread(publish, shared_redis, "t.a", b"gone") == [0]
        await asyncio.to_thread(publish, shared_redis, "t.b", b"5")
        assert (await inbox.wait_for(5))[4] == (b"t.b", b"5")
        await sub.close()
        assert not sub.connected
        assert await asyncio.to_thread(publish, shared_redis, "t.b", b"closed") == [0]

    asyncio.run(scenario())


def test_a_killed_connection_is_reopened_with_every_subscription(shared_redis):
    async def scenario():
        inbox = Inbox()
        sub = Subscriber(subscriber_target({"address": shared_redis}), inbox)
        await sub.subscribe("t.k1")
        await sub.subscribe("t.k2")
        first = sub._proto
        host, port = first.transport.get_extra_info("sockname")[:2]
        admin = redis.Redis.from_url(shared_redis)
        assert await asyncio.to_thread(admin.client_kill_filter, _type=None, addr=f"{host}:{port}") == 1
        async with asyncio.timeout(10):
            while not (sub._proto not in (None, first) and {"t.k1", "t.k2"} <= sub._subscribed):
                await asyncio.sleep(0.02)
        assert await asyncio.to_thread(publish, shared_redis, "t.k1", b"after") == [1]
        await asyncio.to_thread(publish, shared_redis, "t.k2", b"after too")
        assert await inbox.wait_for(2) == [(b"t.k1", b"after"), (b"t.k2", b"after too")]
        admin.close()
        await sub.close()

    asyncio.run(scenario())


@pytest.fixture(scope="module")
def private_redis():
    require_services(missing_reason(redis=True))
    server = PrivateRedis(args=("--requirepass", "s3cret")).start()
    yield server
    server.close()


def test_a_redis_restart_renews_subscriptions_and_auth(private_redis):
    url = f"redis://:s3cret@127.0.0.1:{private_redis.port}/0"

    async def scenario():
        inbox = Inbox()
        sub = Subscriber(subscriber_target({"address": url}), inbox)
        await sub.subscribe("t.r")
        await asyncio.to_thread(publish, url, "t.r", b"before")
        await inbox.wait_for(1)
        first = sub._proto
        await asyncio.to_thread(private_redis.restart, 1.0)
        async with asyncio.timeout(15):
            while not (sub._proto not in (None, first) and "t.r" in sub._subscribed):
                await asyncio.sleep(0.05)
        assert await asyncio.to_thread(publish, url, "t.r", b"after") == [1]
        assert await inbox.wait_for(2) == [(b"t.r", b"before"), (b"t.r", b"after")]
        await sub.close()

    asyncio.run(scenario())


def test_acl_user_and_wrong_password(private_redis):
    admin_url = f"redis://:s3cret@127.0.0.1:{private_redis.port}/0"
    admin = redis.Redis.from_url(admin_url)
    admin.acl_setuser("reader", enabled=True, passwords=["+r3ader"], channels=["t.*"], commands=["+@pubsub",
                                                                                               "+@connection"])

    async def scenario():
        inbox = Inbox()
        sub = Subscriber(subscriber_target({"address": f"redis://reader:r3ader@127.0.0.1:{private_redis.port}/0"}),
                         inbox)
        await sub.subscribe("t.acl")
        await asyncio.to_thread(publish, admin_url, "t.acl", b"for the reader")
        assert await inbox.wait_for(1) == [(b"t.acl", b"for the reader")]
        with pytest.raises(ResponseError):  # the ACL allows t.* only
            await sub.subscribe("secret.x")
        await sub.close()

        wrong = Subscriber(subscriber_target({"address": f"redis://:nope@127.0.0.1:{private_redis.port}/0"}), inbox)
        with pytest.raises(ResponseError, match="WRONGPASS|invalid"):
            await wrong.subscribe("t.acl")
        assert not wrong.connected

    try:
        asyncio.run(scenario())
    finally:
        admin.acl_deluser("reader")
        admin.close()


class SilentServer:
    """A loopback TCP server that accepts connections and reads them. ``answer``: reply to
    SUBSCRIBE with Redis's confirmation (RESP2) but never to PING — a Redis that stopped
    answering without closing its sockets; otherwise reply to nothing at all."""

    def __init__(self, *, answer: bool) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.received: list[bytes] = []
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        commands = hiredis.Reader()  # a client's commands are RESP arrays too
        while data := conn.recv(65536):
            self.received.append(data)
            commands.feed(data)
            while (command := commands.gets()) is not False:
                if self.answer and command[0] == b"SUBSCRIBE":
                    channel = command[1]
                    conn.sendall(b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(channel), channel))

    def close(self) -> None:
        self.sock.close()
        for conn in self._conns:
            conn.close()


def test_a_server_that_never_answers_fails_the_subscribe_within_the_reply_timeout():
    server = SilentServer(answer=False)

    async def scenario():
        sub = Subscriber(Target(host="127.0.0.1", port=server.port, reply_timeout_s=0.3), Inbox())
        with pytest.raises(RedisTimeoutError, match="did not confirm the subscription to t.hang"):
            await sub.subscribe("t.hang")
        assert server.received and b"SUBSCRIBE" in b"".join(server.received)
        await sub.close()

    try:
        asyncio.run(scenario())
    finally:
        server.close()


def test_an_unreachable_redis_is_a_connection_error():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]  # closed below: nothing listens there

    async def scenario():
        sub = Subscriber(Target(host="127.0.0.1", port=port, connect_timeout_s=1.0), Inbox())
        with pytest.raises(RedisConnectionError, match="cannot open a pub/sub connection"):
            await sub.subscribe("t.none")

    asyncio.run(scenario())


def test_a_redis_that_stops_answering_ping_is_dropped_and_reconnected():
    server = SilentServer(answer=True)

    async def scenario():
        sub = Subscriber(Target(host="127.0.0.1", port=server.port, reply_timeout_s=0.3), Inbox(),
                         ping_interval_s=0.2)
        await sub.subscribe("t.ping")
        async with asyncio.timeout(10):
            while server.connections < 2 or not sub.connected or "t.ping" not in sub._subscribed:
                await asyncio.sleep(0.05)
        sent = b"".join(server.received)
        assert b"PING" in sent
        assert sent.count(b"SUBSCRIBE\r\n$6\r\nt.ping") == 2  # once per connection: renewed on the new one
        await sub.close()

    try:
        asyncio.run(scenario())
    finally:
        server.close()
