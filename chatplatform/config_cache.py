"""A per-process cache of what administrators configure, exact to the last committed change.

Every run reads the same few admin-governed rows — its model's row, price and allowed roles,
the tool policies, the budgets — and building those queries is a visible share of a run's CPU
(``bench/run_cpu.py``), for rows that change a few times a day.

:func:`config_cached` keeps a value per process together with the *configuration
generation* it was built under: one ``bigint`` in ``agents_config_generation``, which database
triggers set to a new random value in the same transaction as any ``INSERT``, ``UPDATE``,
``DELETE`` or ``TRUNCATE`` of a governed table — whoever writes it: the admin, a queryset
``update()`` that sends no signals, a data migration, ``psql``. A lookup reads the generation
(one indexed single-row ``SELECT``, built as plain SQL: ~0.1 ms) and rebuilds the value when
it differs, so a change applies to the next lookup in every process the moment it commits — a
role taken off a model refuses the next send, as before there was a cache.

Why it is exact:

* the generation is read *before* the value is built: a change committed in between makes
  the value newer than its generation, never older, and the next lookup sees a new generation;
* generations are random (53 bits on PostgreSQL, 63 on SQLite), never counted: a transaction
  that changes configuration, looks it up (it sees its own uncommitted generation) and rolls
  back, a table dropped and migrated again, or a dump restored leave values under generations
  that will not come back;
* the triggers are (re)installed after every ``migrate`` (:func:`install_triggers`, on
  ``post_migrate``): SQLite drops a table's triggers when a migration rebuilds the table.

Governed tables (``GOVERNED_TABLES``): roles, providers, models and their allowed roles,
model prices, tool policies and their allowed roles, budgets. A provider's health probe
(at most once per ``PROVIDER_HEALTH_TTL_S``, 300 s) moves it too. Not memberships (per user,
read with the thread) and not budget windows (every run writes them). Every write of a
governed table also writes the generation row, so configuration writes are serialised: two
transactions writing governed rows in opposite orders can deadlock (PostgreSQL aborts one);
keep configuration transactions short. Writes with triggers disabled
(``session_replication_role = replica``, ``pg_restore --disable-triggers``) are not seen:
restart the processes after them.

Until the table exists (new code started before ``migrate``), nothing is cached and every
lookup reads the tables, as before there was a cache.

Cached values are shared between threads: treat them as read-only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

from django.db import connection

T = TypeVar("T")

TABLE = "agents_config_generation"

GOVERNED_TABLES = ("agents_role", "agents_provider", "agents_llmmodel", "agents_llmmodel_allowed_roles",
                   "agents_toolpolicy", "agents_toolpolicy_allowed_roles", "usage_modelprice", "usage_budget")
"""The tables whose changes move the generation (:func:`install_triggers`)."""

MAX_ENTRIES = 4096
"""At most this many values per process. Keys can come from users (a thread's model name
that has no row is cached as ``None``): when full, values of older generations are dropped,
and if that frees nothing a new value is returned without being kept."""

_values: dict[Hashable, tuple[int, object]] = {}
_lock = threading.Lock()


_table_seen = False


def config_generation() -> int | None:
    """The configuration generation this connection sees now (a committed change, or this
    transaction's own); None while the table does not exist (looked up again each time until
    it does). Raises what the database raises."""
    global _table_seen
    with connection.cursor() as cursor:
        if not _table_seen:
            if TABLE not in connection.introspection.table_names(cursor):
                return None
            _table_seen = True
        cursor.execute(f"SELECT generation FROM {TABLE} WHERE id = 1")  # noqa: S608  (a constant)
        return cursor.fetchone()[0]


def config_cached(key: Hashable, build: Callable[[], T]) -> T:
    """``build()``, kept per process under ``key`` for as long as the configuration generation
    does not move (at most ``MAX_ENTRIES`` values). ``build`` must read only governed tables
    (``GOVERNED_TABLES``) and return a value no caller changes. One statement per lookup;
    ``build``'s when rebuilt. Two threads that rebuild the same key at once both build; the
    last one's value is kept, under the generation it read (either is exact for it)."""
    generation = config_generation()
    if generation is None:
        return build()
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


