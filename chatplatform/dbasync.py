"""``db_async(fn)``: run a sync database function from async code on the loop's default
executor (``WEB_DB_THREADS`` threads, set in ``config.loop_binding``).

Channels' ``database_sync_to_async`` is thread-sensitive: every websocket of a web process
shares ONE thread for its database work, so 10 simultaneous ``message.send`` frames (each a
transaction, a broker publish and access checks) queue behind each other, and every reply's
first token waits for them. Each call here is self-contained (its own transaction), so it may
run on any of the executor's threads.

The thread's connection is returned to the pool (or closed) when ``fn`` returns, by
``fn``'s own wrapper rather than only by Channels' ``close_old_connections`` around it: the
Channels test communicators turn that one into a no-op while they wait, and an executor
thread that then ended (a test's event loop closing) kept its pooled connection for good —
enough of them starved the pool of a test process.
"""

from __future__ import annotations

import functools

from channels.db import database_sync_to_async
from django.db import close_old_connections


def db_async(fn):
    """``fn`` as a coroutine function run on the loop's default executor; the connection it
    used is released when it returns or raises."""

    @functools.wraps(fn)
    def released(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return database_sync_to_async(released, thread_sensitive=False)
