"""CPU per message of a websocket consumer's dispatch: Channels' ``await_many_dispatch``
against ``chatplatform.consumer_dispatch.dispatch_each``, with two sources (the client's
socket, idle, and the channel layer) and one message per event-loop turn, as a web process
sees run events at 1–10 chats.

    .venv/bin/python bench/consumer_dispatch.py [--messages 20000] [--repeat 6]

Prints µs of CPU per message (net of the loop turns that carry them), min and median per
variant; runs alternate so drift of the machine falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from channels.utils import await_many_dispatch  # noqa: E402

from chatplatform.consumer_dispatch import dispatch_each  # noqa: E402

TURNS = 4  # event-loop turns between two messages: each is dispatched before the next comes


async def _turns(n: int) -> None:
    for _ in range(n * TURNS):
        await asyncio.sleep(0)


async def _measure(variant, messages: int) -> float:
    """CPU seconds for ``messages`` dispatched by ``variant``, with the loop turns."""
    layer, client = asyncio.Queue(), asyncio.Queue()
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    count = 0

    async def dispatch(message) -> None:
        nonlocal count
        count += 1
        if count == messages:
            finished.set_result(None)

    task = asyncio.ensure_future(variant([client.get, layer.get], dispatch))
    await asyncio.sleep(0)
    start = time.process_time()
    for i in range(messages):
        layer.put_nowait(i)
        for _ in range(TURNS):
            await asyncio.sleep(0)
    await finished
    spent = time.process_time() - start
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    return spent


async def _baseline(messages: int) -> float:
    start = time.process_time()
    await _turns(messages)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=6)
    args = parser.parse_args()
    variants = {"channels await_many_dispatch": await_many_dispatch, "dispatch_each": dispatch_each}
    results: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeat):
        for name, variant in variants.items():
            base = asyncio.run(_baseline(args.messages))
            spent = asyncio.run(_measure(variant, args.messages))
            results[name].append((spent - base) / args.messages * 1e6)
    print(f"CPU per message, µs ({args.messages} messages × {args.repeat} runs, alternating)")
    for name, values in results.items():
        print(f"  {name:30} min {min(values):6.1f}   median {statistics.median(values):6.1f}")


if __name__ == "__main__":
    main()
