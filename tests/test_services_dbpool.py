"""The database pool comes back with PostgreSQL (``chatplatform.dbpool``).

A private cluster (``tests.e2e.private_services``; the shared PostgreSQL is never stopped) is
stopped for ~20 s while requests ask the pool for connections, then started again. psycopg's
own reconnection backs off 1, 2, 4, 8, 16 s, so its attempts fell ~15 and ~31 s after the
outage began (± 10 %) and every request in between failed with ``PoolTimeout`` though the server was
back (8.7 s of failures measured after a 20 s outage). With the settings' ``reconnect_timeout``
and ``reconnect_failed`` callback:

* a request already waiting when the server comes back is served before its timeout runs out
  — nothing else asks the pool meanwhile, so only the callback's fresh attempts serve it;
* the next request is served too.

The alias is built from ``settings.DATABASES["default"]``, so the pool options are the ones
production runs with (only the timeouts and the server differ).
"""

from __future__ import annotations

import copy
import threading
import time

import pytest
from django.conf import settings
from django.db import OperationalError, connections

from chatplatform.dbpool import unreachable
from tests.e2e.harness import require_services
from tests.e2e.private_services import PrivatePostgres, missing_reason

pytestmark = pytest.mark.services

ALIAS = "outage"


def _query() -> str:
    """``SELECT 1`` through Django on the alias (pool timeout 3 s): "ok" or the error's class name."""
    connection = connections[ALIAS]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return "ok" if cursor.fetchone() == (1,) else "wrong"
    except OperationalError as exc:  # Django wraps PoolTimeout and refused connections
        return type(exc.__cause__ or exc).__name__
    finally:
        connection.close()  # hands the connection back to the pool


@pytest.fixture
def outage_alias(django_db_blocker):
    require_services(missing_reason(postgres=True))
    default = settings.DATABASES["default"]
    if default["ENGINE"] != "django.db.backends.postgresql" or "pool" not in default.get("OPTIONS", {}):
        pytest.skip("needs the PostgreSQL pool settings (services pass)")
    pg = PrivatePostgres().start()
    alias = copy.deepcopy(connections.settings["default"])
    alias.update({"NAME": "postgres", "USER": "postgres", "PASSWORD": "", "HOST": "127.0.0.1", "PORT": str(pg.port)})
    alias["OPTIONS"]["pool"] = {**default["OPTIONS"]["pool"], "min_size": 2, "max_size": 4, "timeout": 3}
    connections.settings[ALIAS] = alias
    try:
        with django_db_blocker.unblock():
            yield pg
    finally:
        try:
            connections[ALIAS].close_pool()
        finally:
            del connections[ALIAS]
            connections.settings.pop(ALIAS, None)
            pg.close()


def test_the_pool_serves_requests_as_soon_as_postgresql_is_back(outage_alias):
    pg = outage_alias
    pool_options = settings.DATABASES["default"]["OPTIONS"]["pool"]
    assert pool_options["reconnect_timeout"] == settings.DB_POOL_RECONNECT_S
    assert _query() == "ok"

    pg.stop()
    stopped = time.monotonic()
    assert not unreachable(connections[ALIAS].pool)  # no give-up yet: a busy pool is never "unreachable"
    assert _query() == "PoolTimeout"  # starts the pool's reconnection attempts; they give up after 2 s
    # Known to reach no server: requests are answered at once (chatplatform.middleware).
    assert unreachable(connections[ALIAS].pool)

    waiting: dict[str, str] = {}

    def wait_across_the_return():
        time.sleep(max(0.0, 10.0 - (time.monotonic() - stopped)))
        pool = connections[ALIAS].pool  # the pool Django built from the settings; a longer wait than its 3 s
        try:
            conn = pool.getconn(timeout=13)  # asked at ~10 s, runs out at ~23 s; the server is back at ~20 s
        except Exception as exc:  # noqa: BLE001 — reported, asserted below
            waiting["result"] = type(exc).__name__
        else:
            waiting["result"] = "ok" if conn.execute("SELECT 1").fetchone() == (1,) else "wrong"
            pool.putconn(conn)

    waiter = threading.Thread(target=wait_across_the_return)
    waiter.start()
    time.sleep(max(0.0, 19.5 - (time.monotonic() - stopped)))
    pg.start()

    # Nothing else asks the pool until the waiter is answered: only new attempts the pool makes
    # itself can serve it (psycopg's came at ~15 and ~31 s; a give-up without the callback: none).
    waiter.join(timeout=30)
    assert waiting == {"result": "ok"}
    assert not unreachable(connections[ALIAS].pool)  # a connection succeeded since
    assert _query() == "ok"


def test_a_server_at_its_connection_limit_is_not_taken_for_a_down_one(outage_alias):
    """A pool refused by a server that listens (its connection limit reached: "too many
    connections for role") gives its growth up just the same, but is not marked unreachable:
    its requests keep waiting for the connections its other threads hand back, as they did."""
    import psycopg
    from psycopg_pool import ConnectionPool, PoolTimeout

    pg = outage_alias
    with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
        admin.execute("CREATE ROLE limited LOGIN CONNECTION LIMIT 1")
    options = settings.DATABASES["default"]["OPTIONS"]["pool"]
    pool = ConnectionPool(kwargs={"host": "127.0.0.1", "port": pg.port, "user": "limited", "dbname": "postgres"},
                          min_size=1, max_size=2, timeout=4, open=True,
                          reconnect_timeout=options["reconnect_timeout"], reconnect_failed=options["reconnect_failed"])
    try:
        held = pool.getconn(timeout=5)  # the role's one connection
        with pytest.raises(PoolTimeout):
            pool.getconn(timeout=4)  # the second is refused for longer than reconnect_timeout: a give-up
        assert pool.get_stats()["connections_errors"] >= 2
        assert not unreachable(pool)
        pool.putconn(held)
        again = pool.getconn(timeout=5)  # handed back: served
        pool.putconn(again)
    finally:
        pool.close()
