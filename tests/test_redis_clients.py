"""The Redis settings (``REDIS_URL`` or ``REDIS_SENTINELS`` + ``REDIS_SENTINEL_MASTER``) and the
client factory built on them (``chatplatform.redis_clients``), without a Redis: what each
form becomes for redis-py, channels-redis, kombu and Django's cache, and the error a bad value
gets. ``tests/test_services_sentinel.py`` runs the clients against real Sentinels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import redis.asyncio.sentinel
import redis.sentinel
from django.core.exceptions import ImproperlyConfigured

from chatplatform import redis_clients
from chatplatform.pubsub import subscriber_target
from chatplatform.redis_clients import RedisSettings, redis_settings

SENTINEL = dict(sentinels="10.0.0.5:26379, 10.0.0.6:26380,[::1]:26381", master="mymaster")


def test_neither_form_is_embedded_mode():
    assert redis_settings() is None
    assert redis_settings(db="3", password="x") is None  # Sentinel-only values alone switch nothing


def test_redis_url_is_taken_as_it_is():
    config = redis_settings(url="redis://:pw@cache:6380/2", db="5", password="ignored")
    assert config == RedisSettings(url="redis://:pw@cache:6380/2")
    assert redis_clients.url_db(config) == 2
    assert redis_clients.url_db(redis_settings(url="redis://cache")) == 0


def test_sentinel_form_is_parsed():
    config = redis_settings(**SENTINEL, db="4", password="srv", sentinel_password="sen")
    assert config.sentinels == (("10.0.0.5", 26379), ("10.0.0.6", 26380), ("::1", 26381))
    assert (config.master, config.db, config.password, config.sentinel_password) == ("mymaster", 4, "srv", "sen")
    assert redis_clients.url_db(config) == 4
    assert "srv" not in config.describe() and "sen" not in config.describe()
    assert redis_settings(**SENTINEL).db == 0


@pytest.mark.parametrize(("values", "message"), [
    (dict(url="redis://a:6379/0", **SENTINEL), "not both"),
    (dict(url="redis://a:6379/0", master="mymaster"), "REDIS_SENTINEL_MASTER applies to REDIS_SENTINELS"),
    (dict(sentinels="a:26379"), "REDIS_SENTINEL_MASTER is not"),
    (dict(master="mymaster"), "REDIS_SENTINELS is not"),
    (dict(sentinels="a:26379,b", master="m"), "'b' is not host:port"),
    (dict(sentinels="a:port", master="m"), "'a:port' is not host:port"),
    (dict(sentinels="a:70000", master="m"), "'a:70000' is not host:port"),
    (dict(sentinels=":26379", master="m"), "':26379' is not host:port"),
    (dict(sentinels=" , ", master="m"), "names no Sentinel"),
    (dict(sentinels="a:26379", master="m", db="one"), "REDIS_DB must be a database number"),
    (dict(sentinels="a:26379", master="m", db="-1"), "REDIS_DB must be a database number"),
])
def test_bad_values_are_refused_naming_the_setting(values, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        redis_settings(**values)


def test_clients_through_sentinel_ask_the_sentinels():
    config = redis_settings(**SENTINEL, db="4", password="srv", sentinel_password="sen")
    client = redis_clients.sync_client(config, socket_timeout=5)
    pool = client.connection_pool
    assert isinstance(pool, redis.sentinel.SentinelConnectionPool) and pool.service_name == "mymaster"
    assert pool.connection_kwargs["db"] == 4 and pool.connection_kwargs["password"] == "srv"
    assert pool.connection_kwargs["socket_timeout"] == 5
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
            for s in sentinels] == list(config.sentinels)
    assert sentinels[0].connection_pool.connection_kwargs["password"] == "sen"
    assert isinstance(redis_clients.sync_pool(config), redis.sentinel.SentinelConnectionPool)
    assert isinstance(redis_clients.async_client(config).connection_pool,
                      redis.asyncio.sentinel.SentinelConnectionPool)


def test_clients_from_a_url_are_plain():
    config = redis_settings(url="redis://127.0.0.1:6390/3")
    client = redis_clients.sync_client(config)
    assert type(client.connection_pool) is redis.ConnectionPool
    assert client.connection_pool.connection_kwargs["db"] == 3
    assert redis_clients.channel_layer_host(config, socket_timeout=30) == {
        "address": "redis://127.0.0.1:6390/3", "socket_timeout": 30}
    assert redis_clients.celery_broker(config) == ("redis://127.0.0.1:6390/3", {})
    assert redis_clients.cache_settings(config, socket_timeout=5) == {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:6390/3",
        "OPTIONS": {"socket_timeout": 5}}


def test_celery_broker_through_sentinel_is_kombus_sentinel_transport():
    url, options = redis_clients.celery_broker(redis_settings(**SENTINEL, db="2", password="p@ss"))
    assert url == ("sentinel://:p%40ss@10.0.0.5:26379/2;sentinel://:p%40ss@10.0.0.6:26380/2;"
                   "sentinel://:p%40ss@[::1]:26381/2")
    assert options["master_name"] == "mymaster"
    from kombu import Connection

    conn = Connection(url, transport_options=options)
    assert conn.transport_cls == "sentinel" or type(conn.transport).__name__ == "SentinelTransport"
    assert conn.alt == url.split(";")  # kombu's failover list: every Sentinel


def test_channel_layer_host_through_sentinel_is_read_by_both_sides():
    config = redis_settings(**SENTINEL, db="1", password="srv")
    host = redis_clients.channel_layer_host(config, socket_timeout=30, socket_connect_timeout=5)
    from channels_redis.utils import create_pool

    pool = create_pool(host)  # channels-redis's publishing side
    assert isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool) and pool.service_name == "mymaster"
    target = subscriber_target(host)  # the subscriber
    assert target.master_name == "mymaster" and target.sentinels == config.sentinels
    assert target.password == "srv" and target.reply_timeout_s == 5.0
    assert target.describe() == "master mymaster"


def test_cache_through_sentinel_is_djangos_backend_on_a_sentinel_pool():
    from chatplatform.redis_cache import SentinelRedisCache

    settings = redis_clients.cache_settings(redis_settings(**SENTINEL, db="6"), socket_timeout=5)
    cache = SentinelRedisCache(settings["LOCATION"], {"OPTIONS": settings["OPTIONS"]})
    pool = cache._cache._get_connection_pool(write=False)
    assert isinstance(pool, redis.sentinel.SentinelConnectionPool)
    assert pool is cache._cache._get_connection_pool(write=True)  # one master for reads and writes
    assert pool.connection_kwargs["db"] == 6 and pool.connection_kwargs["socket_timeout"] == 5


def _settings_in_a_process(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = ("from django.conf import settings as s; import json; print(json.dumps([s.CELERY_BROKER_URL, "
            "s.CELERY_BROKER_TRANSPORT_OPTIONS.get('master_name'), s.CACHES['default']['BACKEND'], "
            "s.CHANNEL_LAYER_PREFIX, s.RUN_EXECUTOR, s.CHANNEL_LAYERS['default']['BACKEND']]))")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS", "CELERY", "RUN_EXECUTOR",
                                                                        "CHANNEL_LAYER"))}
    return subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=60,
                          env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings.local", **env})


def test_settings_switch_to_production_mode_through_sentinel():
    import json

    result = _settings_in_a_process({"REDIS_SENTINELS": "127.0.0.1:26379,127.0.0.1:26380",
                                     "REDIS_SENTINEL_MASTER": "mymaster", "REDIS_DB": "3"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [
        "sentinel://127.0.0.1:26379/3;sentinel://127.0.0.1:26380/3", "mymaster",
        "chatplatform.redis_cache.SentinelRedisCache", "asgi-db3", "celery", "chatplatform.layers.RedisPubSubLayer"]


def test_settings_refuse_a_bad_sentinel_configuration_at_start():
    result = _settings_in_a_process({"REDIS_SENTINELS": "127.0.0.1:26379"})
    assert result.returncode != 0
    assert "ImproperlyConfigured: REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER is not" in result.stderr
