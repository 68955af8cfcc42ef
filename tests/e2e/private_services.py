"""Private Redis and PostgreSQL servers owned by one test, for restart and outage tests.

The shared services of the machine are never restarted; a test that needs to cut Redis or
PostgreSQL starts its own on a free loopback port in a temporary directory, and stops (or
restarts) it at will:

* :class:`PrivateRedis` — ``redis-server``, with or without an append-only file (without it
  a restart loses every key, as a crashed cache node would).
* :class:`PrivatePostgres` — ``initdb`` + ``pg_ctl`` (as the ``postgres`` system user when the
  test runs as root; PostgreSQL refuses to run as root); ``stop()``/``start()`` keep the data.

Both skip (or fail under ``CI=true``) when their binaries are missing — see
:func:`missing_reason`.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .harness import free_port, tcp_reachable


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing_reason(*, redis: bool = False, postgres: bool = False) -> str | None:
    """Why a private server cannot be started here (None when it can)."""
    if redis and not shutil.which("redis-server"):
        return "redis-server not installed"
    if postgres and _pg_bin() is None:
        return "PostgreSQL server binaries (initdb, pg_ctl) not installed"
    return None


def _wait_port(port: int, up: bool, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tcp_reachable("127.0.0.1", port, timeout=0.3) == up:
            return
        time.sleep(0.05)
    raise RuntimeError(f"port {port} did not become {'reachable' if up else 'closed'} within {timeout} s")


class PrivateRedis:
    """A ``redis-server`` on a free port: ``url(db)``, ``stop()``, ``start()``, ``restart(down_s)``.

    ``persistent=True``: an append-only file (fsync always), so a restart keeps every key — the
    production setup README recommends; otherwise a restart starts empty."""

    def __init__(self, *, persistent: bool = False, args: tuple[str, ...] = ()) -> None:
        self.persistent = persistent
        self.args = args  # more redis-server options, e.g. ("--requirepass", "secret")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="private-redis-"))
        self.proc: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> PrivateRedis:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.persistent else "no", "--appendfsync", "always",
             "--dir", str(self.dir), "--logfile", str(self.dir / "redis.log"), *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )
        _wait_port(self.port, up=True)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: every client connection drops at once
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None

    def restart(self, down_s: float = 2.0) -> None:
        """Stop, stay down ``down_s`` seconds, start again (empty: no persistence)."""
        self.stop()
        time.sleep(down_s)
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivatePostgres:
    """A PostgreSQL cluster on a free port (trust auth, user ``postgres``).

    ``url(dbname)``; ``admin_dsn``; ``stop()`` (fast shutdown: every connection is cut) and
    ``start()`` keep the data; ``close()`` removes the cluster."""

    def __init__(self) -> None:
        self.bin = _pg_bin()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="private-pg-"))
        self.data = self.dir / "data"
        self._as_root = os.geteuid() == 0
        if self._as_root:  # PostgreSQL refuses root; the cluster belongs to the postgres user
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self._run([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                   "--no-sync"], timeout=120)

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, cmd: list[str], timeout: float = 60) -> None:
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {result.returncode}: {result.stdout}{result.stderr}")

    def start(self) -> PrivatePostgres:
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir} -c fsync=off"
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "pg.log"), "-o", opts,
                   "-w", "-t", "60", "start"], timeout=90)
        _wait_port(self.port, up=True)
        return self

    def stop(self) -> None:
        if tcp_reachable("127.0.0.1", self.port, timeout=0.3):
            self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"], timeout=60)

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class PrivateSentinelGroup:
    """A Redis primary, one replica and three Sentinels on free loopback ports — Redis as
    README's "Redis with Sentinel" runs it, for failover tests. ``env()`` is what the platform
    needs (``REDIS_SENTINELS``, ``REDIS_SENTINEL_MASTER``); ``kill_master()`` SIGKILLs the
    current master's process; ``master_port()`` asks a Sentinel where the master is now.

    ``down_after_ms`` / ``failover_timeout_ms``: Sentinel's ``down-after-milliseconds`` and
    ``failover-timeout`` (small, so a test's failover takes seconds, not the 30 s / 3 min
    defaults). Quorum 2 of 3."""

    MASTER = "cpmaster"

    def __init__(self, *, down_after_ms: int = 1000, failover_timeout_ms: int = 3000) -> None:
        self.primary = PrivateRedis()
        self.replica = PrivateRedis(args=("--replicaof", "127.0.0.1", str(self.primary.port)))
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.dir = Path(tempfile.mkdtemp(prefix="private-sentinels-"))
        self.sentinels: list[subprocess.Popen | None] = [None, None, None]

    def env(self) -> dict[str, str]:
        return {"REDIS_URL": "", "REDIS_SENTINELS": ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports),
                "REDIS_SENTINEL_MASTER": self.MASTER}

    def sentinel_conf(self, port: int) -> str:
        """A Sentinel's configuration: the values README's "Redis with Sentinel" shows."""
        return "\n".join([
            f"port {port}", "bind 127.0.0.1", f"dir {self.dir}", f"logfile {self.dir / f'sentinel-{port}.log'}",
            f"sentinel monitor {self.MASTER} 127.0.0.1 {self.primary.port} 2",
            f"sentinel down-after-milliseconds {self.MASTER} {self.down_after_ms}",
            f"sentinel failover-timeout {self.MASTER} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {self.MASTER} 1", ""])

    def start(self) -> PrivateSentinelGroup:
        self.primary.start()
        self.replica.start()
        for i, port in enumerate(self.sentinel_ports):
            conf = self.dir / f"sentinel-{port}.conf"  # Sentinel rewrites its own file: one each
            conf.write_text(self.sentinel_conf(port))
            self.sentinels[i] = subprocess.Popen(
                ["redis-server", str(conf), "--sentinel"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            _wait_port(port, up=True)
        self.wait_ready()
        return self

    def _sentinel(self, port: int):
        import redis

        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2,
                           decode_responses=True)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the replica is in sync and every Sentinel knows the replica and the two other
        Sentinels (a failover needs a majority of them to agree)."""
        import redis

        deadline = time.monotonic() + timeout
        state: object = None
        while time.monotonic() < deadline:
            try:
                states = []
                for port in self.sentinel_ports:
                    with self._sentinel(port) as client:
                        master = client.sentinel_master(self.MASTER)
                        states.append((master["num-other-sentinels"], master["num-slaves"]))
                with redis.Redis(host="127.0.0.1", port=self.replica.port, socket_timeout=2,
                                 decode_responses=True) as replica:
                    link = replica.info("replication").get("master_link_status")
                state = (states, link)
                if link == "up" and all(others == 2 and replicas >= 1 for others, replicas in states):
                    return
            except (redis.RedisError, OSError) as exc:
                state = exc
            time.sleep(0.1)
        raise RuntimeError(f"Sentinel group not ready within {timeout} s: {state}")

    def master_port(self) -> int | None:
        """The master's port as the first Sentinel that answers says, or None."""
        import redis

        for port in self.sentinel_ports:
            try:
                with self._sentinel(port) as client:
                    found = client.sentinel_get_master_addr_by_name(self.MASTER)
                if found:
                    return int(found[1])
            except (redis.RedisError, OSError):
                continue
        return None

    def kill_master(self) -> PrivateRedis:
        """SIGKILL the current master's redis-server (no shutdown, no goodbye to its clients'
        sockets beyond the kernel's reset); returns it."""
        port = self.master_port()
        server = self.primary if port == self.primary.port else self.replica
        server.proc.kill()
        server.proc.wait(timeout=10)
        server.proc = None
        return server

    def close(self) -> None:
        for proc in self.sentinels:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)
        self.primary.close()
        self.replica.close()
        shutil.rmtree(self.dir, ignore_errors=True)
