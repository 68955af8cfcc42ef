"""Streaming benchmark: the whole path over real HTTP and websockets (DESIGN §8 yardstick).

Starts the platform as subprocesses (tests/e2e/harness.py) in embedded mode and, with
``--services``, in production mode (PostgreSQL + Redis + a Celery worker), points its
``openai`` provider at a fake upstream on 127.0.0.1 that streams N tokens per chat at a
fixed rate, and runs K simultaneous chats over websockets. Each token carries the time the
upstream sent it, so the client measures the latency the platform adds per token.

Prints, per concurrency level:

* ``ttft_ms`` — send → first ``text.delta`` at the client (p50/p99), i.e. the platform's
  time-to-first-token overhead (the fake answers at once);
* ``token_ms`` — per-token added latency, upstream send → client receive (p50/p99);
* ``cpu_s_per_1k_tokens`` — CPU seconds of the platform processes per 1000 tokens;
* ``event_kb_per_1k_tokens`` — websocket JSON received per 1000 tokens;
* ``events_per_chat`` — messages per chat (coalescing at work);
* ``failed`` — chats that did not complete with the full text.

Usage: ``.venv/bin/python bench/stream_latency.py [--chats 1,10,50] [--tokens 200]
[--rate 50] [--services] [--observability default|off|tracing]``. Numbers go to stdout;
nothing is asserted. ``--observability off`` drops the request-metrics middleware;
``tracing`` also exports traces (OTLP/HTTP) to a collector on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import websockets

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.harness import Platform  # noqa: E402


# --- fake upstream: OpenAI Chat Completions SSE with timestamped tokens --------------------
class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    tokens = 200
    interval_s = 0.02

    def log_message(self, *args):  # silence
        pass

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(delta=None, finish=None):
            body = {"id": "b", "object": "chat.completion.chunk", "created": 0, "model": "bench",
                    "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
            self.wfile.write(f"data: {json.dumps(body)}\n\n".encode())
            self.wfile.flush()

        try:
            chunk({"role": "assistant", "content": ""})
            next_at = time.monotonic()
            for _ in range(self.tokens):
                chunk({"content": f"<{time.time_ns()}> "})
                next_at += self.interval_s
                pause = next_at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            chunk(finish="stop")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


def start_upstream(tokens: int, rate: float) -> tuple[ThreadingHTTPServer, str]:
    handler = type("Upstream", (_Upstream,), {"tokens": tokens, "interval_s": 1.0 / rate})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


# --- measuring ---------------------------------------------------------------------------
def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes and their threads (Linux /proc), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError):
            pass
    return total / tick


async def one_chat(platform: Platform, token: str, tokens: int) -> dict:
    headers = {"Authorization": f"Token {token}"}
    async with httpx.AsyncClient(base_url=platform.base_url, headers=headers, timeout=30, trust_env=False) as http:
        created = await http.post("/api/v1/threads/", json={"workspace": "demo", "provider": "openai"})
        created.raise_for_status()
        thread_id = created.json()["id"]
    out = {"ok": False, "ttft": None, "lat": [], "bytes": 0, "events": 0, "tokens": 0}
    async with websockets.connect(platform.ws_url(thread_id), additional_headers=headers, max_size=2**22) as ws:
        sent = time.monotonic()
        await ws.send(json.dumps({"type": "message.send", "content": "stream please"}))
        text = []
        while True:
            raw = await asyncio.wait_for(ws.recv(), 60)
            now_ns = time.time_ns()
            out["bytes"] += len(raw)
            out["events"] += 1
            event = json.loads(raw)
            if event["type"] == "text.delta":
                if out["ttft"] is None:
                    out["ttft"] = (time.monotonic() - sent) * 1000
                text.append(event["delta"])
                for stamp in event["delta"].split("<")[1:]:
                    out["lat"].append((now_ns - int(stamp.split(">")[0])) / 1e6)
            elif event["type"] in ("run.completed", "run.failed", "run.cancelled", "error"):
                out["end"] = event["type"] if event["type"] == "run.completed" else \
                    f'{event["type"]}: {(event.get("error") or {}).get("code") or event.get("code")}'
                out["tokens"] = "".join(text).count("<")
                out["ok"] = event["type"] == "run.completed" and out["tokens"] == tokens
                return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


async def level(platform: Platform, token: str, chats: int, tokens: int, pids: list[int]) -> dict:
    cpu0 = cpu_seconds(pids)
    results = await asyncio.gather(*(one_chat(platform, token, tokens) for _ in range(chats)), return_exceptions=True)
    cpu1 = cpu_seconds(pids)
    good = [r for r in results if isinstance(r, dict)]
    ends = collections.Counter(r.get("end", "") for r in good if not r["ok"])
    ends.update(type(r).__name__ for r in results if not isinstance(r, dict))
    total_tokens = sum(r["tokens"] for r in good) or 1
    lat = [x for r in good for x in r["lat"]]
    ttft = [r["ttft"] for r in good if r["ttft"] is not None]
    return {
        "chats": chats,
        "failed": chats - sum(1 for r in good if r["ok"]),
        "ttft_ms_p50": round(pct(ttft, 50), 1), "ttft_ms_p99": round(pct(ttft, 99), 1),
        "token_ms_p50": round(pct(lat, 50), 2), "token_ms_p99": round(pct(lat, 99), 2),
        "cpu_s_per_1k_tokens": round((cpu1 - cpu0) / total_tokens * 1000, 3),
        "event_kb_per_1k_tokens": round(sum(r["bytes"] for r in good) / total_tokens * 1000 / 1024, 1),
        "events_per_chat": round(statistics.mean(r["events"] for r in good), 1) if good else 0,
        "failures": dict(ends),
        "load_avg_1m": os.getloadavg()[0],
    }


class BenchPlatform(Platform):
    def _start_worker(self) -> None:  # more threads than the e2e default: 50 chats at once
        import uuid

        self.worker_name = f"bench-{uuid.uuid4().hex[:8]}@127.0.0.1"
        self._spawn("celery", self.worker_command(self.worker_name, 64))


def run_mode(mode: str, chat_levels: list[int], tokens: int, rate: float, extra: dict | None = None) -> None:
    server, url = start_upstream(tokens, rate)
    env = {
        "OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": url, "OPENAI_MODEL": "bench",
        "MAX_ACTIVE_RUNS_PER_USER": "1000", "RUN_RATE_LIMIT": "100000/60", "WS_FRAME_RATE_LIMIT": "100000/60",
        "EMBEDDED_EXECUTOR_THREADS": "64", "WORKER_CONCURRENCY": "64", "LOG_LEVEL": "WARNING",
        # PostgreSQL is shared on a dev box: cap each process's pool (web + worker = 60).
        "DB_POOL_MAX_SIZE": "30", **(extra or {}),
    }
    with BenchPlatform(mode, extra_env=env) as platform:
        token = httpx.post(f"{platform.base_url}/api/v1/auth/token/", trust_env=False, timeout=60,
                           json={"username": "alice", "password": platform.password}).json()["token"]
        pids = [p.pid for p in platform.procs.values()]
        # One user stands in for a team of C people: the demo's per-person token budget (and the
        # reserve each concurrent round holds against it) would refuse the later chats.
        platform.manage("shell", "-c", "from usage.models import Budget; "
                        "Budget.objects.filter(name__startswith='demo:').delete()")
        asyncio.run(level(platform, token, 1, min(tokens, 20), pids))  # warm-up
        for chats in chat_levels:
            print(json.dumps({"mode": mode, "tokens_per_chat": tokens, "tok_per_s": rate, **(extra or {}),
                              **asyncio.run(level(platform, token, chats, tokens, pids))}), flush=True)
    server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", default="1,10,50")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0, help="upstream tokens per second per chat")
    parser.add_argument("--services", action="store_true", help="also run with PostgreSQL + Redis + Celery")
    parser.add_argument("--embedded", action=argparse.BooleanOptionalAction, default=True, help="run embedded mode")
    parser.add_argument("--env", action="append", default=[], help="extra NAME=VALUE for the platform (tuning)")
    parser.add_argument("--observability", choices=["default", "off", "tracing"], default="default",
                        help="off: no request metrics middleware (METRICS_ENABLED=false); tracing: also export "
                             "OpenTelemetry traces to a local OTLP collector")
    args = parser.parse_args()
    levels = [int(x) for x in args.chats.split(",")]
    extra = dict(item.split("=", 1) for item in args.env)
    collector = None
    if args.observability == "off":
        extra["METRICS_ENABLED"] = "false"
    elif args.observability == "tracing":
        from tests.fakes.otlp_collector import FakeCollector

        collector = FakeCollector().start()
        extra["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.base_url
    if args.embedded:
        run_mode("embedded", levels, args.tokens, args.rate, extra)
    if args.services:
        run_mode("services", levels, args.tokens, args.rate, extra)
    if collector is not None:
        print(json.dumps({"spans_exported": len(collector.snapshot())}), flush=True)
        collector.stop()


if __name__ == "__main__":
    main()
