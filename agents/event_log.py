"""The run event log: every published event is kept for replay (DESIGN §7, issue: streams).

* Production (``REDIS_URL``): one Redis stream per run, ``chatplatform:events:<run_id>``,
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

from django.conf import settings

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


# KEYS[1] the run's stream; ARGV: entry id, event JSON, TTL s, pub/sub channel, payload.
_APPEND_AND_PUBLISH = """
local added = redis.pcall('XADD', KEYS[1], ARGV[1], 'e', ARGV[2])
if type(added) == 'table' and added['err'] then
  if string.find(added['err'], 'equal or smaller', 1, true) then return 0 end
  return redis.error_reply(added['err'])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
"""


class RedisEventLog:
    """Redis streams, one per run. One asyncio client per event loop (connections are
    loop-bound), and one synchronous connection for :meth:`append_and_publish_many` (the
    production publisher thread, ``agents.events.ThreadPublisher``)."""

    SOCKET_TIMEOUT_S = 5.0  # a hung Redis stalls the publisher thread at most this long per batch

    def __init__(self, *, url: str, ttl_s: int) -> None:
        self.url = url
        self.ttl_s = int(ttl_s)
        self._clients: dict[int, object] = {}
        self._scripts: dict[int, object] = {}
        self._lock = threading.Lock()
        self._sync_conn = None
        self._sync_sha: str | None = None

    def _client(self):
        import redis.asyncio as redis

        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(id(loop))
            if client is None:
                client = redis.Redis.from_url(self.url)
                self._clients[id(loop)] = client
            return client

    @staticmethod
    def key(run_id: str) -> str:
        return f"chatplatform:events:{run_id}"

    async def append(self, run_id: str, event: dict) -> bool:
        """Keep ``event`` (stream entry id ``<seq>-1``); False when Redis refuses the id because
        the stream already holds that seq or a later one."""
        from redis.exceptions import ResponseError

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

    async def append_and_publish(self, run_id: str, event: dict, channel: str, payload: bytes) -> bool:
        """:meth:`append` and, only when the log took the event, ``PUBLISH payload`` on
        ``channel`` — one round trip (a Lua script) instead of two per event; the channel
        layer's subscribers get ``payload`` exactly as if the layer had sent it. False
        (nothing logged or published) when the log already holds this seq."""
        client = self._client()
        script = self._scripts.get(id(client))
        if script is None:
            script = self._scripts[id(client)] = client.register_script(_APPEND_AND_PUBLISH)
        return bool(await script(keys=[self.key(run_id)], args=[
            f"{event['seq']}-1", json.dumps(event, separators=(",", ":")), self.ttl_s, channel, payload]))

    def append_and_publish_many(self, items: list[tuple[str, dict, str, bytes]]) -> list[bool]:
        """:meth:`append_and_publish` for ``items`` — ``(run_id, event, channel, payload)`` in
        order — in one pipelined round trip on a synchronous connection (the publisher thread's;
        not for concurrent callers). Returns one bool per item: True logged and published, False
        refused (the log already holds that seq). Raises ``redis.RedisError`` (or ``OSError``)
        when Redis is unreachable: then any prefix of the items may have reached the log, and a
        retry sees those refused. No retries here; the caller owns the retry policy.

        One dedicated redis-py ``Connection`` rather than the client: the client's per-command
        pool, retry and instrumentation layers cost about 90 µs of CPU per call here, the
        connection's ``send_packed_command`` / ``read_response`` about 40 µs."""
        from redis.exceptions import NoScriptError, ResponseError

        conn = self._sync_connection()
        if self._sync_sha is None:
            sha = self._sync_call(conn, [("SCRIPT", "LOAD", _APPEND_AND_PUBLISH)])[0]
            if isinstance(sha, ResponseError):
                raise sha
            self._sync_sha = sha.decode() if isinstance(sha, bytes) else sha
        commands = [("EVALSHA", self._sync_sha, 1, self.key(run_id), f"{event['seq']}-1",
                     json.dumps(event, separators=(",", ":")), self.ttl_s, channel, payload)
                    for run_id, event, channel, payload in items]
        results = self._sync_call(conn, commands)
        missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if missing:  # Redis restarted and lost its script cache: load it and run those again
            self._sync_sha = None
            for i, result in zip(missing, self.append_and_publish_many([items[i] for i in missing]), strict=True):
                results[i] = result
        for result in results:
            if isinstance(result, ResponseError):
                raise result
        return [bool(result) for result in results]

    def _sync_connection(self):
        if self._sync_conn is None:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            pool = redis.ConnectionPool.from_url(
                self.url, socket_timeout=self.SOCKET_TIMEOUT_S, socket_connect_timeout=self.SOCKET_TIMEOUT_S,
                retry=Retry(NoBackoff(), 0))
            self._sync_conn = pool.get_connection()  # kept: the publisher thread is its only user
        return self._sync_conn

    @staticmethod
    def _sync_call(conn, commands: list[tuple]) -> list:
        """Send ``commands`` in one write and read one reply each; an error reply comes back
        in its place (a ``ResponseError``); a broken connection is closed and raises."""
        from redis.exceptions import ResponseError

        try:
            conn.send_packed_command(conn.pack_commands(commands))
            results = []
            for _ in commands:
                try:
                    results.append(conn.read_response())
                except ResponseError as exc:
                    results.append(exc)
            return results
        except BaseException:
            conn.disconnect()  # the next call reconnects
            raise

    async def read(self, run_id: str, after_seq: int = 0) -> list[dict]:
        entries = await self._client().xrange(self.key(run_id), min=f"{after_seq + 1}-0", max="+")
        return [json.loads(fields[b"e"]) for _id, fields in entries]

    async def last_seq(self, run_id: str) -> int:
        entries = await self._client().xrevrange(self.key(run_id), count=1)
        return int(entries[0][0].split(b"-")[0]) if entries else 0


_log = None
_log_lock = threading.Lock()


def event_log():
    """The process's event log (Redis when ``REDIS_URL`` is set, else memory)."""
    global _log
    with _log_lock:
        if _log is None:
            if settings.REDIS_URL:
                _log = RedisEventLog(url=settings.REDIS_URL, ttl_s=settings.RUN_EVENT_LOG_TTL_S)
            else:
                _log = MemoryEventLog(max_runs=settings.RUN_EVENT_LOG_MAX_RUNS, ttl_s=settings.RUN_EVENT_LOG_TTL_S)
        return _log
