"""The Redis clients of ``chatplatform.redis_clients`` against real Sentinels: a primary, a
replica and three Sentinels on loopback (``tests.e2e.private_services.PrivateSentinelGroup``).
Each kind of client works through the master the Sentinels name and, after the master is
SIGKILLed and the replica promoted, through the new one without being rebuilt."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.exceptions import RedisError

from chatplatform import redis_clients
from chatplatform.event_log import RedisEventLog
from chatplatform.pubsub import Subscriber, subscriber_target
from chatplatform.redis_cache import SentinelRedisCache
from tests.e2e.harness import require_services
from tests.e2e.private_services import PrivateSentinelGroup, missing_reason

pytestmark = pytest.mark.services


@pytest.fixture
def group():
    require_services(missing_reason(redis=True))
    g = PrivateSentinelGroup(down_after_ms=1000, failover_timeout_ms=3000).start()
    yield g
    g.close()


def config_of(group: PrivateSentinelGroup):
    env = group.env()
    return redis_clients.redis_settings(sentinels=env["REDIS_SENTINELS"], master=env["REDIS_SENTINEL_MASTER"], db="2")


def until(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = predicate()
            if result:
                return result
        except RedisError:
            pass
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.1)


def test_every_client_follows_a_failover(group):
    config = config_of(group)
    client = redis_clients.sync_client(config, socket_timeout=2, socket_connect_timeout=2)
    cache_settings = redis_clients.cache_settings(config, socket_timeout=2, socket_connect_timeout=2)
    cache = SentinelRedisCache(cache_settings["LOCATION"], {"OPTIONS": cache_settings["OPTIONS"]})
    log = RedisEventLog(redis=config, ttl_s=60)
    event = '{"seq":%d}'

    def append(seq: int) -> list[bool]:
        return log.append_and_publish_many([("run-1", "chan", [(seq, event % seq, b"p")])])[0].done

    client.set("k", "before")
    cache.set("c", "before", 60)
    assert append(1) == [True]
    old = group.master_port()
    group.kill_master()
    until(lambda: group.master_port() not in (None, old), "the replica promoted")

    # The same client objects, now on the new master (the replica had every write above).
    assert until(lambda: client.get("k"), "the sync client on the new master") == b"before"
    client.set("k", "after")
    assert until(lambda: cache.get("c"), "the cache on the new master") == "before"
    cache.set("c", "after", 60)
    assert until(lambda: append(2) == [True], "the event log's publisher connection on the new master")
    assert asyncio.run(log.read("run-1")) == [{"seq": 1}, {"seq": 2}]
    assert client.connection_pool.get_master_address()[1] == group.replica.port


def test_the_subscriber_resubscribes_on_the_new_master(group):
    config = config_of(group)

    async def scenario():
        got: list[bytes] = []
        states: list[bool] = []
        target = subscriber_target(redis_clients.channel_layer_host(config, socket_timeout=2,
                                                                    socket_connect_timeout=2))
        sub = Subscriber(target, lambda channel, data: got.append(data), on_state=lambda up, _e: states.append(up))
        publisher = redis_clients.async_client(config, socket_timeout=2, socket_connect_timeout=2)
        await sub.subscribe("ch")
        await publisher.publish("ch", b"one")
        old = group.master_port()
        await asyncio.to_thread(group.kill_master)
        deadline = time.monotonic() + 30
        while b"two" not in got:  # publish until the renewed subscription hears it
            assert time.monotonic() < deadline, (got, states)
            try:
                await publisher.publish("ch", b"two")
            except RedisError:
                pass
            await asyncio.sleep(0.2)
        assert group.master_port() != old
        assert target.port == group.replica.port  # asked the Sentinels, not the old address again
        assert states[-1] is True and False in states
        await sub.close()
        await publisher.aclose()
        return got

    got = asyncio.run(scenario())
    assert got[0] == b"one"


def test_the_event_log_leaves_a_master_demoted_under_it(group):
    """A master demoted while the event log's connection stays open (Sentinel could not kill
    its clients: a partition heals, the old master rejoins as a replica): the log's appends
    fail with READONLY, so it drops the connection and the next append goes to the master the
    Sentinels name. Made by hand here: the roles swapped with REPLICAOF, the Sentinels told
    with SENTINEL REMOVE / MONITOR."""
    import redis

    config = config_of(group)
    log = RedisEventLog(redis=config, ttl_s=60)

    def append(seq: int):
        return log.append_and_publish_many([("run-2", "chan", [(seq, f'{{"seq":{seq}}}', b"p")])])[0]

    assert append(1).done == [True]
    with redis.Redis(port=group.replica.port) as replica:
        replica.replicaof("NO", "ONE")
    with redis.Redis(port=group.primary.port) as old:
        old.replicaof("127.0.0.1", group.replica.port)
    for port in group.sentinel_ports:
        with redis.Redis(port=port) as sentinel:
            sentinel.sentinel_remove(group.MASTER)
            sentinel.sentinel_monitor(group.MASTER, "127.0.0.1", group.replica.port, 2)
    assert group.master_port() == group.replica.port
    first = append(2)
    assert first.done == [] and str(first.error).startswith("READONLY"), first  # on the old connection
    assert until(lambda: append(2).done == [True], "the append on the new master")
    assert [e["seq"] for e in asyncio.run(log.read("run-2"))] == [1, 2]
