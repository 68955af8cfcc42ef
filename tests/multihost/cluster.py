"""The platform across hosts: Linux network namespaces, one per host, made by the test itself.

Topology (``198.18.<k>.0/24``, RFC 2544's benchmarking range, never routed; ``k`` differs per
run so two runs on one machine never share a subnet)::

                         bridge "br" in a namespace of its own (<prefix>br)
        ┌────────┬────────┬────────┬────────┬────────┬────────┬────────┬────────┐
       lb .2   web1 .11 web2 .12 work1 .21 work2 .22 redis1 .31 redis2 .32  pg .41   root .254
     HAProxy   uvicorn  uvicorn  celery   celery   redis(+S)  redis(+S)  postgres  the test process
     (+Sentinel)

Every host is a namespace ``<prefix><host>`` with one veth (``eth0``) whose peer ``v-<host>``
sits on the bridge. The test process stays in the root namespace and is one more host on the
bridge through the veth ``<prefix>r`` (``.254``): it reaches ``lb`` (the clients, as a browser
would), PostgreSQL and Redis (to read state), and it serves the fake model and the side-effect
counter the workers call. Nothing else in the root namespace changes: no address outside the
run's /24, no route but that /24's, and no real interface is touched.

Faults: :meth:`Cluster.link` (a host's link down/up: host loss, full partition),
:meth:`Cluster.partition` (iptables DROP rules inside one host's namespace towards given hosts,
both directions), :meth:`Cluster.kill_host` (SIGKILL every process of a host).

Processes are started as the README's production section runs them (``config.serve`` for web,
a Celery thread-pool worker), configured only through the documented environment variables;
``teardown()`` kills every process, deletes the namespaces and the temporary directory, also
after a failure (``atexit`` too).
"""

from __future__ import annotations

import atexit
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from tests.e2e.harness import REPO, VENV_BIN, free_port
from tests.e2e.private_services import _pg_bin

DEMO_PASSWORD = "mh-demo-Pa55"
HOST_OCTETS = {"lb": 2, "web1": 11, "web2": 12, "work1": 21, "work2": 22, "redis1": 31, "redis2": 32, "pg": 41}
ROOT_OCTET = 254
WEB_PORT = 8000
LB_PORT = 80
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
FAKETIME_SHIM = Path(__file__).parent / "faketime_shim"


class ClusterError(RuntimeError):
    pass


