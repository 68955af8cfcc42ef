"""End-to-end harness: the platform as real subprocesses (``Platform``).

Two modes, both started from this repository with ``.venv/bin/python``:

* ``embedded`` — SQLite in a temporary directory, no ``REDIS_URL`` (in-memory channel
  layer, turns on the web process's executor threads); one daphne process.
* ``services`` — a fresh PostgreSQL database (created here, dropped on stop), a Redis db
  (FLUSHDB first), channels-redis, and a Celery worker (thread pool) running the turns.

``start()`` gives the platform a migrated database, runs ``seed_demo``, starts the processes
and waits (bounded) until HTTP answers. The database is a copy of one migrated once per test
process and mode (``migrated_template``: ``CREATE DATABASE … TEMPLATE`` on PostgreSQL, the
SQLite backup API) — ``migrate`` costs seconds of CPU per platform, a copy a fraction of one;
``E2E_NO_TEMPLATE=1`` migrates every platform's database itself. ``stop()`` terminates every child (kill after a timeout). Each
process's output goes to a log file in the temporary directory; ``log_tail()`` returns the
end of every log so a failing test can show what the servers said.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
PYTHON = VENV_BIN / "python"
DEMO_PASSWORD = "e2e-demo-Pa55"
PG_ADMIN_DSN = os.environ.get("E2E_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
PG_URL_BASE = os.environ.get("E2E_PG_URL_BASE", "postgres://postgres@127.0.0.1:5432")
REDIS_BASE = os.environ.get("E2E_REDIS_BASE", "redis://127.0.0.1:6379")
# The platforms' Redis database; under pytest-xdist test process gwN takes the one N below, so
# two processes never flush each other's.
REDIS_DB = int(os.environ.get("E2E_REDIS_DB", "5")) - int(
    os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)

# Variables from the caller's environment (or a developer's .env) that would change what
# the platform connects to; the harness decides all of them explicitly.
_SCRUB = (
    "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "RUN_EXECUTOR", "OPENAI_API_KEY",
    "OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL",
    "OLLAMA_BASE_URL", "OLLAMA_MODEL", "CSRF_TRUSTED_ORIGINS", "DJANGO_SETTINGS_MODULE",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
)


def exit_on_sigterm() -> None:
    """Make SIGTERM (``timeout``, ``kill``, a CI runner's cancel) unwind the main thread like
    Ctrl-C — ``SystemExit`` with status 128 + 15 — so ``with Platform(…)`` blocks and
    ``finally`` clauses run :meth:`Platform.stop`. The servers run in sessions of their own, so
    without this they outlive a terminated bench or test, and an orphaned Celery worker goes
    on taking turns from the shared Redis queue of the next run. Only from the main thread,
    and only over Python's default disposition (a handler someone installed is kept)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


class PlatformError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcp_reachable(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def services_unreachable_reason() -> str | None:
    """``None`` when PostgreSQL and Redis both answer, else why not."""
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        return f"PostgreSQL at {PG_ADMIN_DSN} unreachable: {exc}"
    try:
        import redis

        client = redis.Redis.from_url(f"{REDIS_BASE}/{REDIS_DB}", socket_connect_timeout=3, socket_timeout=3)
        client.ping()
        client.close()
    except Exception as exc:  # noqa: BLE001
        return f"Redis at {REDIS_BASE} unreachable: {exc}"
    return None


def require_services(reason: str | None) -> None:
    """For a test that needs services (PostgreSQL, Redis, a private server binary): nothing when
    ``reason`` is None; otherwise fail under ``CI=true`` (CI must run it) and skip elsewhere."""
    if reason:
        import pytest

        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"CI=true requires the services for this test: {reason}", pytrace=False)
        pytest.skip(reason)


def started(platform: Platform):
    """For a module fixture: ``yield from started(Platform(...))`` — start it (a start-up
    failure fails the test with the platform's log tail, without a traceback), hand it over,
    stop it afterwards."""
    import pytest

    try:
        platform.start()
    except PlatformError as exc:
        pytest.fail(f"{platform.mode} platform did not start: {exc}", pytrace=False)
    try:
        yield platform
    finally:
        platform.stop()


def started_with_fake_model(mode: str, upstream, **env: str):
    """For a module fixture: ``yield from started_with_fake_model(request.param, upstream, …)`` —
    a platform in ``mode`` whose provider ``openai`` is the fake upstream (``tests/fakes``),
    with ``env`` as extra settings; the services mode needs PostgreSQL and Redis."""
    if mode == "services":
        require_services(services_unreachable_reason())
    yield from started(Platform(mode, extra_env={
        "OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
        **env}))


_templates: dict[str, str | None] = {}
_templates_lock = threading.Lock()


def migrated_template(mode: str) -> str | None:
    """A database migrated once for this test process: in ``embedded`` mode the path of an
    SQLite file, in ``services`` mode the name of a PostgreSQL database on the shared server
    (dropped when the process exits). Later platforms start from a copy of it instead of
    running ``migrate``. ``None`` (each platform migrates its own) with ``E2E_NO_TEMPLATE=1``
    or when building it failed — the failure is then the first platform's to report."""
    if os.environ.get("E2E_NO_TEMPLATE") == "1":
        return None
    with _templates_lock:
        if mode not in _templates:
            _templates[mode] = _build_template(mode)
        return _templates[mode]


def _build_template(mode: str) -> str | None:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings.local", "SECRET_KEY": "test", "DEBUG": "false",
                "REDIS_URL": "", "PYTHONUNBUFFERED": "1"})
    if mode == "embedded":
        folder = Path(tempfile.mkdtemp(prefix="chatplatform-e2e-template-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        target, env["DATABASE_URL"] = str(folder / "db.sqlite3"), f"sqlite:///{folder / 'db.sqlite3'}"
    else:
        import psycopg

        target = f"chatplatform_e2e_template_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        try:
            with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'CREATE DATABASE "{target}"')
        except Exception:  # noqa: BLE001 - unreachable: the platform's own start says so
            return None
        atexit.register(_drop_database, target)
        env["DATABASE_URL"] = f"{PG_URL_BASE}/{target}"
    result = subprocess.run([str(PYTHON), "manage.py", "migrate", "--noinput"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        sys.stderr.write(f"e2e: migrating the {mode} template failed; each platform migrates its own:\n"
                         f"{result.stderr[-2000:]}\n")
        return None
    return target


def _drop_database(name: str) -> None:
    import psycopg

    try:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except Exception as exc:  # noqa: BLE001 - at exit: report only
        sys.stderr.write(f"e2e: could not drop database {name}: {exc}\n")


class Platform:
    """The running platform. Use as a context manager or call ``start()``/``stop()``."""

    def __init__(self, mode: str = "embedded", *, password: str = DEMO_PASSWORD,
                 startup_timeout: float = 60.0, extra_env: dict[str, str] | None = None,
                 asgi_server: str = "daphne", redis_url: str | None = None, pg_admin_dsn: str | None = None,
                 pg_url_base: str | None = None, worker_concurrency: int = 8,
                 settings_module: str | None = None) -> None:
        """``redis_url`` / ``pg_admin_dsn`` + ``pg_url_base``: a private Redis or PostgreSQL
        (``tests.e2e.private_services``) instead of the shared ones (services mode);
        ``worker_concurrency``: turn threads of the Celery worker (services mode);
        ``settings_module``: the processes' ``DJANGO_SETTINGS_MODULE`` — by default
        ``E2E_SETTINGS_MODULE`` (the test suite sets ``tests.e2e.settings``: a cheap password
        hasher), else ``config.settings.local`` as deployed (the benchmarks)."""
        if mode not in ("embedded", "services"):
            raise ValueError(mode)
        if asgi_server not in ("daphne", "uvicorn"):
            raise ValueError(asgi_server)
        self.asgi_server = asgi_server
        self.settings_module = settings_module or os.environ.get("E2E_SETTINGS_MODULE", "config.settings.local")
        self.worker_concurrency = worker_concurrency
        self.mode = mode
        self.password = password
        self.startup_timeout = startup_timeout
        self.extra_env = dict(extra_env or {})
        self.tmpdir = Path(tempfile.mkdtemp(prefix=f"chatplatform-e2e-{mode}-"))
        self.port = 0
        self.db_name: str | None = None
        self.redis_url: str | None = None
        self._redis_url = redis_url or f"{REDIS_BASE}/{REDIS_DB}"
        self._pg_admin_dsn = pg_admin_dsn or PG_ADMIN_DSN
        self._pg_url_base = pg_url_base or PG_URL_BASE
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, Path] = {}
        self._log_files: list = []
        self.env: dict[str, str] = {}
        self.keep_tmp = os.environ.get("E2E_KEEP_TMP") == "1"
        self._from_template = False

    # --- addresses -----------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_base(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def ws_url(self, thread_id) -> str:
        return f"{self.ws_base}/ws/threads/{thread_id}/"

    # --- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> Platform:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Platform:
        exit_on_sigterm()
        try:
            self.env = self._environment()
            if not self._from_template:
                self.manage("migrate", "--noinput", timeout=180)
            self.manage("seed_demo", timeout=180)
            if self.mode == "services":
                self._start_worker()
            self._start_daphne()
            self._wait_http()
            if self.mode == "services":
                self._wait_worker()
        except Exception as exc:
            tail = self.log_tail()
            self.stop()
            raise PlatformError(f"{self.mode} platform failed to start: {exc}\n{tail}") from exc
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        for fh in self._log_files:
            fh.close()
        self._log_files.clear()
        if self.mode == "services":
            self._drop_services()
        if not self.keep_tmp:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    # --- commands ------------------------------------------------------------------------
    def manage(self, *args: str, timeout: float = 120, check: bool = True,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """``manage.py <args>`` against this platform's database; output logged and returned."""
        cmd = [str(PYTHON), "manage.py", *args]
        result = subprocess.run(cmd, cwd=REPO, env={**self.env, **(env or {})}, capture_output=True,
                                text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        log = self.tmpdir / f"manage-{args[0]}.log"
        with log.open("a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}\n"
                     f"--- exit {result.returncode}\n")
        self._logs.setdefault(f"manage {args[0]}", log)
        if check and result.returncode != 0:
            raise PlatformError(f"manage.py {' '.join(args)} exited {result.returncode}:\n"
                                f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
        return result

    def sql(self, query: str, *params) -> list[tuple]:
        """Run ``query`` (``%s`` placeholders) on this platform's database from the test
        process — its SQLite file or its PostgreSQL database — committed, and return the rows.
        For arranging or reading state behind the platform's back (no signals, no notices)
        without the seconds of start-up a ``manage.py shell`` costs."""
        if self.mode == "embedded":
            conn = sqlite3.connect(self.tmpdir / "db.sqlite3", timeout=30)
            try:
                rows = conn.execute(query.replace("%s", "?"), params).fetchall()
                conn.commit()
            finally:
                conn.close()
            return rows
        import psycopg
        from psycopg.conninfo import make_conninfo

        with psycopg.connect(make_conninfo(self._pg_admin_dsn, dbname=self.db_name), autocommit=True,
                             connect_timeout=5) as conn:
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for name, path in self._logs.items():
            try:
                text = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            out.append(f"----- {name} ({path}) last {lines} lines -----")
            out.extend(text[-lines:])
        return "\n".join(out)

    # --- internals -----------------------------------------------------------------------
    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        env.update({
            "DJANGO_SETTINGS_MODULE": self.settings_module,
            "DEBUG": "false",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SECRET_KEY": "test",
            "DEMO_PASSWORD": self.password,
            "OFFLINE_DELTA_DELAY_S": "0.01",
            "LOGIN_RATE_LIMIT": "1000/min",  # the suite logs in many times a minute from one address
            "LOGIN_USERNAME_RATE_LIMIT": "1000/min",  # ... as the same few users
            "PYTHONUNBUFFERED": "1",
            "NO_PROXY": "127.0.0.1,localhost",
            "LOG_LEVEL": os.environ.get("E2E_LOG_LEVEL", "WARNING"),
            # No embedding model in a platform unless its test turns it on (extra_env
            # KNOWLEDGE_EMBEDDINGS=local): loading and embedding the demo corpus costs CPU
            # every other test on the machine would feel.
            "KNOWLEDGE_EMBEDDINGS": os.environ.get("E2E_KNOWLEDGE_EMBEDDINGS", "off"),
            # Title requests would take scripted answers of the fake models: a module that
            # tests titles turns them on (extra_env CHAT_TITLE_GENERATION=true).
            "CHAT_TITLE_GENERATION": "false",
        })
        if self.mode == "embedded":
            db_file = self.tmpdir / "db.sqlite3"
            env["DATABASE_URL"] = f"sqlite:///{db_file}"
            env["REDIS_URL"] = ""  # explicit: a developer's .env must not switch the mode
            template = migrated_template("embedded")
            if template is not None:
                with sqlite3.connect(template) as src, sqlite3.connect(db_file) as dst:
                    src.backup(dst)
                self._from_template = True
        else:
            self._create_services()
            env["DATABASE_URL"] = f"{self._pg_url_base}/{self.db_name}"
            env["REDIS_URL"] = self.redis_url
            # As the README runs a worker: the settings know its thread count, so each
            # process's connection pool is sized for it (two test processes' platforms share
            # PostgreSQL's max_connections).
            env["WORKER_CONCURRENCY"] = str(self.worker_concurrency)
        env.update(self.extra_env)
        return env

    def _create_services(self) -> None:
        import psycopg
        import redis

        reason = services_unreachable_reason()
        if reason:
            raise PlatformError(reason)
        self.db_name = f"chatplatform_e2e_{uuid.uuid4().hex[:12]}"
        # The shared server's databases are copies of one migrated template; a private
        # server (tests that stop it) lives for one module, where a template would save nothing.
        template = migrated_template("services") if self._pg_admin_dsn == PG_ADMIN_DSN else None
        with psycopg.connect(self._pg_admin_dsn, autocommit=True, connect_timeout=5) as conn:
            if template:
                conn.execute(f'CREATE DATABASE "{self.db_name}" TEMPLATE "{template}"')
                self._from_template = True
            else:
                conn.execute(f'CREATE DATABASE "{self.db_name}"')
        self.redis_url = self._redis_url
        client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=3, socket_timeout=5)
        client.flushdb()
        client.close()

    def _drop_services(self) -> None:
        if self.db_name:
            import psycopg

            try:
                with psycopg.connect(self._pg_admin_dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            except Exception as exc:  # noqa: BLE001 - report, never mask the test's own result
                sys.stderr.write(f"e2e: could not drop database {self.db_name}: {exc}\n")
            self.db_name = None
        if self.redis_url:
            import redis

            try:
                client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=3, socket_timeout=5)
                client.flushdb()
                client.close()
            except Exception as exc:  # noqa: BLE001
                sys.stderr.write(f"e2e: could not flush {self.redis_url}: {exc}\n")
            self.redis_url = None

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = self.tmpdir / f"{name}.log"
        fh = log.open("w")
        self._log_files.append(fh)
        self._logs[name] = log
        # A new session: stop() signals the whole process group (celery's pool, daphne).
        proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[name] = proc
        return proc

    def _start_worker(self) -> None:
        self.worker_name = f"e2e-{uuid.uuid4().hex[:8]}@127.0.0.1"
        self._spawn("celery", self.worker_command(self.worker_name, self.worker_concurrency))

    @staticmethod
    def worker_command(name: str, concurrency: int) -> list[str]:
        """A Celery worker's command line as the README runs it (a thread pool)."""
        return [str(VENV_BIN / "celery"), "-A", "config", "worker", "--pool", "threads",
                "--concurrency", str(concurrency), "--loglevel", "WARNING", "-n", name,
                "--without-gossip", "--without-mingle", "--without-heartbeat"]

    def add_worker(self, concurrency: int) -> subprocess.Popen:
        """Start one more Celery worker (services mode) and wait until it answers a ping."""
        n = sum(1 for name in self.procs if name.startswith("celery")) + 1
        name = f"e2e-{uuid.uuid4().hex[:8]}-{n}@127.0.0.1"
        proc = self._spawn(f"celery{n}", self.worker_command(name, concurrency))
        self._wait_worker(name, proc)
        return proc

    def _start_daphne(self) -> None:
        for attempt in range(3):
            self.port = free_port()
            proc = self._spawn("daphne", self.web_command(self.port))  # "daphne": the web process, whichever server
            time.sleep(0.3)
            if proc.poll() is None:
                return
            if "Address already in use" not in self._logs["daphne"].read_text(errors="replace") or attempt == 2:
                raise PlatformError(f"daphne exited with {proc.returncode}")
            del self.procs["daphne"]

    def web_command(self, port: int) -> list[str]:
        """The web process's command line: uvicorn as the README runs it in production
        (``config.serve``, uvicorn's command line with a quieter server loop;
        permessage-deflate, its ``websockets-sansio`` implementation; ``E2E_UVICORN_WS`` picks
        another, e.g. ``websockets`` to compare), or daphne as ``make demo`` does."""
        if self.asgi_server == "uvicorn":
            ws = os.environ.get("E2E_UVICORN_WS", "websockets-sansio")
            return [str(VENV_BIN / "python"), "-m", "config.serve", "--host", "127.0.0.1", "--port", str(port),
                    "--ws", ws, "--ws-max-size", "1048576", "--lifespan", "off", "--no-access-log",
                    "config.asgi:application"]
        return [str(VENV_BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"]

    def _wait_http(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last = None
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                for name, proc in self.procs.items():
                    if proc.poll() is not None:
                        raise PlatformError(f"{name} exited with {proc.returncode} during start-up")
                try:
                    r = client.get(f"{self.base_url}/accounts/login/")
                    if r.status_code == 200:
                        return
                    last = f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    last = repr(exc)
                time.sleep(0.1)
        raise PlatformError(f"HTTP did not answer within {self.startup_timeout:.0f} s (last: {last})")

    def _wait_worker(self, name: str | None = None, proc: subprocess.Popen | None = None) -> None:
        """Ping the Celery worker (default: the first) over the broker until it answers (bounded)."""
        from celery import Celery

        name, proc = name or self.worker_name, proc or self.procs["celery"]
        app = Celery("e2e-probe", broker=self.redis_url, set_as_current=False)  # not the tests' app
        deadline = time.monotonic() + self.startup_timeout
        try:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise PlatformError(f"celery worker {name} exited with {proc.returncode} during start-up")
                replies = app.control.ping(destination=[name], timeout=1.0)
                if replies:
                    return
            raise PlatformError(f"Celery worker did not answer a ping within {self.startup_timeout:.0f} s")
        finally:
            app.close()

    def worker_tasks_run(self) -> dict[str, int]:
        """``{task name: count}`` the Celery worker has run (services mode), via the broker."""
        from celery import Celery

        app = Celery("e2e-probe", broker=self.redis_url, set_as_current=False)  # not the tests' app
        try:
            # A connection of its own: kombu's process-wide pool may hold one from before a
            # broker restart (tests restart a private Redis).
            with app.connection_for_read() as conn:
                stats = app.control.inspect(destination=[self.worker_name], timeout=3.0,
                                            connection=conn).stats() or {}
        finally:
            app.close()
        return dict((stats.get(self.worker_name) or {}).get("total") or {})
