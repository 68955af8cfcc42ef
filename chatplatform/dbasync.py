"""``db_async(fn)``: run a sync database function from async code on the loop's default
executor (``WEB_DB_THREADS`` threads, set in ``config.loop_binding``).

Channels' ``database_sync_to_async`` is thread-sensitive: every websocket of a web process
shares ONE thread for its database work, so 10 simultaneous ``message.send`` frames (each a
transaction, a broker publish and access checks) queue behind each other, and every reply's
first token waits for them. Each call here is self-contained (its own
transaction; connections are closed or returned to the pool around it, as Channels does), so
it may run on any of the executor's threads.
"""

from __future__ import annotations

import functools

from channels.db import database_sync_to_async

db_async = functools.partial(database_sync_to_async, thread_sensitive=False)
