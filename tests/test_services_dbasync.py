"""``db_async`` gives its pooled connection back when its call returns, even while Channels'
test communicators have turned ``channels.db.close_old_connections`` into a no-op: an executor
thread that ended holding one (each test's event loop closes its executor) kept it for good,
and after one module of websocket tests a test process's pool had 20 of its connections gone
(the next tests' runs then failed with ``couldn't get a connection``). PostgreSQL: the pool."""

from __future__ import annotations

import asyncio
import concurrent.futures
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from chatplatform.dbasync import db_async

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def in_use(pool) -> int:
    stats = pool.get_stats()
    return stats.get("pool_size", 0) - stats.get("pool_available", 0)


def test_a_call_returns_its_connection_even_when_channels_does_not_close_it():
    pool = connection.pool
    assert pool is not None, "the services pass runs on PostgreSQL with the pool"
    connection.close()  # this thread's own connection back first
    before = in_use(pool)

    async def calls():
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(4))
        with mock.patch("channels.db.close_old_connections", lambda: None):  # as WebsocketCommunicator does
            await asyncio.gather(*(db_async(get_user_model().objects.count)() for _ in range(8)))

    asyncio.run(calls())  # the loop's executor threads end here
    assert in_use(pool) == before