def cannot_make_namespaces() -> str | None:
    """Why this machine cannot run the harness (None when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, e.g. in CI)"
    for tool in ("ip", "iptables", "haproxy", "redis-server", "faketime"):
        if not shutil.which(tool):
            return f"{tool} not installed (Debian: iproute2 iptables haproxy redis-server faketime)"
    if _pg_bin() is None:
        return "PostgreSQL server binaries (initdb, pg_ctl) not installed"
    probe = f"cpmhprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def sh(*cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(cmd)} exited {result.returncode}: {result.stderr.strip()}")
    return result


def _free_subnet() -> int:
    """A third octet ``k`` whose ``198.18.k.0/24`` has no route in the root namespace yet."""
    taken = sh("ip", "-4", "route", "show").stdout
    choices = list(range(1, 255))
    random.shuffle(choices)
    for k in choices:
        if f"198.18.{k}." not in taken:
            return k
    raise ClusterError("no free 198.18.k.0/24")


class Cluster:
    """The hosts, their links and their processes. ``password`` and ``base_url``/``ws_url``/
    ``sql`` make it usable where ``tests.e2e.flows`` expects a ``Platform``."""

    mode = "services"

    def __init__(self, *, extra_env: dict[str, str] | None = None) -> None:
        self.prefix = f"cpmh{os.getpid() % 100000}"
        self.k = _free_subnet()
        self.password = DEMO_PASSWORD
        self.extra_env = dict(extra_env or {})
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        os.chmod(self.tmp, 0o755)
        self.procs: dict[str, dict[str, subprocess.Popen]] = {h: {} for h in HOST_OCTETS}
        self.logs: dict[str, Path] = {}
        self._log_files: list = []
        self.namespaces: list[str] = []
        self.pg_data = self.tmp / "pg" / "data"
        self.db_name = "chatplatform"
        self.worker_concurrency = 16
        # Redis: a primary on redis1, a replica on redis2, and a Sentinel on redis1, redis2 and lb
        # (README "Redis with Sentinel"); the platform finds the master through the Sentinels.
        self.redis_hosts = ["redis1", "redis2"]
        self.sentinels = ["redis1", "redis2", "lb"]
        self._torn_down = False
        atexit.register(self.teardown)

    # --- addresses (the flows' Platform interface) ------------------------------------------
    def ip(self, host: str) -> str:
        return f"198.18.{self.k}.{ROOT_OCTET if host == 'root' else HOST_OCTETS[host]}"

    def ns(self, host: str) -> str:
        return f"{self.prefix}{host}"

    @property
    def bridge_ns(self) -> str:
        return f"{self.prefix}br"

    @property
    def base_url(self) -> str:
        return f"http://{self.ip('lb')}:{LB_PORT}"

    @property
    def ws_base(self) -> str:
        return f"ws://{self.ip('lb')}:{LB_PORT}"

    def ws_url(self, thread_id) -> str:
        return f"{self.ws_base}/ws/threads/{thread_id}/"

    def web_url(self, host: str) -> str:
        return f"http://{self.ip(host)}:{WEB_PORT}"

    @property
    def database_url(self) -> str:
        return f"postgres://postgres@{self.ip('pg')}:5432/{self.db_name}"

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@{self.ip('pg')}:5432/postgres"

    def sql(self, query: str, *params) -> list[tuple]:
        import psycopg

        with psycopg.connect(f"postgresql://postgres@{self.ip('pg')}:5432/{self.db_name}", autocommit=True,
                             connect_timeout=5) as conn:
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    # --- network ------------------------------------------------------------------------
    def build_network(self) -> None:
        br = self.bridge_ns
        sh("ip", "netns", "add", br)
        self.namespaces.append(br)
        sh("ip", "-n", br, "link", "set", "lo", "up")
        sh("ip", "-n", br, "link", "add", "name", "br0", "type", "bridge")
        sh("ip", "-n", br, "link", "set", "br0", "up")
        for host in HOST_OCTETS:
            ns = self.ns(host)
            sh("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            sh("ip", "link", "add", "name", "eth0", "netns", ns, "type", "veth", "peer", "name", f"v-{host}", "netns", br)
            sh("ip", "-n", br, "link", "set", f"v-{host}", "master", "br0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.ip(host)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
        root = f"{self.prefix}r"
        self.root_link = root
        sh("ip", "link", "add", "name", root, "type", "veth", "peer", "name", "v-root", "netns", br)
        sh("ip", "-n", br, "link", "set", "v-root", "master", "br0", "up")
        sh("ip", "addr", "add", f"{self.ip('root')}/24", "dev", root)
        sh("ip", "link", "set", root, "up")

    def link(self, host: str, up: bool) -> None:
        """``host``'s only link up or down (on the bridge side): the host is cut off whole."""
        sh("ip", "-n", self.bridge_ns, "link", "set", f"v-{host}", "up" if up else "down")

    def partition(self, host: str, peers: list[str]) -> None:
        """Drop every packet between ``host`` and ``peers`` (iptables inside ``host``'s namespace,
        both directions); other traffic of ``host`` flows on. :meth:`heal` removes it."""
        for peer in peers:
            for chain, flag in (("OUTPUT", "-d"), ("INPUT", "-s")):
                sh("ip", "netns", "exec", self.ns(host), "iptables", "-A", chain, flag, self.ip(peer), "-j", "DROP")

    def heal(self, host: str) -> None:
        for chain in ("OUTPUT", "INPUT"):
            sh("ip", "netns", "exec", self.ns(host), "iptables", "-F", chain)

    # --- processes ----------------------------------------------------------------------
    def spawn(self, host: str, name: str, cmd: list[str], env: dict[str, str] | None = None,
              *, faketime: str | None = None) -> subprocess.Popen:
        """Start ``cmd`` inside ``host``'s namespace in a session of its own; its output goes to
        ``<tmp>/<host>-<name>.log``. ``faketime`` (e.g. ``"+3s"``): the process's wall clock
        runs that far off (libfaketime)."""
        env = dict(env if env is not None else os.environ)
        if faketime:
            # The wall clock only (FAKETIME_DONT_FAKE_MONOTONIC): a faked monotonic clock makes
            # timed waits hang; the shim works around libfaketime's EINVAL for time.sleep then.
            env.update({"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": faketime, "FAKETIME_NO_CACHE": "1",
                        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                        "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKETIME_SHIM), env.get("PYTHONPATH")]))})
        log = self.tmp / f"{host}-{name}.log"
        fh = log.open("a")
        self._log_files.append(fh)
        self.logs[f"{host}/{name}"] = log
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *cmd], cwd=REPO, env=env, stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[host][name] = proc
        return proc

    def kill(self, host: str, name: str, sig: int = signal.SIGKILL, wait: float = 60) -> None:
        proc = self.procs[host].pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def kill_host(self, host: str) -> None:
        """SIGKILL every process of ``host`` (its PostgreSQL too)."""
        if host == "pg":
            self.pg_ctl("stop", "-m", "immediate", check=False)
        for name in list(self.procs[host]):
            self.kill(host, name)

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for name, path in self.logs.items():
            try:
                text = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            out.append(f"----- {name} last {lines} lines -----")
            out.extend(text[-lines:])
        return "\n".join(out)

    # --- services -----------------------------------------------------------------------
    def start_pg(self) -> None:
        self.pg_bin = _pg_bin()
        pw = pwd.getpwnam("postgres")
        (self.tmp / "pg").mkdir()
        os.chown(self.tmp / "pg", pw.pw_uid, pw.pw_gid)
        self._as_postgres(str(self.pg_bin / "initdb"), "-D", str(self.pg_data), "-U", "postgres", "-A", "trust",
                          "-E", "UTF8", "--no-sync")
        with open(self.pg_data / "pg_hba.conf", "a") as fh:
            fh.write(f"host all all 198.18.{self.k}.0/24 trust\n")
        self.pg_ctl("start")
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{self.db_name}"')

    def _as_postgres(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", self.ns("pg"), "runuser", "-u", "postgres", "--", *cmd, check=check,
                  timeout=120)

    def pg_ctl(self, action: str, *args: str, check: bool = True) -> None:
        opts = (f"-p 5432 -c listen_addresses={self.ip('pg')} -c unix_socket_directories={self.tmp / 'pg'} "
                "-c fsync=off -c max_connections=300")
        wait = ["-w", "-t", "60"]
        cmd = [str(self.pg_bin / "pg_ctl"), "-D", str(self.pg_data), "-l", str(self.tmp / "pg" / "pg.log")]
        if action in ("start", "restart"):
            cmd += ["-o", opts]
        self._as_postgres(*cmd, *wait, *args, action, check=check)
        self.logs["pg/postgres"] = self.tmp / "pg" / "pg.log"

    def start_redis(self, host: str, *, replica_of: str | None = None) -> None:
        folder = self.tmp / host
        folder.mkdir(exist_ok=True)
        args = ["redis-server", "--bind", self.ip(host), "--port", "6379", "--protected-mode", "no",
                "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(folder)]
        if replica_of:
            args += ["--replicaof", self.ip(replica_of), "6379"]
        self.spawn(host, "redis", args)
        self.wait_tcp(host, 6379)

    MASTER = "cpmaster"
    SENTINEL_PORT = 26379

    def start_sentinel(self, host: str) -> None:
        """A Sentinel on ``host`` watching the master (quorum 2 of 3; down after 1 s, as the
        e2e Sentinel test runs them — production keeps README's 5 s)."""
        folder = self.tmp / f"sentinel-{host}"
        folder.mkdir(exist_ok=True)
        conf = folder / "sentinel.conf"  # Sentinel rewrites its own file
        conf.write_text("\n".join([
            f"port {self.SENTINEL_PORT}", f"bind {self.ip(host)}", f"dir {folder}", "protected-mode no",
            f"sentinel monitor {self.MASTER} {self.ip('redis1')} 6379 2",
            f"sentinel down-after-milliseconds {self.MASTER} 1000",
            f"sentinel failover-timeout {self.MASTER} 3000",
            f"sentinel parallel-syncs {self.MASTER} 1", ""]))
        self.spawn(host, "sentinel", ["redis-server", str(conf), "--sentinel"])
        self.wait_tcp(host, self.SENTINEL_PORT)

    def master_host(self) -> str | None:
        """The host the Sentinels name as master now (None: none answers)."""
        import redis

        for host in self.sentinels:
            try:
                client = redis.Redis(host=self.ip(host), port=self.SENTINEL_PORT, socket_timeout=1,
                                     socket_connect_timeout=1)
                addr = client.execute_command("SENTINEL", "get-master-addr-by-name", self.MASTER)
                client.close()
            except Exception:  # noqa: BLE001 - try the next Sentinel
                continue
            if addr:
                ip = addr[0].decode() if isinstance(addr[0], bytes) else addr[0]
                return next(h for h in HOST_OCTETS if self.ip(h) == ip)
        return None

    def wait_tcp(self, host: str, port: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((self.ip(host), port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise ClusterError(f"{host}:{port} did not answer within {timeout} s\n{self.log_tail()}") from None
                time.sleep(0.05)

    # --- the platform -------------------------------------------------------------------
    def redis_url(self) -> str:
        """The current master's URL (for the test's own probes; the platform asks Sentinel)."""
        return f"redis://{self.ip(self.master_host() or self.redis_hosts[0])}:6379/0"

    def env(self, role: str) -> dict[str, str]:
        """The environment of a web (``role="web"``) or worker (``"worker"``) process: the
        README's production settings, nothing else."""
        env = {k: v for k, v in os.environ.items()
               if k in ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "VIRTUAL_ENV", "PYTHONPATH")}
        env.update({
            "DJANGO_SETTINGS_MODULE": "config.settings.production",
            "SECRET_KEY": "multihost-test-secret",
            "ALLOWED_HOSTS": self.ip("lb"),
            "CSRF_TRUSTED_ORIGINS": f"http://{self.ip('lb')}",
            "SECURE_SSL_REDIRECT": "false",
            "NUM_PROXIES": "1",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": "",
            "REDIS_SENTINELS": ",".join(f"{self.ip(h)}:{self.SENTINEL_PORT}" for h in self.sentinels),
            "REDIS_SENTINEL_MASTER": self.MASTER,
            "REDIS_DB": "0",
            "DEMO_PASSWORD": self.password,
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": os.environ.get("E2E_LOG_LEVEL", "WARNING"),
            "KNOWLEDGE_EMBEDDINGS": "off",
            "CHAT_TITLE_GENERATION": "false",
            "LOGIN_RATE_LIMIT": "1000/min",
            "LOGIN_USERNAME_RATE_LIMIT": "1000/min",
        })
        if role == "web":
            env["DB_POOL_MAX_SIZE"] = "12"  # README step 6: web processes run no turns
        else:
            env["WORKER_CONCURRENCY"] = str(self.worker_concurrency)
        env.update(self.extra_env)
        return env

    def manage(self, *args: str, timeout: float = 300) -> None:
        result = subprocess.run([str(VENV_BIN / "python"), "manage.py", *args], cwd=REPO, env=self.env("worker"),
                                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise ClusterError(f"manage.py {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}")

    def start_web(self, host: str, *, faketime: str | None = None) -> None:
        self.spawn(host, "web", [str(VENV_BIN / "python"), "-m", "config.serve", "--host", self.ip(host),
                                 "--port", str(WEB_PORT), "--ws", "websockets-sansio", "--ws-max-size", "1048576",
                                 "--lifespan", "off", "--no-access-log", "--timeout-graceful-shutdown", "20",
                                 "config.asgi:application"], self.env("web"), faketime=faketime)

    def start_worker(self, host: str, *, faketime: str | None = None) -> None:
        self.worker_names = getattr(self, "worker_names", {})
        self.worker_names[host] = f"{host}-{uuid.uuid4().hex[:6]}@{host}"
        env = self.env("worker")
        self.spawn(host, "celery", [str(VENV_BIN / "celery"), "-A", "config", "worker", "--pool", "threads",
                                    "--concurrency", env["WORKER_CONCURRENCY"], "--loglevel", "WARNING",
                                    "-n", self.worker_names[host],
                                    "--without-gossip", "--without-mingle", "--without-heartbeat"],
                   env, faketime=faketime)

    def start_lb(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "CHAT_BIND": f"{self.ip('lb')}:{LB_PORT}", "CHAT_HOST": self.ip("lb"),
               "WEB1": f"{self.ip('web1')}:{WEB_PORT}", "WEB2": f"{self.ip('web2')}:{WEB_PORT}",
               "HAPROXY_STATS": str(self.tmp / "haproxy.sock")}
        self.spawn("lb", "haproxy", ["haproxy", "-db", "-f", str(REPO / "deploy" / "haproxy.cfg")], env)
        self.wait_tcp("lb", LB_PORT)

    def haproxy(self, command: str) -> str:
        """``command`` on HAProxy's stats socket (admin level); its answer."""
        deadline = time.monotonic() + 10
        while not (self.tmp / "haproxy.sock").exists():  # HAProxy still starting
            if time.monotonic() > deadline:
                raise ClusterError(f"no HAProxy stats socket\n{self.log_tail()}")
            time.sleep(0.05)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.tmp / "haproxy.sock"))
            s.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def backend_status(self) -> dict[str, str]:
        """``{"web1": "UP"|"DOWN"|…}`` as HAProxy's health checks see the web processes."""
        out = {}
        for line in self.haproxy("show stat").splitlines():
            fields = line.split(",")
            if len(fields) > 17 and fields[0] == "web" and fields[1] in ("web1", "web2"):
                out[fields[1]] = fields[17]
        return out

    def wait_backend(self, host: str, state: str, timeout: float = 60) -> float:
        """Poll HAProxy until ``host``'s check state starts with ``state``; returns seconds taken."""
        start = time.monotonic()
        while not self.backend_status().get(host, "").startswith(state):
            if time.monotonic() - start > timeout:
                raise ClusterError(f"{host} not {state} in HAProxy within {timeout} s: {self.backend_status()}\n"
                                   f"{self.log_tail()}")
            time.sleep(0.1)
        return time.monotonic() - start

    def wait_worker(self, host: str, timeout: float = 60) -> None:
        from celery import Celery

        app = Celery("mh-probe", broker=self.redis_url(), set_as_current=False)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                proc = self.procs[host].get("celery")
                if proc is None or proc.poll() is not None:
                    raise ClusterError(f"worker on {host} exited\n{self.log_tail()}")
                if app.control.ping(destination=[self.worker_names[host]], timeout=1.0):
                    return
            raise ClusterError(f"worker on {host} did not answer a ping within {timeout} s\n{self.log_tail()}")
        finally:
            app.close()

    def start(self) -> Cluster:
        if not self.namespaces:
            self.build_network()
        self.start_pg()
        self.start_redis("redis1")
        self.start_redis("redis2", replica_of="redis1")
        for host in self.sentinels:
            self.start_sentinel(host)
        self.manage("migrate", "--noinput")
        self.manage("seed_demo")
        for host in ("work1", "work2"):
            self.start_worker(host)
        for host in ("web1", "web2"):
            self.start_web(host)
        self.start_lb()
        for host in ("web1", "web2"):
            self.wait_backend(host, "UP")
        for host in ("work1", "work2"):
            self.wait_worker(host)
        return self

    def web_ready(self, host: str) -> bool:
        """Whether ``host``'s web process answers its sign-in page (what HAProxy's check asks)."""
        try:
            return httpx.get(f"{self.web_url(host)}/accounts/login/", headers={"Host": self.ip("lb")}, timeout=2,
                             trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def http_ok(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/accounts/login/", timeout=2, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    # --- teardown -----------------------------------------------------------------------
    def teardown(self) -> None:
        """Kill every process, delete every namespace and the root-side veth, remove the
        temporary directory. Idempotent; never raises."""
        if self._torn_down:
            return
        self._torn_down = True
        for procs in self.procs.values():
            for proc in procs.values():
                if proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        if getattr(self, "pg_bin", None) is not None and self.pg_data.exists():
            self._as_postgres(str(self.pg_bin / "pg_ctl"), "-D", str(self.pg_data), "-m", "immediate", "stop",
                              check=False)
        for procs in self.procs.values():
            for proc in procs.values():
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        # A process still in a namespace (one that escaped its session) dies with it.
        for ns in self.namespaces:
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for ns in self.namespaces:
            sh("ip", "netns", "del", ns, check=False)
        if getattr(self, "root_link", None):
            sh("ip", "link", "del", self.root_link, check=False)
        for fh in self._log_files:
            fh.close()
        if os.environ.get("E2E_KEEP_TMP") != "1":
            shutil.rmtree(self.tmp, ignore_errors=True)


__all__ = ["Cluster", "ClusterError", "cannot_make_namespaces", "free_port"]
