"""Riding out a database blip: :func:`retry_transient`.

PostgreSQL restarting (a failover, an upgrade, a few seconds stopped) breaks every open
connection; the next statement raises ``OperationalError`` ("server closed the connection
unexpectedly", "connection refused") or ``InterfaceError`` ("connection already closed").
A running turn must not be thrown away for that — its upstream call was paid for and its
write tools may have run — so the writes that matter (``agents.runs.lifecycle``, the
messages a turn appends) retry for a bounded time before the error is let through.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections, transaction

logger = logging.getLogger(__name__)

TRANSIENT_DB_ERRORS = (OperationalError, InterfaceError)
"""What a lost or refused database connection raises (Django's wrappers of the driver's)."""

F = TypeVar("F", bound=Callable)


def db_now(using: str = DEFAULT_DB_ALIAS):
    """The database server's clock (aware ``datetime``, UTC): PostgreSQL's
    ``statement_timestamp()``; on SQLite (one host) the process's clock. For timestamps that
    processes on different hosts write and compare — run leases and the reaper's deadlines —
    so a host whose clock is off by seconds neither takes a healthy run for lost nor keeps a
    dead one (``tests/multihost``: a worker host 3 s ahead re-queued every run of the other
    host's worker with a 3 s lease). One round trip; raises what the database raises."""
    from django.utils import timezone

    connection = connections[using]
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def error_line(exc: BaseException) -> str:
    """``"<class>: <first line of its message>"`` — a database error for a one-line log."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def retry_transient(func: F | None = None, *, budget_s: float | None = None, using: str = DEFAULT_DB_ALIAS):
    """Decorator: call the function again when the database connection was lost.

    On ``OperationalError`` / ``InterfaceError`` raised *outside* a transaction, the broken
    connection is closed (the next query opens a new one) and the call is repeated after
    0.1 s, 0.2 s, 0.4 s … (at most 2 s apart) until it succeeds or ``budget_s`` seconds
    (default ``settings.DB_RETRY_S``, 10) have passed; then the last error is raised.
    Inside an ``atomic`` block the error is raised at once: the transaction is lost and
    only its outermost caller may run it again (so decorate the function that *opens* the
    transaction, outside ``@transaction.atomic``).

    Only for functions that are safe to repeat: one conditional ``UPDATE`` (a transition
    that already happened matches no row the second time), or a transaction that either
    committed or did not. A statement whose reply was lost *after* the server committed it
    is the one ambiguous case; the lifecycle's conditional updates make it harmless.

    Usable bare (``@retry_transient``) or with arguments (``@retry_transient(budget_s=3)``).
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            connection = connections[using]
            budget = settings.DB_RETRY_S if budget_s is None else budget_s
            deadline = time.monotonic() + budget
            delay, attempt = 0.1, 0
            while True:
                attempt += 1
                try:
                    return fn(*args, **kwargs)
                except TRANSIENT_DB_ERRORS as exc:
                    if connection.in_atomic_block or time.monotonic() + delay > deadline:
                        raise
                    if attempt == 1:
                        logger.warning("%s: database connection lost (%s); retrying for up to %.0f s",
                                       getattr(fn, "__qualname__", repr(fn)), str(exc).strip().splitlines()[0] if str(exc) else
                                       type(exc).__name__, budget)
                    try:
                        connection.close()
                    except TRANSIENT_DB_ERRORS:
                        connection.connection = None  # nothing left to close cleanly
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0)

        return wrapper  # type: ignore[return-value]

    return decorate(func) if func is not None else decorate


def savepoint_if_nested(using: str = DEFAULT_DB_ALIAS):
    """``with savepoint_if_nested():`` — a savepoint inside a transaction, so a failed statement
    (an ``IntegrityError`` the caller handles, a search that errors) does not poison the outer
    transaction; nothing in autocommit mode, where a failed statement affects only itself and
    ``atomic()`` would add a ``BEGIN`` and a ``COMMIT`` for one statement."""
    if connections[using].in_atomic_block:
        return transaction.atomic(using=using)
    return contextlib.nullcontext()


def update_rows(model, *, set_fields: list[str], where_fields: list[str], rows: list[tuple],
                set_sql: dict[str, str] | None = None, using: str = DEFAULT_DB_ALIAS) -> int:
    """``UPDATE <model's table> SET f = %s, … WHERE w = %s AND …`` once per row of ``rows``, in one
    ``executemany`` (psycopg 3 sends the rows in one pipeline; SQLite runs them in C). Each row
    is the values of ``set_fields`` then of ``where_fields``, in that order, as Python values;
    each is converted by its model field (``get_db_prep_value``: UUIDs, aware datetimes).
    ``set_sql`` may give a field's SET expression instead of ``%s``, written with ``{col}``
    for the column and ``%s`` placeholders taking the row's value for that field (repeated
    as many times as the expression has placeholders). Returns the rows updated, summed.

    For the lease heartbeat's per-beat writes to many rows: at 50 runs the ORM's
    ``Case(When(…))`` form of the same two updates cost 10.9 ms of CPU per beat on PostgreSQL
    (9.5 on SQLite), nearly all Python holding the GIL while the process's streams waited;
    these cost 2.2 (1.8) ms (``bench/heartbeat.py``). Raises what the database raises."""
    connection = connections[using]
    quote = connection.ops.quote_name
    fields = {name: model._meta.get_field(name) for name in (*set_fields, *where_fields)}
    set_sql = set_sql or {}
    assignments, repeats = [], []
    for name in set_fields:
        column = quote(fields[name].column)
        expression = set_sql.get(name, "%s").format(col=column)
        assignments.append(f"{column} = {expression}")
        repeats.append(expression.count("%s"))
    conditions = " AND ".join(f"{quote(fields[name].column)} = %s" for name in where_fields)
    sql = f"UPDATE {quote(model._meta.db_table)} SET {', '.join(assignments)} WHERE {conditions}"
    names = (*set_fields, *where_fields)
    counts = (*repeats, *(1 for _ in where_fields))
    params = [
        [prepared for name, value, count in zip(names, row, counts, strict=True)
         for prepared in [fields[name].get_db_prep_value(value, connection, prepared=False)] * count]
        for row in rows
    ]
    if not params:
        return 0
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
        return cursor.rowcount
