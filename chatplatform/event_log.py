"""The run event log: every published event is kept for replay (DESIGN §7, issue: streams).

* Production (``settings.REDIS``: ``REDIS_URL`` or Sentinel): one Redis stream per run, ``chatplatform:events:<run_id>``,
  entry id ``<seq>-1``, expiring ``RUN_EVENT_LOG_TTL_S`` (default 24 h) after the last event.
* Embedded: a bounded in-process store (``RUN_EVENT_LOG_MAX_RUNS`` runs, same TTL).

The log is the authority on seqs: an append whose seq is not above the run's last logged seq
is refused (``append`` returns False), and the emitter then does not publish that event — a
stale writer (one whose lease was taken over) can never fork the numbering.

After the log has expired the database is the truth: messages are final, and a resume of
such a run gets an ``events_missing`` error telling the client to reload them.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from redis.exceptions import NoScriptError, RedisError, ResponseError

from chatplatform import redis_clients
from chatplatform.pubsub import pack_command

logger = logging.getLogger(__name__)


class MemoryEventLog:
    """Per-process log for embedded mode. Thread-safe; methods are async for one interface."""

    def __init__(self, *, max_runs: int, ttl_s: float) -> None:
        self.max_runs = max_runs
        self.ttl_s = ttl_s
        self._runs: collections.OrderedDict[str, tuple[float, list[dict]]] = collections.OrderedDict()
        self._lock = threading.Lock()

    async def append(self, run_id: str, event: dict) -> bool:
        """Keep ``event``; False (nothing kept) when its seq is not above the last one."""
        with self._lock:
            _, events = self._runs.pop(run_id, (0.0, []))
            if events and event["seq"] <= events[-1]["seq"]:
                self._runs[run_id] = (time.monotonic(), events)
                return False
            events.append(event)
            self._runs[run_id] = (time.monotonic(), events)
            while len(self._runs) > self.max_runs:
                self._runs.popitem(last=False)
            return True

    async def read(self, run_id: str, after_seq: int = 0) -> list[dict]:
        with self._lock:
            stamp, events = self._runs.get(run_id, (0.0, []))
            if events and time.monotonic() - stamp > self.ttl_s:
                self._runs.pop(run_id, None)
                return []
            return [e for e in events if e["seq"] > after_seq]

    async def last_seq(self, run_id: str) -> int:
        events = await self.read(run_id)
        return events[-1]["seq"] if events else 0


# One run's events in order. KEYS[1] the run's stream; ARGV: TTL s, pub/sub channel, then
# (entry id, event JSON, payload) per event. Returns {results, error}: results[i] 1 logged and
# published, 0 refused (seq not new); an error stops the loop (a script is not rolled back, so
# the results say what was done) and the events after it were not run.
_APPEND_AND_PUBLISH_MANY = """
local results, added = {}, false
for i = 3, #ARGV, 3 do
  local reply = redis.pcall('XADD', KEYS[1], ARGV[i], 'e', ARGV[i + 1])
  if type(reply) == 'table' and reply['err'] then
    if not string.find(reply['err'], 'equal or smaller', 1, true) then
      if added then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
      return {results, reply['err']}
    end
    results[#results + 1] = 0
  else
    redis.call('PUBLISH', ARGV[2], ARGV[i + 2])
    results[#results + 1] = 1
    added = true
  end
end
if added then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return {results, ''}
"""


@dataclass
class Appended:
    """What became of one run's events in a batch (``RedisEventLog.append_and_publish_many``):
    ``done[i]`` True logged and published, False refused (the log holds that seq already); the
    events after ``len(done)`` were not taken: ``error`` says why, and ``unknown`` is True when
    the connection broke before the reply came, so they may have reached the log after all."""

    done: list[bool]
    error: BaseException | None = None
    unknown: bool = False


class RedisEventLog:
    """Redis streams, one per run. One asyncio client per event loop (connections are
    loop-bound), and one synchronous connection for :meth:`append_and_publish_many` (the
    production publisher thread, ``agents.events.ThreadPublisher``), both from ``redis``
    (``chatplatform.redis_clients``: through Sentinel, a connection lost with its master
    reconnects to the one the Sentinels name).

    After a Sentinel failover the new master may lack the last events the old one took but had
    not yet replicated (Redis replicates asynchronously). Appends go on above them (the log
    refuses only a seq not above its last one), and a reader meets the hole as
    ``events_missing`` (``agents.replay``, ``agents.streams``), as after an outage."""

    SOCKET_TIMEOUT_S = 5.0  # a hung Redis stalls the publisher thread at most this long per batch

    def __init__(self, *, redis: redis_clients.RedisSettings, ttl_s: int) -> None:
        self.redis = redis
        self.ttl_s = int(ttl_s)
        self._clients: dict[int, object] = {}
        self._lock = threading.Lock()
        self._sync_conn = None
        self._sync_sha: str | None = None

    def _client(self):
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(id(loop))
            if client is None:
                client = redis_clients.async_client(self.redis)
                self._clients[id(loop)] = client
            return client

    @staticmethod
    def key(run_id: str) -> str:
        return f"chatplatform:events:{run_id}"

    async def append(self, run_id: str, event: dict) -> bool:
        """Keep ``event`` (stream entry id ``<seq>-1``); False when Redis refuses the id because
        the stream already holds that seq or a later one."""
        key = self.key(run_id)
        async with self._client().pipeline(transaction=False) as pipe:  # one round trip
            pipe.xadd(key, {"e": json.dumps(event, separators=(",", ":"))}, id=f"{event['seq']}-1")
            pipe.expire(key, self.ttl_s)
            added, _ = await pipe.execute(raise_on_error=False)
        if isinstance(added, ResponseError):
            if "equal or smaller" in str(added):
                return False
            raise added
        return True

    def append_and_publish_many(self, runs: list[tuple[str, str, list[tuple[int, str, bytes]]]]) -> list[Appended]:
        """Log and publish several runs' events in one pipelined round trip on a synchronous
        connection (the publisher thread's; not for concurrent callers). ``runs``: ``(run_id,
        pub/sub channel, [(seq, event JSON, payload), …])``, each run's events in seq order.
        Each run is one script call (``_APPEND_AND_PUBLISH_MANY``), so an error reply (BUSY,
        OOM, a restarted Redis's NOSCRIPT — loaded and run again here) stops that run's events
        where it happened and never lets a later seq of the run in before an earlier one.
        Returns one :class:`Appended` per run; never raises for Redis errors (a broken
        connection is closed, reconnected on the next call, and reported in ``Appended``).

        One dedicated redis-py ``Connection`` rather than the client: the client's per-command
        pool, retry and instrumentation layers cost more than twice the CPU per call of the
        connection's ``send_packed_command`` / ``read_response``, and this runs per event.
        Commands are packed by :func:`chatplatform.pubsub.pack_command` (cheaper than
        redis-py's packer, on the same per-event path)."""
        try:
            conn = self._sync_connection()
            # Reconnect here if the last call lost the connection: ``connect()`` is what asks
            # the Sentinels where the master is now — the implicit reconnect inside
            # ``send_packed_command`` would dial the old master's address again.
            conn.connect()
            if self._sync_sha is None:
                replies, broke = self._sync_call(conn, [("SCRIPT", "LOAD", _APPEND_AND_PUBLISH_MANY)])
                if broke or isinstance(replies[0], Exception):
                    raise broke or replies[0]
                self._sync_sha = replies[0].decode() if isinstance(replies[0], bytes) else replies[0]
        except (RedisError, OSError) as exc:  # nothing was sent
            return [Appended([], exc) for _ in runs]
        commands = []
        for run_id, channel, items in runs:
            args = [self.ttl_s, channel]
            for seq, event_json, payload in items:
                args += [f"{seq}-1", event_json, payload]
            commands.append(("EVALSHA", self._sync_sha, 1, self.key(run_id), *args))
        replies, broke = self._sync_call(conn, commands)
        out: list[Appended] = []
        reload: list[int] = []
        for i in range(len(runs)):
            if i >= len(replies):
                out.append(Appended([], broke, unknown=True))
            elif isinstance(replies[i], NoScriptError):
                out.append(Appended([], replies[i]))
                reload.append(i)
            elif isinstance(replies[i], Exception):
                out.append(Appended([], replies[i]))
            else:
                results, error = replies[i]
                error = error.decode() if isinstance(error, bytes) else error
                out.append(Appended([bool(r) for r in results], ResponseError(error) if error else None))
        if any(a.error is not None and str(a.error).startswith("READONLY") for a in out):
            # The server became a replica (a failover; a partitioned old master rejoining): drop
            # the connection, so the next call asks the Sentinels for the master. The events
            # were not taken, and are retried as after a lost connection.
            conn.disconnect()
            self._sync_sha = None
        if reload:  # Redis restarted and lost its script cache: nothing of these runs was run
            self._sync_sha = None
            for i, again in zip(reload, self.append_and_publish_many([runs[i] for i in reload]), strict=True):
                out[i] = again
        return out

    def _sync_connection(self):
        if self._sync_conn is None:
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            pool = redis_clients.sync_pool(
                self.redis, socket_timeout=self.SOCKET_TIMEOUT_S, socket_connect_timeout=self.SOCKET_TIMEOUT_S,
                retry=Retry(NoBackoff(), 0))
            self._sync_conn = pool.get_connection()  # kept: the publisher thread is its only user
        return self._sync_conn

    def _sync_call(self, conn, commands: list[tuple]) -> tuple[list, BaseException | None]:
        """Send ``commands`` in one write and read their replies: ``(replies, broke)``. An
        error reply comes back in its place (a ``ResponseError``). When the connection breaks,
        ``replies`` holds those read before it, ``broke`` the exception; the connection is
        closed (the next call reconnects) and the script is loaded again on it."""
        replies: list = []
        try:
            conn.send_packed_command([b"".join([pack_command(*command) for command in commands])])  # a list: bytes alone would be sent byte by byte
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
            return replies, None
        except (RedisError, OSError) as exc:
            conn.disconnect()
            self._sync_sha = None  # a new server may not have it
            return replies, exc

    async def read(self, run_id: str, after_seq: int = 0) -> list[dict]:
        entries = await self._client().xrange(self.key(run_id), min=f"{after_seq + 1}-0", max="+")
        return [json.loads(fields[b"e"]) for _id, fields in entries]

    async def last_seq(self, run_id: str) -> int:
        entries = await self._client().xrevrange(self.key(run_id), count=1)
        return int(entries[0][0].split(b"-")[0]) if entries else 0


_log = None
_log_lock = threading.Lock()


def event_log():
    """The process's event log (Redis in production mode, ``settings.REDIS``; else memory)."""
    global _log
    with _log_lock:
        if _log is None:
            if settings.REDIS:
                _log = RedisEventLog(redis=settings.REDIS, ttl_s=settings.RUN_EVENT_LOG_TTL_S)
            else:
                _log = MemoryEventLog(max_runs=settings.RUN_EVENT_LOG_MAX_RUNS, ttl_s=settings.RUN_EVENT_LOG_TTL_S)
        return _log
