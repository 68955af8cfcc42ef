"""What receiving one Redis Pub/Sub message costs a web process: channels-redis's reader
(redis-py's asyncio ``PubSub``, ``get_message(timeout=0.1)`` in a loop, as
``channels_redis.pubsub.RedisSingleShardConnection._do_receiving`` runs it) against
``chatplatform.pubsub.Subscriber`` (an asyncio protocol over hiredis).

A separate process publishes ``--messages`` messages of ``--bytes`` bytes at ``--rate`` per
second, one per write, as a worker publishes run events at 1–10 chats (each arrives alone, so
nothing is amortised over a batch). The receiving process's CPU (user + system, all threads)
per message is printed for each reader, over ``--repeat`` interleaved rounds, with the
median.

Usage: ``.venv/bin/python bench/pubsub_receive.py [--redis redis://127.0.0.1:6379/13]
[--messages 5000] [--rate 500] [--repeat 3]`` (needs Redis).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHANNEL = "bench.pubsub_receive"

PUBLISHER = """
import sys, time, redis
url, n, rate, size = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
r = redis.Redis.from_url(url)
payload = b"x" * size
start = time.monotonic()
for i in range(n):
    r.publish(sys.argv[5], payload)
    wait = start + (i + 1) / rate - time.monotonic()
    if wait > 0:
        time.sleep(wait)
"""


async def receive(reader: str, url: str, n: int, rate: float, size: int) -> float:
    """CPU µs per message of this process while ``reader`` receives ``n`` messages."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    got = 0

    def count(_channel: bytes, _data: bytes) -> None:
        nonlocal got
        got += 1
        if got >= n and not done.done():
            done.set_result(None)

    if reader == "chatplatform":
        from chatplatform.pubsub import Subscriber, subscriber_target

        subscriber = Subscriber(subscriber_target({"address": url}), count)
        await subscriber.subscribe(CHANNEL)
    else:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(url)
        pubsub = client.pubsub()
        await pubsub.subscribe(CHANNEL)

        async def drive() -> None:
            while not done.done():
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
                if message is not None:
                    count(message["channel"], message["data"])

        task = loop.create_task(drive())
    publisher = subprocess.Popen([sys.executable, "-c", PUBLISHER, url, str(n), str(rate), str(size), CHANNEL])
    await asyncio.sleep(0.3)  # the publisher's interpreter starts; not counted
    before = os.times()
    try:
        async with asyncio.timeout(n / rate + 30):
            await done
    finally:
        after = os.times()
        publisher.wait()
    if reader == "chatplatform":
        await subscriber.close()
    else:
        await task
        await pubsub.aclose()
        await client.aclose()
    return ((after.user - before.user) + (after.system - before.system)) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--bytes", type=int, default=200, help="payload size (a msgpack'd text.delta is ~150 B)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"channels-redis": [], "chatplatform": []}
    print(f"{args.messages} messages of {args.bytes} B at {args.rate:g}/s; load average {os.getloadavg()[0]:.2f}")
    for round_ in range(args.repeat):
        for reader in results:
            cpu = asyncio.run(receive(reader, args.redis, args.messages, args.rate, args.bytes))
            results[reader].append(cpu)
            print(f"round {round_ + 1}: {reader:15s} {cpu:6.1f} µs CPU per message")
            time.sleep(0.5)
    for reader, values in results.items():
        print(f"median: {reader:15s} {statistics.median(values):6.1f} µs CPU per message")


if __name__ == "__main__":
    main()
