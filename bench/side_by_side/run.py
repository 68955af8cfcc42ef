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

from tests.e2e.harness import PYTHON, VENV_BIN, Platform, free_port  # noqa: E402

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
    """The e2e platform with a worker sized for 50 chats (the README's production layout)."""

    def _start_worker(self) -> None:
        import uuid

        self.worker_name = f"bench-{uuid.uuid4().hex[:8]}@127.0.0.1"
        self._spawn("celery", [str(VENV_BIN / "celery"), "-A", "chatplatform", "worker", "--pool", "threads",
                               "--concurrency", os.environ.get("BENCH_WORKER_CONCURRENCY", "64"),
                               "--loglevel", "WARNING", "-n", self.worker_name,
                               "--without-gossip", "--without-mingle"])


def start_upstream(log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([str(PYTHON), str(HERE / "upstream.py"), "--port", str(port), "--log", str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200:
                return proc, f"{url}/v1"
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the fake upstream did not start")


def run_mode(mode: str, args, upstream_url: str, upstream_log: Path, out: Path) -> None:
    concurrency = os.environ.get("BENCH_WORKER_CONCURRENCY", "64")
    env = {
        "OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": upstream_url, "OPENAI_MODEL": "bench-n1000-r50",
        "MAX_ACTIVE_RUNS_PER_USER": "1000", "RUN_RATE_LIMIT": "100000/60", "WS_FRAME_RATE_LIMIT": "100000/60",
        "EMBEDDED_EXECUTOR_THREADS": "64", "WORKER_CONCURRENCY": concurrency, "LOG_LEVEL": "WARNING",
        # PostgreSQL may be shared (a dev box): cap each process's pool (web + worker).
        "DB_POOL_MAX_SIZE": os.environ.get("BENCH_DB_POOL_MAX_SIZE", "30"),
    }
    with BenchPlatform("embedded" if mode == "embedded" else "services", extra_env=env) as platform:
        pids = ",".join(str(p.pid) for p in platform.procs.values())
        # One user stands in for a team of C people: the demo's per-person token budget (and the
        # reserve each concurrent round holds against it) would refuse the later chats.
        platform.manage("shell", "-c", "from usage.models import Budget; "
                        "Budget.objects.filter(name__startswith='demo:').delete()")
        bench_args = argparse.Namespace(
            base=platform.base_url, origin="", username="alice", password=platform.password, workspace="",
            upstream_url=upstream_url, upstream_log=str(upstream_log), points=args.points, repeat=args.repeat,
            label=mode, version=_version(), out=str(out), server_pids=pids, service_pids="", settle=1.0,
            pause=1.0, timeout_extra=120.0, idle_probe=args.idle_probe, warmup=True, no_ws_compress=False,
        )
        asyncio.run(ours_bench.main_async(bench_args))


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


def report(out: Path) -> None:
    """One table per point: ours per mode, Open WebUI, ours/OWUI, and ours before issue 18."""
    baseline = json.loads(BASELINE.read_text())["products"]
    owui = baseline["open-webui"]
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
            cells += [_fmt(baseline.get(f"chatplatform-before-{m}", {}).get(point, {}).get(key)) for m in modes]
            print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="embedded,production")
    parser.add_argument("--points", default="1x1000x50,10x1000x50,50x1000x50")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--idle-probe", type=float, default=2.0)
    parser.add_argument("--out", default="", help="JSONL of every run and median (default: a temp file)")
    parser.add_argument("--report-only", default="", help="print the tables of an existing --out file")
    args = parser.parse_args()
    if args.report_only:
        report(Path(args.report_only))
        return
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
    report(out)
    print(f"\nraw results: {out}")


if __name__ == "__main__":
    main()
