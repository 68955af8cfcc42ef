"""Django's Redis cache through Sentinel (``chatplatform.redis_clients.cache_settings``).

Django's ``RedisCache`` builds its pools from URLs and cannot ask a Sentinel; django-redis can,
but it is another cache library with its own serializer and its own error type
(``ConnectionInterrupted``), and the rate limits, the reaper and the lease catch redis-py's
``RedisError`` when the cache is away. So this is Django's backend with one change: its
connection pool is redis-py's ``SentinelConnectionPool`` — every new connection asks the
Sentinels for the master, and one to a master that died or was demoted fails.

``OPTIONS``: ``sentinels`` (``[host, port]`` pairs), ``master_name``, ``sentinel_kwargs``
(options for the connections to the Sentinels), and redis-py connection options for the
master (``db``, ``password``, ``socket_timeout``, …). ``LOCATION`` is not used.
"""

from __future__ import annotations

from django.core.cache.backends.redis import RedisCache, RedisCacheClient


class SentinelRedisCacheClient(RedisCacheClient):
    def __init__(self, servers, *, sentinels, master_name, sentinel_kwargs=None, **options):
        super().__init__(servers, **options)
        self._sentinel_args = (tuple(tuple(s) for s in sentinels), master_name, sentinel_kwargs)

    def _get_connection_pool(self, write):
        # One master: reads and writes share its pool (Django's "first server").
        if 0 not in self._pools:
            from redis.sentinel import Sentinel, SentinelConnectionPool

            sentinels, master_name, sentinel_kwargs = self._sentinel_args
            sentinel = Sentinel(list(sentinels), sentinel_kwargs=sentinel_kwargs)
            self._pools[0] = SentinelConnectionPool(master_name, sentinel, **self._pool_options)
        return self._pools[0]


class SentinelRedisCache(RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = SentinelRedisCacheClient
