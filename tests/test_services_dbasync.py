"""``db_async`` gives its pooled connection back when its call returns, even while Channels'
test communicators have turned ``channels.db.close_old_connections`` into a no-op: an executor
thread that ended holding one (each test's event loop closes its executor) kept it for good,
and after one module of websocket tests a test process's pool had 20 of its connections gone
(the next tests' runs then failed with ``couldn't get a connection``). PostgreSQL: the pool."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from chatplatform.dbasync import db_async

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


PREFIX = "dbasync-test"


def test_a_call_returns_its_connection_even_when_channels_does_not_close_it():
    """Counted per connection the call's own executor threads take and give back — not the
    pool's total, which other threads of the test process (a previous test's background job)
    move at the same time."""
    pool = connection.pool
    assert pool is not None, "the services pass runs on PostgreSQL with the pool"
    connection.close()  # this thread's own connection back first
    taken, returned = [], []
    real_get, real_put = pool.getconn, pool.putconn

    def getconn(*args, **kwargs):
        conn = real_get(*args, **kwargs)
        if threading.current_thread().name.startswith(PREFIX):
            taken.append(id(conn))
        return conn

    def putconn(conn):
        if threading.current_thread().name.startswith(PREFIX):
            returned.append(id(conn))
        return real_put(conn)

    async def calls():
        executor = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix=PREFIX)
        asyncio.get_running_loop().set_default_executor(executor)
        with mock.patch("channels.db.close_old_connections", lambda: None):  # as WebsocketCommunicator does
            await asyncio.gather(*(db_async(get_user_model().objects.count)() for _ in range(8)))

    with mock.patch.object(pool, "getconn", getconn), mock.patch.object(pool, "putconn", putconn):
        asyncio.run(calls())  # the loop's executor threads end here
    assert taken, "the calls took no connection from the pool"
    assert sorted(returned) == sorted(taken)  # each one given back by the thread that took it