# -- the table and its triggers (migrations, post_migrate) -----------------------------------
_NEW_VALUE = {
    "postgresql": "floor(random() * 9007199254740991)::bigint",
    "sqlite": "abs(random() % 9223372036854775807)",
}


def create_table(schema_editor) -> None:
    """The one-row generation table (``agents`` migration 0014)."""
    vendor = schema_editor.connection.vendor
    schema_editor.execute(f"CREATE TABLE {TABLE} (id integer PRIMARY KEY CHECK (id = 1), generation bigint NOT NULL)")
    schema_editor.execute(f"INSERT INTO {TABLE} VALUES (1, {_NEW_VALUE[vendor]})")


def drop_table(schema_editor) -> None:
    """Undo :func:`create_table` and every trigger (reversing ``agents`` 0014)."""
    drop_triggers(schema_editor.connection)
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {TABLE}_move()")
    schema_editor.execute(f"DROP TABLE IF EXISTS {TABLE}")


def install_triggers(db_connection=None) -> list[str]:
    """Make sure every governed table that exists has its triggers (and PostgreSQL the trigger
    function), create the missing ones, and move the generation once (a change made while a
    trigger was missing — SQLite drops them when a migration rebuilds a table — is seen).
    Nothing when the generation table does not exist. Returns the names of the triggers
    created. Idempotent; run on ``post_migrate`` and by the migrations."""
    db = db_connection or connection
    vendor = db.vendor
    if vendor not in _NEW_VALUE:
        return []
    created = []
    with db.cursor() as cursor:
        tables = set(db.introspection.table_names(cursor))
        if TABLE not in tables:
            return []
        if vendor == "postgresql":
            cursor.execute(f"CREATE OR REPLACE FUNCTION {TABLE}_move() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                           f"UPDATE {TABLE} SET generation = {_NEW_VALUE[vendor]} WHERE id = 1; RETURN NULL; END $$")
        present = {name for _table, name in _installed(db, cursor)}
        for table in GOVERNED_TABLES:
            if table not in tables:
                continue
            for name, sql in _trigger_definitions(vendor, table):
                if name not in present:
                    cursor.execute(sql)
                    created.append(name)
        cursor.execute(f"UPDATE {TABLE} SET generation = {_NEW_VALUE[vendor]} WHERE id = 1")  # noqa: S608
    return created


def drop_triggers(db, tables: tuple[str, ...] = GOVERNED_TABLES) -> None:
    """Drop the configuration triggers of ``tables`` (reversing a migration that installed them)."""
    with db.cursor() as cursor:
        for table, name in _installed(db, cursor):
            if table in tables:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}" + (f" ON {table}" if db.vendor == "postgresql" else ""))


def _trigger_definitions(vendor: str, table: str) -> list[tuple[str, str]]:
    """``(name, CREATE statement)`` of each trigger ``table`` needs."""
    name = f"{table}_config_changed"
    if vendor == "postgresql":
        return [(name, f"CREATE TRIGGER {name} AFTER INSERT OR UPDATE OR DELETE ON {table} "
                       f"FOR EACH ROW EXECUTE FUNCTION {TABLE}_move()"),
                (f"{name}_truncate", f"CREATE TRIGGER {name}_truncate AFTER TRUNCATE ON {table} "
                                     f"FOR EACH STATEMENT EXECUTE FUNCTION {TABLE}_move()")]
    return [(f"{name}_{event.lower()}", f"CREATE TRIGGER {name}_{event.lower()} AFTER {event} ON {table} BEGIN "
                                        f"UPDATE {TABLE} SET generation = {_NEW_VALUE[vendor]} WHERE id = 1; END")
            for event in ("INSERT", "UPDATE", "DELETE")]  # SQLite: row triggers, one per event


def _installed(db, cursor) -> list[tuple[str, str]]:
    """``(table, trigger name)`` of the configuration triggers in the database."""
    if db.vendor == "postgresql":
        cursor.execute("SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                       "WHERE NOT t.tgisinternal")
    else:
        cursor.execute("SELECT tbl_name, name FROM sqlite_master WHERE type = 'trigger'")
    return [(table, name) for table, name in cursor.fetchall() if "_config_changed" in name]
