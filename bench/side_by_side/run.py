"""``make bench``: the side-by-side streaming benchmark against the stored Open WebUI baseline.

Starts the fake OpenAI upstream (``upstream.py``) and the platform (``tests/e2e/harness.py``:
embedded = one daphne on SQLite; production = daphne + a Celery worker on PostgreSQL + Redis),
drives the platform through its public contract with ``ours_bench.py`` (REST + one websocket
per chat), and prints, per point (chats × tokens × tokens/s), the same metrics as the stored
Open WebUI 0.12.4 run (``baseline-2026-12-01.json``) with the ratio ours / Open WebUI, and
our figures before issue 18. Nothing is asserted; state the load average with any figure you
quote (it is printed per point: the box is usually shared).

Usage::

    .venv/bin/python bench/side_by_side/run.py [--modes embedded,production]
        [--points 10x200x50,50x200x50] [--repeat 1] [--out results.jsonl]

Production needs PostgreSQL and Redis (``E2E_PG_DSN`` / ``E2E_REDIS_BASE`` / ``E2E_REDIS_DB``,
as for the e2e tests). The baseline's points are 1x1000x50, 10x1000x50, 50x1000x50,
50x1000x0 and 1x5000x0; other points print without ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

import ours_bench  # noqa: E402

from tests.e2e.harness import PYTHON, Platform, exit_on_sigterm, free_port  # noqa: E402

BASELINE = HERE / "baseline-2026-12-01.json"
METRICS = [  # (label, key in the median record, smaller is better)
    ("failed chats", "chats_failed"),
    ("token latency p50 ms", "latency_ms.p50"),
    ("token latency p99 ms", "latency_ms.p99"),
    ("TTFT overhead p50 ms", "ttft_overhead_ms.p50"),
    ("tokens/s", "tokens_per_s"),
    ("CPU s / 1k tokens", "cpu_s_per_1k_tokens"),
    ("payload B / 1k tokens", "payload_bytes_per_1k"),
    ("wire B / 1k tokens", "wire_bytes_per_1k"),
]


class BenchPlatform(Platform):
    """The e2e platform in a process layout: ``web`` ASGI processes (``asgi``: uvicorn or
    daphne) and, in production, ``workers`` Celery worker processes of ``concurrency`` turn
    threads each; more than one web process sits behind HAProxy (``balance leastconn``,
    websockets proxied as they are), as the README's production section lays it out."""

    def __init__(self, mode: str, *, web: int = 1, workers: int = 1, concurrency: int = 32, **kwargs) -> None:
        super().__init__(mode, **kwargs)
        self.web, self.workers, self.concurrency = web, workers, concurrency

    def _start_worker(self) -> None:
        import uuid

        tag = uuid.uuid4().hex[:8]
        self.worker_name = f"bench-{tag}-1@127.0.0.1"
        for i in range(1, self.workers + 1):
            self._spawn("celery" if i == 1 else f"celery{i}",
                        self.worker_command(f"bench-{tag}-{i}@127.0.0.1", self.concurrency))

    def _start_daphne(self) -> None:
        if self.web == 1:
            return super()._start_daphne()
        backends = []
        for i in range(1, self.web + 1):
            port = free_port()
            self._spawn(f"web{i}", self.web_command(port))
            backends.append(port)
        self.port = free_port()
        config = self.tmpdir / "haproxy.cfg"
        config.write_text(HAPROXY_CONFIG.format(port=self.port, servers="\n".join(
            f"    server web{i} 127.0.0.1:{p}" for i, p in enumerate(backends, 1))))
        self._spawn("haproxy", ["haproxy", "-db", "-f", str(config)])


# The load balancer in front of several web processes (README, Production). Websockets need
# nothing special in HTTP mode; `timeout tunnel` bounds an idle socket, leastconn spreads them.
HAPROXY_CONFIG = """
global
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
frontend chat
    bind 127.0.0.1:{port}
    default_backend web
backend web
    balance leastconn
    option redispatch
    retries 2
    retry-on conn-failure empty-response
    default-server check inter 2s fall 2 rise 2
{servers}
"""


