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
