"""Redis from the settings: the one place that turns the Redis settings into clients.

Production mode has two forms (``config.settings.base`` parses them with :func:`redis_settings`):

* **one server**: ``REDIS_URL=redis://[:password@]host:port/db`` — as always;
* **Sentinel**: ``REDIS_SENTINELS=host:port,host:port,host:port`` and
  ``REDIS_SENTINEL_MASTER=<the master's name in sentinel.conf>``, with ``REDIS_DB`` (default 0),
  ``REDIS_PASSWORD`` (the Redis servers' ``requirepass``, optional) and
  ``REDIS_SENTINEL_PASSWORD`` (the Sentinels' own ``requirepass``, optional).

Every Redis user takes its connection from here, through the libraries' own Sentinel support:
redis-py's ``Sentinel.master_for`` (the event log, the cache), channels-redis's Sentinel host
entry (the channel layer's publishing side; its subscriber asks the Sentinels itself,
``chatplatform.pubsub``), kombu's ``sentinel://`` transport (the Celery broker). A connection
to a master that died or was demoted fails; the next one asks the Sentinels where the master is
now. Nothing else is done about a failover here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from django.core.exceptions import ImproperlyConfigured

SENTINEL_TIMEOUT_S = 2.0
"""Connect and reply timeout towards one Sentinel: a Sentinel answers in microseconds, and one
that is unreachable must not hold up asking the next."""


@dataclass(frozen=True)
class RedisSettings:
    """Where production mode's Redis is: ``url`` (one server), or ``sentinels`` (``(host,
    port)`` pairs) and ``master`` (the name the Sentinels monitor) with ``db``, ``password``
    (the servers') and ``sentinel_password`` (the Sentinels')."""

    url: str = ""
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str = ""
    db: int = 0
    password: str | None = None
    sentinel_password: str | None = None

    @property
    def uses_sentinel(self) -> bool:
        return bool(self.sentinels)

    def describe(self) -> str:
        """For logs and errors (no password)."""
        if self.uses_sentinel:
            hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
            return f"master {self.master!r} db {self.db} via Sentinels {hosts}"
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"


def _parse_sentinels(value: str) -> tuple[tuple[str, int], ...]:
    sentinels = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")  # [::1]:26379
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ImproperlyConfigured(
                f"REDIS_SENTINELS: {item!r} is not host:port (expected e.g. "
                f"REDIS_SENTINELS=10.0.0.5:26379,10.0.0.6:26379,10.0.0.7:26379)")
        sentinels.append((host, int(port)))
    if not sentinels:
        raise ImproperlyConfigured("REDIS_SENTINELS is set but names no Sentinel (host:port,host:port,…)")
    return tuple(sentinels)


def redis_settings(*, url: str = "", sentinels: str = "", master: str = "", db: str = "",
                   password: str = "", sentinel_password: str = "") -> RedisSettings | None:
    """The Redis settings from the environment's strings (empty = unset); None when neither
    ``REDIS_URL`` nor ``REDIS_SENTINELS`` is set (embedded mode). ``REDIS_URL`` is taken as it
    is, as before. Raises ``ImproperlyConfigured`` (naming the variable) for both forms at
    once, a Sentinel list without a master name or the reverse, an entry that is not
    ``host:port``, a ``REDIS_DB`` that is not a number ≥ 0, or ``REDIS_SENTINEL_MASTER``
    beside ``REDIS_URL``. ``REDIS_DB`` and both passwords belong to the Sentinel form and are
    ignored beside ``REDIS_URL`` (whose URL carries them), so an environment that sets them for
    other reasons keeps working."""
    url, sentinels, master = url.strip(), sentinels.strip(), master.strip()
    if url and sentinels:
        raise ImproperlyConfigured("Set REDIS_URL (one Redis server) or REDIS_SENTINELS (Redis through "
                                   "Sentinel), not both")
    if url:
        if master:  # someone meant Sentinel: say so rather than quietly use one server
            raise ImproperlyConfigured("REDIS_SENTINEL_MASTER applies to REDIS_SENTINELS, not REDIS_URL: set one "
                                       "form (REDIS_DB and the passwords are ignored beside REDIS_URL)")
        return RedisSettings(url=url)
    if not sentinels:
        if master:
            raise ImproperlyConfigured("REDIS_SENTINEL_MASTER is set but REDIS_SENTINELS is not")
        return None
    if not master:
        raise ImproperlyConfigured("REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER is not (the master's "
                                   "name in sentinel.conf, e.g. mymaster)")
    db = db.strip() or "0"
    if not db.isdigit():
        raise ImproperlyConfigured(f"REDIS_DB must be a database number (0, 1, …), not {db!r}")
    return RedisSettings(sentinels=_parse_sentinels(sentinels), master=master, db=int(db),
                         password=password or None, sentinel_password=sentinel_password or None)


def url_db(config: RedisSettings) -> int:
    """The database number the platform uses (the URL's path, else 0)."""
    if config.uses_sentinel:
        return config.db
    path = urlsplit(config.url).path.strip("/")
    return int(path) if path.isdigit() else 0


def _sentinel_kwargs(config: RedisSettings) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"socket_timeout": SENTINEL_TIMEOUT_S, "socket_connect_timeout": SENTINEL_TIMEOUT_S}
    if config.sentinel_password:
        kwargs["password"] = config.sentinel_password
    return kwargs