def start_upstream(log: Path) -> tuple[subprocess.Popen, str]:
    """Start ``upstream.py`` on a free port, logging to ``log`` (its stderr beside it, ``.err``);
    returns the process and its ``/v1`` base URL once ``/health`` answers. Exits with the
    upstream's own error if it dies or does not answer within 30 s."""
    port = free_port()
    errors = log.with_suffix(".err")
    with errors.open("w") as err:
        proc = subprocess.Popen([str(PYTHON), str(HERE / "upstream.py"), "--port", str(port), "--log", str(log)],
                                stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200:
                return proc, f"{url}/v1"
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the fake upstream did not start:\n{errors.read_text()[-2000:]}")


# bench01…benchNN: members of alice's first workspace (the demo's member role).
BENCH_USERS = """
from django.contrib.auth import get_user_model
from chat.models import Membership
alice = get_user_model().objects.get(username="alice")
m = Membership.objects.filter(user=alice).select_related("workspace", "role").order_by("pk").first()
member_role = type(m.role).objects.filter(name="member").first() or m.role
for i in range(1, {n} + 1):
    u, _ = get_user_model().objects.get_or_create(username=f"bench{{i:02d}}")
    u.set_password("{password}")
    u.save()
    Membership.objects.get_or_create(user=u, workspace=m.workspace, defaults={{"role": member_role}})
"""


# Only models enabled in the admin may be used: one row per point's model name (the fake
# upstream reads the token count and rate from it) and the warm-up's.
BENCH_MODELS = """
from agents.models import LLMModel
template = LLMModel.objects.filter(provider__slug="openai").order_by("pk").first()
for name in {models!r}:
    LLMModel.objects.get_or_create(provider=template.provider, name=name, defaults={{"enabled": True}})
"""


# Where a run's time before its first token goes, from the run rows of the last point (one
# JSON line per run: its bench tag, created and claimed as Unix seconds); run_phases() joins
# them with the upstream's request times.
RUN_ROWS = """
import json, re
from agents.models import Run
for r in Run.objects.select_related("user_message").order_by("-created_at")[:{n}]:
    tag = re.findall(r"\\[bench:([^\\]]+)\\]", r.user_message.content if r.user_message else "")
    print(json.dumps({{"run": str(r.pk), "tag": tag[-1] if tag else None, "status": r.status, "created": r.created_at.timestamp(),
                      "claimed": r.started_at.timestamp() if r.started_at else None}}))
"""


def run_phases(rows_text: str, upstream_log: Path) -> str:
    """Per-run phases of the time before the first token, p50 / max in ms: the run row made
    (since the first row of the point), created -> claimed by a worker, claimed -> the model
    request reached the upstream. The upstream's monotonic clock is put on the Unix clock
    (one host: ``CLOCK_MONOTONIC`` is shared by every process)."""
    rows = [json.loads(line) for line in rows_text.splitlines() if line.startswith("{")]
    if not rows:
        return "run phases: no run rows"
    offset = time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)
    requests = {}
    for line in upstream_log.read_text().splitlines() if upstream_log.exists() else ():
        rec = json.loads(line)
        if rec.get("tag"):
            requests[rec["tag"]] = rec["t_req_ns"] / 1e9 + offset
    first = min(r["created"] for r in rows)
    made = [(r["created"] - first) * 1000 for r in rows]
    wait = [(r["claimed"] - r["created"]) * 1000 for r in rows if r["claimed"]]
    setup = [(requests[r["tag"]] - r["claimed"]) * 1000 for r in rows if r["claimed"] and r["tag"] in requests]
    if os.environ.get("BENCH_PHASES_OUT"):  # one line per run, ms since the first row: made, claimed, request
        with open(os.environ["BENCH_PHASES_OUT"], "a") as f:
            for r in sorted(rows, key=lambda r: r["created"]):
                req = requests.get(r["tag"])
                f.write(json.dumps({"tag": r["tag"], "made": round((r["created"] - first) * 1000),
                                    "claimed": r["claimed"] and round((r["claimed"] - first) * 1000),
                                    "request": req and round((req - first) * 1000)}) + "\n")

    def cell(xs):
        xs = sorted(xs)
        return f"p50 {xs[len(xs) // 2]:.0f} max {xs[-1]:.0f}" if xs else "–"
    return (f"run phases, ms ({len(rows)} runs, statuses {sorted({r['status'] for r in rows})}): "
            f"row made since the first {cell(made)}; created -> claimed {cell(wait)}; "
            f"claimed -> upstream request {cell(setup)}")


