"""Reconnecting the PostgreSQL pool promptly after an outage: :func:`keep_trying_for_waiters`.

psycopg_pool replaces a lost connection with attempts that back off exponentially (1 s, 2 s,
4 s, 8 s … until ``reconnect_timeout``), and lets only one such attempt grow the pool at a
time. After a 20 s outage its next attempt could be 10 s or more away, so every request
and turn waited out ``DB_POOL_TIMEOUT_S`` and failed although PostgreSQL was back (measured:
8.7 s of ``PoolTimeout`` after the server returned, ``bench``-less repro in
``tests/test_services_dbpool.py``).

The settings give the pool a short ``reconnect_timeout`` (``DB_POOL_RECONNECT_S``, 2 s:
attempts at 0, ~1 and 2 s, then it gives up) and this callback as ``reconnect_failed``: while
requests are waiting for a connection it starts a new attempt at once, so a waiting request
sees an attempt about every second and is served within about a second of the server coming
back; with nobody waiting it stops, and the next request's own attempt connects at once.

Imports nothing from Django: the settings module refers to it.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def keep_trying_for_waiters(pool) -> None:
    """``reconnect_failed`` callback of a ``psycopg_pool.ConnectionPool``: when requests are
    waiting (``get_stats()["requests_waiting"]`` > 0), ``pool.check()`` — which starts a fresh
    connection attempt when the pool has room to grow — so they are not left waiting out their
    timeout behind a give-up. Runs on the pool's maintenance thread; never raises."""
    try:
        waiting = pool.get_stats().get("requests_waiting", 0)
        if waiting and not pool.closed:
            pool.check()
    except Exception:  # a callback must not kill the pool's worker thread
        logger.exception("database pool %r: could not start a new connection attempt", getattr(pool, "name", "?"))
