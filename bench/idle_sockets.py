"""Memory per idle websocket: what one open thread page costs the web process while nothing
streams — the last row of issue 18's table (chatplatform 21 KiB embedded, 22 KiB production on
2026-12-01; Open WebUI 0.12.4 314 KiB per Socket.IO connection).

For each mode it starts the platform as the e2e tests do (``tests/e2e/harness.py``: embedded =
one web process on SQLite with the in-process channel layer; production = a web process on
PostgreSQL with the Redis Pub/Sub layer, and a Celery worker), creates ``--sockets`` threads
over REST as the demo user (``tests/e2e/flows.py``), and opens one websocket per thread
through the public contract (``ws/threads/<id>/``, ``Authorization: Token``,
permessage-deflate offered as browsers do).
A socket counts as open once the server accepted it: ``ThreadConsumer.connect`` accepts after
its access check and its group subscriptions, so everything it keeps per socket is in place.

Printed per mode: the web process's resident memory (``VmRSS`` from ``/proc``, KiB) before and
after opening the sockets, and the difference per socket. Before counting, ``--warmup`` sockets
are opened and closed so imports, caches and pools are not charged to the sockets. Nothing is
asserted; RSS moves with the allocator, so quote the figure with its socket count.

Usage: ``.venv/bin/python bench/idle_sockets.py [--modes embedded,production] [--sockets 300]
[--asgi uvicorn|daphne]`` (production needs PostgreSQL and Redis as for the e2e tests).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e import flows  # noqa: E402
from tests.e2e.harness import Platform  # noqa: E402


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (``/proc/<pid>/status``, ``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def open_sockets(platform: Platform, token: str, thread_ids: list[str]) -> list:
    """One websocket per thread, opened 20 at a time; returns them open."""
    from websockets.asyncio.client import connect

    gate = asyncio.Semaphore(20)

    async def one(thread_id: str):
        async with gate:
            return await connect(platform.ws_url(thread_id), additional_headers={"Authorization": f"Token {token}"},
                                 origin=platform.base_url, compression="deflate", max_size=None)

    return await asyncio.gather(*(one(t) for t in thread_ids))


async def measure(platform: Platform, args) -> None:
    pid = platform.procs["daphne"].pid  # the web process, whichever server runs it
    token = flows.login_token(platform, "alice")
    ids = [flows.create_thread(platform, token) for _ in range(args.warmup + args.sockets)]
    warm = await open_sockets(platform, token, ids[: args.warmup])
    await asyncio.gather(*(ws.close() for ws in warm))
    await asyncio.sleep(args.settle)
    before = rss_kib(pid)
    sockets = await open_sockets(platform, token, ids[args.warmup:])
    await asyncio.sleep(args.settle)
    after = rss_kib(pid)
    await asyncio.gather(*(ws.close() for ws in sockets))
    await asyncio.sleep(args.settle)
    closed = rss_kib(pid)
    print(f"  web process RSS: {before:,} KiB before, {after:,} KiB with {len(sockets)} idle sockets, "
          f"{closed:,} KiB after closing them")
    print(f"  per idle websocket: {(after - before) / len(sockets):.1f} KiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="embedded,production")
    parser.add_argument("--sockets", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds to wait before each RSS reading")
    parser.add_argument("--asgi", default="uvicorn", choices=("uvicorn", "daphne"))
    args = parser.parse_args()
    for mode in args.modes.split(","):
        started = time.monotonic()
        with Platform("embedded" if mode == "embedded" else "services", asgi_server=args.asgi,
                      extra_env={"LOG_LEVEL": "WARNING", "WS_FRAME_RATE_LIMIT": "100000/60"}) as platform:
            print(f"{mode} ({args.asgi}):", flush=True)
            asyncio.run(measure(platform, args))
        print(f"  ({time.monotonic() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