def run_mode(mode: str, args, upstream_url: str, upstream_log: Path, out: Path) -> None:
    concurrency = os.environ.get("BENCH_WORKER_CONCURRENCY", "32")
    env = {
        "OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": upstream_url, "OPENAI_MODEL": "bench-n1000-r50",
        "MAX_ACTIVE_RUNS_PER_USER": "1000", "LOGIN_RATE_LIMIT": "100000/min", "RUN_RATE_LIMIT": "100000/60", "WS_FRAME_RATE_LIMIT": "100000/60",
        "EMBEDDED_EXECUTOR_THREADS": "64", "WORKER_CONCURRENCY": concurrency, "LOG_LEVEL": "WARNING",
        # PostgreSQL may be shared (a dev box): cap each process's pool (web + worker).
    }
    web, workers = (1, 0) if mode == "embedded" else args.layout
    # PostgreSQL's 100 connections are shared by every process (each pool + 2 for leases).
    env["DB_POOL_MAX_SIZE"] = os.environ.get("BENCH_DB_POOL_MAX_SIZE", str(min(30, 90 // (web + workers) - 2)))
    with BenchPlatform("embedded" if mode == "embedded" else "services", extra_env=env, asgi_server=args.asgi,
                       web=web, workers=workers, concurrency=int(concurrency)) as platform:
        pids = ",".join(str(p.pid) for p in platform.procs.values())
        # A team of C people: one member per chat (as Open WebUI's baseline had one user per
        # chat), each with the demo's per-person budget — which one user cannot hold for
        # 50 chats, so the demo's budgets are removed when --one-user is asked for.
        users = max(int(p.split("x")[0]) for p in args.points.split(","))
        platform.manage("shell", "-c", BENCH_USERS.format(n=users, password=platform.password))
        models = ["bench-n20-r0"] + [f"bench-n{p.split('x')[1]}-r{float(p.split('x')[2]):g}" for p in args.points.split(",")]
        platform.manage("shell", "-c", BENCH_MODELS.format(models=models))
        if args.one_user or os.environ.get("BENCH_NO_BUDGETS"):
            platform.manage("shell", "-c", "from usage.models import Budget; "
                            "Budget.objects.filter(name__startswith='demo:').delete()")
        bench_args = argparse.Namespace(
            base=platform.base_url, origin="", username="alice", password=platform.password, workspace="",
            upstream_url=upstream_url, upstream_log=str(upstream_log), points=args.points, repeat=args.repeat,
            label=mode if mode == "embedded" else f"production-{web}+{workers}", version=_version(), out=str(out), server_pids=pids, service_pids="", settle=1.0,
            pause=1.0, timeout_extra=120.0, idle_probe=args.idle_probe, warmup=True, no_ws_compress=False,
            users_prefix="" if args.one_user else "bench",
        )
        asyncio.run(ours_bench.main_async(bench_args))
        last = int(args.points.split(",")[-1].split("x")[0])
        rows = platform.manage("shell", "-c", RUN_ROWS.format(n=last)).stdout
        print(run_phases(rows, upstream_log), flush=True)


def _version() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return f"{int(v):,}" if isinstance(v, (int, float)) else str(v)


def owui_medians(path: Path) -> dict[str, dict]:
    """Open WebUI's median records in an ``owui_bench.py --out`` file (``owui_matrix.sh``
    writes ``$WORK/results.jsonl``), by point ("50x1000x50"); a later record of a point
    replaces an earlier one."""
    medians = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{path}:{number}: not a JSONL results file ({exc})") from None
        if isinstance(rec, dict) and rec.get("kind") == "median" and rec.get("product") == "open-webui":
            medians[f"{rec['c']}x{rec['n']}x{rec['r']:g}"] = rec["median"]
    if not medians:
        raise SystemExit(f"{path}: no Open WebUI median records (owui_bench.py --out)")
    return medians


def report(out: Path, owui_results: tuple[Path, dict[str, dict]] | None = None) -> None:
    """One table per point: ours per mode, Open WebUI, ours/OWUI, and ours before issue 18.
    Open WebUI's figures are the stored baseline's, or ``owui_results`` (its file and
    :func:`owui_medians`: an Open WebUI run on the same box — boxes of one kind differ by 2× in
    CPU per token between days)."""
    baseline = json.loads(BASELINE.read_text())["products"]
    owui = owui_results[1] if owui_results else baseline["open-webui"]
    source = owui_results[0] if owui_results else f"the stored baseline ({BASELINE.name}, another box)"
    print(f"\nOpen WebUI: {source}")
    ours: dict[str, dict[str, dict]] = {}
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "median":
            ours.setdefault(f"{rec['c']}x{rec['n']}x{rec['r']:g}", {})[rec["label"]] = rec["median"]
    print(f"\nload average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores shared: read figures with it)")
    for point, by_mode in ours.items():
        modes = sorted(by_mode)
        head = ["metric"] + [f"ours {m}" for m in modes] + ["Open WebUI"] + [f"{m}/OWUI" for m in modes] + \
            [f"before {m}" for m in modes]
        print(f"\n### {point} (chats × tokens × tokens/s)\n")
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        base = owui.get(point, {})
        for label, key in METRICS:
            cells = [label] + [_fmt(by_mode[m].get(key)) for m in modes] + [_fmt(base.get(key))]
            for m in modes:
                mine, theirs = by_mode[m].get(key), base.get(key)
                cells.append(f"{mine / theirs:.2f}" if mine is not None and theirs else "–")
            cells += [_fmt(baseline.get(f"chatplatform-before-{m.split('-')[0]}", {}).get(point, {}).get(key))
                      for m in modes]
            print("| " + " | ".join(cells) + " |")


def _layout(text: str) -> tuple[int, int]:
    web, _, workers = text.partition("+")
    return int(web), int(workers or 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="embedded,production")
    parser.add_argument("--points", default="1x1000x50,10x1000x50,50x1000x50")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--asgi", default="uvicorn", choices=("uvicorn", "daphne"),
                        help="the web server (README, Production: uvicorn, for permessage-deflate)")
    parser.add_argument("--layout", default="1+2", type=_layout,
                        help="production processes W+K: W web processes (behind HAProxy when W > 1) and K "
                             "Celery worker processes of BENCH_WORKER_CONCURRENCY (32) threads each")
    parser.add_argument("--one-user", action="store_true",
                        help="all chats as alice (per-user locks and budgets then serialise a team's load)")
    parser.add_argument("--idle-probe", type=float, default=2.0)
    parser.add_argument("--out", default="", help="JSONL of every run and median (default: a temp file)")
    parser.add_argument("--report-only", default="", help="print the tables of an existing --out file")
    parser.add_argument("--owui", default="", metavar="FILE",
                        help="compare with this Open WebUI run (owui_bench.py --out, e.g. owui_matrix.sh's "
                             "results.jsonl) instead of the stored baseline")
    args = parser.parse_args()
    # read first: a wrong file fails now, not after the runs
    owui = (Path(args.owui), owui_medians(Path(args.owui))) if args.owui else None
    if args.report_only:
        report(Path(args.report_only), owui)
        return
    exit_on_sigterm()  # a terminated bench stops its upstream and servers (else they take later runs' turns)
    tmp = Path(tempfile.mkdtemp(prefix="chatplatform-bench-"))
    out = Path(args.out) if args.out else tmp / "results.jsonl"
    upstream_log = tmp / "upstream.jsonl"
    upstream, url = start_upstream(upstream_log)
    try:
        for mode in args.modes.split(","):
            run_mode(mode.strip(), args, url, upstream_log, out)
    finally:
        upstream.terminate()
        upstream.wait(10)
    report(out, owui)
    print(f"\nraw results: {out}")


if __name__ == "__main__":
    main()
