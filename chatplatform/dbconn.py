"""Database connections of turn threads under Django's PostgreSQL pool (``DB_POOL``).

A turn streams for seconds to minutes but queries for milliseconds: it hands its connection
back to the pool between uses, so a pool smaller than the number of turn threads serves them
all (``DB_POOL_MAX_SIZE``, README). A thread that finds the pool empty waits up to
``DB_POOL_TIMEOUT_S`` and then gets :class:`django.db.OperationalError` (psycopg_pool's
``PoolTimeout``); :func:`agents.runs.driver.run_turn_or_fail` turns that into a visible
``run.failed`` with code ``database_unavailable``.
"""

from __future__ import annotations

from django.db import OperationalError, connection

DATABASE_UNAVAILABLE = "database_unavailable"


def pool_configured() -> bool:
    return bool(connection.settings_dict.get("OPTIONS", {}).get("pool"))


def release_db_connection() -> None:
    """Return this thread's connection to the pool (no-op without a pool, without a
    connection, or inside a transaction). The next query takes one again."""
    if connection.connection is not None and pool_configured() and not connection.in_atomic_block:
        connection.close()


def is_database_unavailable(exc: BaseException) -> bool:
    """True for "no connection": the pool stayed empty for ``DB_POOL_TIMEOUT_S``, or the server
    refused or dropped the connection (``too many clients``, a restart)."""
    return isinstance(exc, OperationalError)


def unavailable_message(exc: BaseException) -> str:
    """A user-facing message for :data:`DATABASE_UNAVAILABLE`; no connection details."""
    return ("The server could not get a database connection to write this reply "
            f"({type(exc.__cause__ or exc).__name__}); your message is saved — try again in a moment.")
