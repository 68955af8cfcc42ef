"""The side-by-side streaming benchmark through ``lb`` across hosts: the multi-host test
cluster (``tests/multihost/cluster.py``: network namespaces — HAProxy on ``lb``, two web hosts,
two worker hosts, Redis, PostgreSQL — configured as the README's production section) driven by
``bench/side_by_side/ours_bench.py`` with the fake upstream (``upstream.py``) in the root
namespace, reached over the bridge. Prints, per point, the multi-host figures beside the
one-host ones (``--one-host``: a results file of ``run.py``, label ``production-2+2``).

All namespaces share this machine's cores: the point is that crossing hosts adds no failure
and no overhead, not a speed-up. State the load average (printed) with any figure.

Root only (namespaces). Usage::

    .venv/bin/python bench/multihost.py [--points 50x1000x50,200x1000x50] [--repeat 1]
        [--one-host bench/side_by_side/results-2026-12-06-evening.jsonl] [--out /tmp/multihost.jsonl]
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
REPO = HERE.parent
sys.path.insert(0, str(HERE / "side_by_side"))
sys.path.insert(0, str(REPO))

import ours_bench  # noqa: E402
from run import BENCH_MODELS, BENCH_USERS, METRICS, _fmt  # noqa: E402

from tests.e2e.harness import PYTHON, exit_on_sigterm, free_port  # noqa: E402
from tests.multihost.cluster import Cluster, cannot_make_namespaces  # noqa: E402

LABEL = "multihost-2+2"


def start_upstream(host: str, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([str(PYTHON), str(HERE / "side_by_side" / "upstream.py"), "--host", host, "--port",
                             str(port), "--log", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://{host}:{port}/health", timeout=1, trust_env=False).status_code == 200:
                return proc, f"http://{host}:{port}/v1"
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the fake upstream did not start")


def medians(path: Path, label: str) -> dict[str, dict]:
    out = {}
    if not path or not path.exists():
        return out
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "median" and rec.get("label") == label:
            out[f"{rec['c']}x{rec['n']}x{rec['r']:g}"] = rec["median"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", default="50x1000x50,200x1000x50")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--one-host", type=Path, default=HERE / "side_by_side" / "results-2026-12-06-evening.jsonl")
    ap.add_argument("--users", action="store_true", help="one user per chat (default: every chat alice's)")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "multihost-bench.jsonl")
    args = ap.parse_args()
    reason = cannot_make_namespaces()
    if reason:
        print(f"multihost bench: {reason}", file=sys.stderr)
        return 2
    exit_on_sigterm()
    concurrency = os.environ.get("BENCH_WORKER_CONCURRENCY", "128")
    cluster = Cluster(extra_env={
        "MAX_ACTIVE_RUNS_PER_USER": "1000", "LOGIN_RATE_LIMIT": "100000/min", "RUN_RATE_LIMIT": "100000/60",
        "WS_FRAME_RATE_LIMIT": "100000/60", "LOG_LEVEL": "WARNING",
    })
    upstream = None
    try:
        cluster.build_network()
        log = cluster.tmp / "upstream.jsonl"
        upstream, url = start_upstream(cluster.ip("root"), log)
        cluster.extra_env.update({"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": url,
                                  "OPENAI_MODEL": "bench-n1000-r50"})
        cluster.worker_concurrency = concurrency
        cluster.start()
        users = max(int(p.split("x")[0]) for p in args.points.split(","))
        models = ["bench-n20-r0"] + [f"bench-n{p.split('x')[1]}-r{float(p.split('x')[2]):g}"
                                     for p in args.points.split(",")]
        if args.users:  # one member per chat, as run.py does (PBKDF2: about 0.25 s of CPU each)
            cluster.manage("shell", "-c", BENCH_USERS.format(n=users, password=cluster.password))
        cluster.manage("shell", "-c", BENCH_MODELS.format(models=models))
        cluster.manage("shell", "-c", "from usage.models import Budget; "
                       "Budget.objects.filter(name__startswith='demo:').delete()")
        pids = ",".join(str(p.pid) for host in ("web1", "web2", "work1", "work2")
                        for p in cluster.procs[host].values())
        bench_args = argparse.Namespace(
            base=cluster.base_url, origin="", username="alice", password=cluster.password, workspace="",
            upstream_url=url, upstream_log=str(log), points=args.points, repeat=args.repeat, label=LABEL,
            version=subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                   text=True).stdout.strip(),
            out=str(args.out), server_pids=pids, service_pids="", settle=1.0, pause=1.0, timeout_extra=120.0,
            idle_probe=0.0, warmup=True, no_ws_compress=False, users_prefix="bench" if args.users else "")
        asyncio.run(ours_bench.main_async(bench_args))
    finally:
        if upstream is not None:
            upstream.kill()
        cluster.teardown()
    ours = medians(args.out, LABEL)
    one = medians(args.one_host, "production-2+2")
    print(f"\nload average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores shared by every host)")
    print(f"one host: {args.one_host} (production-2+2)")
    for point, rec in ours.items():
        print(f"\n### {point} (chats × tokens × tokens/s)\n")
        print("| metric | across hosts (2 web + 2 worker hosts, lb) | one host (2 + 2 processes) |")
        print("|---|---|---|")
        for label, key in METRICS:
            print(f"| {label} | {_fmt(rec.get(key))} | {_fmt(one.get(point, {}).get(key))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
