"""Reconnecting the PostgreSQL pool promptly after an outage: :func:`keep_trying_for_waiters`.

psycopg_pool replaces a lost connection with attempts that back off exponentially (1 s, 2 s,
4 s, 8 s … until ``reconnect_timeout``), and lets only one such attempt grow the pool at a
time. After an outage of a few seconds its next attempt can be many seconds away, so every
request and turn would wait out ``DB_POOL_TIMEOUT_S`` and fail although PostgreSQL is back
(``tests/test_services_dbpool.py`` holds the prompt reconnect).

The settings give the pool a short ``reconnect_timeout`` (``DB_POOL_RECONNECT_S``, 2 s:
attempts at 0, ~1 and 2 s, then it gives up) and this callback as ``reconnect_failed``: while
requests are waiting for a connection it starts a new attempt at once, so a waiting request
sees an attempt about every second and is served within about a second of the server coming
back; with nobody waiting it stops, and the next request's own attempt connects at once.

The same give-up, when nothing listens at the server's address, marks the pool *unreachable*
(:func:`unreachable`) until a connection attempt succeeds: requests and websockets that need
the database are then answered 503 / closed 4503 at once instead of each waiting out
``DB_POOL_TIMEOUT_S`` (10 s) for a server that refuses (otherwise every page, API call and
send hangs that long during an outage). A server at its connection limit still
listens: its requests keep waiting for a connection another thread hands back.

Imports nothing from Django: the settings module refers to it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

logger = logging.getLogger(__name__)

_down: dict[int, int] = {}  # id(pool) → its successful connections when it last gave up
_down_lock = threading.Lock()


def _successes(stats: dict) -> int:
    """Connection attempts that succeeded (psycopg_pool counts attempts and failed attempts)."""
    return stats.get("connections_num", 0) - stats.get("connections_errors", 0)


def maybe_unreachable(pool) -> bool:
    """Cheap (no I/O): whether ``pool`` gave up reconnecting to a server that was not listening
    and has not connected since — then :func:`unreachable` tells for sure. For an event loop:
    call :func:`unreachable` off the loop only when this is True."""
    return id(pool) in _down


def unreachable(pool) -> bool:
    """True while ``pool`` is known to reach no server: its last reconnection attempts failed
    for ``reconnect_timeout`` (``DB_POOL_RECONNECT_S``), none has succeeded since, it holds no
    idle connection, and nothing accepts TCP connections at the server's address now (a
    probe of at most 1 s: a refused connection answers in microseconds). Each call while
    marked starts a new connection attempt (``pool.check()``), so once the server listens
    again the request that noticed is served by that attempt instead of being refused. False
    for a pool that never gave up (one merely busy: its requests wait, as they should).
    Blocking: call it off the event loop (see :func:`maybe_unreachable`)."""
    if not maybe_unreachable(pool):
        return False
    stats = pool.get_stats()
    with _down_lock:
        given_up_at = _down.get(id(pool))
        if given_up_at is None:
            return False
        if _successes(stats) > given_up_at or stats.get("pool_available", 0) > 0:
            del _down[id(pool)]
            return False
    try:
        pool.check()  # grows the empty pool: one attempt, on its maintenance thread
    except Exception:  # noqa: BLE001 — a closed pool: the caller's own request says so
        logger.debug("database pool check failed", exc_info=True)
    return not _server_listening(pool)


def _server_listening(pool) -> bool:
    """Whether anything accepts TCP connections at the pool's server address (its ``kwargs``'
    ``host`` and ``port``, as Django passes them). A server at its connection limit, or one
    refusing a login, still listens: its pool is not "unreachable", and requests wait for a
    connection another thread hands back. A Unix socket is not checked (True)."""
    kwargs = pool.kwargs if isinstance(pool.kwargs, dict) else {}
    host = str(kwargs.get("host") or "localhost").split(",")[0]
    if host.startswith("/"):
        return True
    try:
        port = int(str(kwargs.get("port") or 5432).split(",")[0])
        socket.create_connection((host, port), timeout=1.0).close()
    except (OSError, ValueError):
        return False
    return True


def keep_trying_for_waiters(pool) -> None:
    """``reconnect_failed`` callback of a ``psycopg_pool.ConnectionPool``: marks the pool
    unreachable (:func:`unreachable`) when nothing listens at its server's address (a refused
    TCP connection: the server is down or restarting) and, when requests are waiting
    (``get_stats()["requests_waiting"]`` > 0), calls ``pool.check()`` — which starts a fresh
    connection attempt when the pool has room to grow — so they are not left waiting out their
    timeout behind a give-up. Runs on the pool's maintenance thread; never raises."""
    try:
        if not _server_listening(pool):  # a server refusing for its connection limit is not "down"
            with _down_lock:
                _down[id(pool)] = _successes(pool.get_stats())
        waiting = pool.get_stats().get("requests_waiting", 0)
        if waiting and not pool.closed:
            pool.check()
    except Exception:  # a callback must not kill the pool's worker thread
        logger.exception("database pool %r: could not start a new connection attempt", getattr(pool, "name", "?"))


def default_pool():
    """The ``default`` alias's psycopg pool, or None (SQLite, ``DB_POOL=false``)."""
    from django.db import connections

    return getattr(connections["default"], "pool", None)


def database_down() -> bool:
    """:func:`unreachable` for the ``default`` pool (False without one). No I/O unless the pool
    is marked (:func:`maybe_unreachable`): cheap on every request and frame."""
    pool = default_pool()
    return pool is not None and maybe_unreachable(pool) and unreachable(pool)


async def adatabase_down() -> bool:
    """:func:`database_down` for an event loop: the probe, only while the pool is marked, runs
    in a thread."""
    pool = default_pool()
    return pool is not None and maybe_unreachable(pool) and await asyncio.to_thread(unreachable, pool)