def _master_kwargs(config: RedisSettings, options: dict[str, Any]) -> dict[str, Any]:
    kwargs = {"db": config.db, **options}
    if config.password:
        kwargs["password"] = config.password
    return kwargs


def sync_client(config: RedisSettings, **options: Any) -> redis.Redis:
    """A redis-py client for the master (``options``: redis-py connection options)."""
    if config.uses_sentinel:
        sentinel = redis.sentinel.Sentinel(list(config.sentinels), sentinel_kwargs=_sentinel_kwargs(config))
        return sentinel.master_for(config.master, **_master_kwargs(config, options))
    return redis.Redis.from_url(config.url, **options)


def sync_pool(config: RedisSettings, **options: Any) -> redis.ConnectionPool:
    """A redis-py connection pool for the master; with Sentinel each new connection asks the
    Sentinels where the master is, and a connection to a master that was demoted fails."""
    if config.uses_sentinel:
        sentinel = redis.sentinel.Sentinel(list(config.sentinels), sentinel_kwargs=_sentinel_kwargs(config))
        return redis.sentinel.SentinelConnectionPool(config.master, sentinel, **_master_kwargs(config, options))
    return redis.ConnectionPool.from_url(config.url, **options)


def async_client(config: RedisSettings, **options: Any) -> redis.asyncio.Redis:
    """A redis-py asyncio client for the master (bound to the running event loop's use)."""
    if config.uses_sentinel:
        sentinel = redis.asyncio.sentinel.Sentinel(list(config.sentinels), sentinel_kwargs=_sentinel_kwargs(config))
        return sentinel.master_for(config.master, **_master_kwargs(config, options))
    return redis.asyncio.Redis.from_url(config.url, **options)


def channel_layer_host(config: RedisSettings, **options: Any) -> dict[str, Any]:
    """A channels-redis ``hosts`` entry (``chatplatform.layers.RedisPubSubLayer``)."""
    if config.uses_sentinel:
        return {"sentinels": [list(s) for s in config.sentinels], "master_name": config.master,
                "sentinel_kwargs": _sentinel_kwargs(config), **_master_kwargs(config, options)}
    return {"address": config.url, **options}


def celery_broker(config: RedisSettings) -> tuple[str, dict[str, Any]]:
    """``(broker URL, transport options to add)`` for Celery: kombu's ``sentinel://`` transport
    (one ``sentinel://[:password@]host:port/db`` per Sentinel, ``;``-separated, with
    ``master_name`` and ``sentinel_kwargs``), or the URL itself."""
    if not config.uses_sentinel:
        return config.url, {}
    auth = f":{quote(config.password, safe='')}@" if config.password else ""
    url = ";".join(f"sentinel://{auth}{_netloc(host)}:{port}/{config.db}" for host, port in config.sentinels)
    return url, {"master_name": config.master, "sentinel_kwargs": _sentinel_kwargs(config)}


def _netloc(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def cache_settings(config: RedisSettings, **options: Any) -> dict[str, Any]:
    """``CACHES["default"]``: Django's ``RedisCache`` — with Sentinel, its subclass
    :class:`chatplatform.redis_cache.SentinelRedisCache` (Django's backend cannot ask a
    Sentinel; the subclass only swaps the connection pool, every cache behaviour and error
    stays Django's)."""
    if not config.uses_sentinel:
        return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": config.url, "OPTIONS": options}
    return {"BACKEND": "chatplatform.redis_cache.SentinelRedisCache", "LOCATION": f"sentinel://{config.master}",
            "OPTIONS": {"sentinels": [list(s) for s in config.sentinels], "master_name": config.master,
                        "sentinel_kwargs": _sentinel_kwargs(config), **_master_kwargs(config, options)}}
