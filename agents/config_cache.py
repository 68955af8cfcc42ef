"""A per-process cache of what administrators configure, exact to the last committed change.

Every run reads the same few admin-governed rows — its model's row, price and allowed roles,
the tool policies, the budgets — and at 50 chats started at once building those queries was
a tenth of a run's CPU (``bench/run_cpu.py``). They change a few times a day.

:func:`config_cached` keeps a value per process together with the *configuration
generation* it was built under: one ``bigint`` in ``agents_config_generation``, which database
triggers (``agents`` migration 0014, ``usage`` 0003) set to a new value in the same
transaction as any ``INSERT``, ``UPDATE``, ``DELETE`` or ``TRUNCATE`` of a governed table —
whoever writes it: the admin, a queryset ``update()`` that sends no signals, a data
migration, ``psql``. A lookup reads the generation (one indexed single-row ``SELECT``, built
as plain SQL: ~0.1 ms) and rebuilds the value when it differs, so a change applies to the
next lookup in every process the moment it commits — a role taken off a model refuses the
next send, as before there was a cache.

Why it is exact:

* the generation is read *before* the value is built: a change committed in between makes
  the value newer than its generation, never older, and the next lookup sees a new generation;
* the new values are unique (a sequence on PostgreSQL, a random 63-bit number on SQLite), so
  a transaction that changes configuration, looks it up (it sees its own uncommitted
  generation) and rolls back leaves a value under a generation no one will read again.

Governed tables (``GOVERNED_TABLES``): roles, providers, models and their allowed roles,
model prices, tool policies and their allowed roles, budgets. A provider's health probe
(at most once per ``PROVIDER_HEALTH_TTL_S``, 300 s) moves it too. Not memberships (per user,
read with the thread) and not budget windows (every run writes them).

Cached values are shared between threads: treat them as read-only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

from django.db import connection

T = TypeVar("T")

TABLE = "agents_config_generation"

GOVERNED_TABLES = {
    "agents": ("agents_role", "agents_provider", "agents_llmmodel", "agents_llmmodel_allowed_roles", "agents_toolpolicy",
               "agents_toolpolicy_allowed_roles"),
    "usage": ("usage_modelprice", "usage_budget"),
}
"""App label → the tables whose changes move the generation (the app's migration adds the
triggers: :func:`trigger_sql`)."""

MAX_ENTRIES = 4096
"""At most this many values per process. Keys can come from users (a thread's model name
that has no row is cached as ``None``): when full, values of older generations are dropped,
and if that frees nothing a new value is returned without being kept."""

_values: dict[Hashable, tuple[int, object]] = {}
_lock = threading.Lock()


def config_generation() -> int:
    """The configuration generation this connection sees now (a committed change, or this
    transaction's own). Raises what the database raises."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT generation FROM {TABLE} WHERE id = 1")  # noqa: S608  (a constant)
        return cursor.fetchone()[0]


def config_cached(key: Hashable, build: Callable[[], T]) -> T:
    """``build()``, kept per process under ``key`` for as long as the configuration generation
    does not move (at most ``MAX_ENTRIES`` values). ``build`` must read only governed tables
    (``GOVERNED_TABLES``) and return a value no caller changes. One statement per lookup;
    ``build``'s when rebuilt. Two threads that rebuild the same key at once both build; the
    last one's value is kept, under the generation it read (either is exact for it)."""
    generation = config_generation()
    cached = _values.get(key)
    if cached is not None and cached[0] == generation:
        return cached[1]  # type: ignore[return-value]
    value = build()
    with _lock:
        if key not in _values and len(_values) >= MAX_ENTRIES:
            for stale in [k for k, (built_under, _v) in _values.items() if built_under != generation]:
                del _values[stale]
            if len(_values) >= MAX_ENTRIES:
                return value
        _values[key] = (generation, value)
    return value


def config_cache_clear() -> None:
    """Forget every cached value (tests that change configuration behind the triggers' back,
    e.g. a database restored from a dump)."""
    with _lock:
        _values.clear()


# -- the triggers (used by the migrations) ---------------------------------------------------
def trigger_sql(vendor: str, tables: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``(forward, backward)`` SQL statements: triggers that move the generation on every
    change of ``tables``, for ``vendor`` (``postgresql`` or ``sqlite``)."""
    forward, backward = [], []
    for table in tables:
        name = f"{table}_config_changed"
        if vendor == "postgresql":
            forward += [
                f"CREATE TRIGGER {name} AFTER INSERT OR UPDATE OR DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION {TABLE}_move()",
                f"CREATE TRIGGER {name}_truncate AFTER TRUNCATE ON {table} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {TABLE}_move()",
            ]
            backward += [f"DROP TRIGGER IF EXISTS {name} ON {table}",
                         f"DROP TRIGGER IF EXISTS {name}_truncate ON {table}"]
        else:  # SQLite: row triggers, one per event
            for event in ("INSERT", "UPDATE", "DELETE"):
                forward.append(
                    f"CREATE TRIGGER {name}_{event.lower()} AFTER {event} ON {table} BEGIN "
                    f"UPDATE {TABLE} SET generation = abs(random() % 9223372036854775807) WHERE id = 1; END")
                backward.append(f"DROP TRIGGER IF EXISTS {name}_{event.lower()}")
    return forward, backward


def generation_table_sql(vendor: str) -> tuple[list[str], list[str]]:
    """``(forward, backward)`` SQL: the one-row generation table (and, on PostgreSQL, the
    sequence and trigger function that give each change a new value)."""
    if vendor == "postgresql":
        return ([f"CREATE SEQUENCE {TABLE}_seq",
                 f"CREATE TABLE {TABLE} (id smallint PRIMARY KEY CHECK (id = 1), generation bigint NOT NULL)",
                 f"INSERT INTO {TABLE} VALUES (1, nextval('{TABLE}_seq'))",
                 f"CREATE FUNCTION {TABLE}_move() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 f"UPDATE {TABLE} SET generation = nextval('{TABLE}_seq') WHERE id = 1; RETURN NULL; END $$"],
                [f"DROP FUNCTION IF EXISTS {TABLE}_move() CASCADE", f"DROP TABLE IF EXISTS {TABLE}",
                 f"DROP SEQUENCE IF EXISTS {TABLE}_seq"])
    return ([f"CREATE TABLE {TABLE} (id integer PRIMARY KEY CHECK (id = 1), generation integer NOT NULL)",
             f"INSERT INTO {TABLE} VALUES (1, abs(random() % 9223372036854775807))"],
            [f"DROP TABLE IF EXISTS {TABLE}"])
