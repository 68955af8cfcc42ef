"""What reading a model's stream costs per token, by the code that reads it: the CPU the
reading process spends on one token of a Chat Completions SSE stream, from the socket to a
``TextDelta``.

Every streamed token costs the process that reads the model's stream (the Celery worker, or
the web process in embedded mode) this much before the platform does anything with it. The
fake upstream (``bench/side_by_side/upstream.py``, another process) writes each token as its
own chunk at ``--rate`` tokens/s, so each token is one socket read, as at a model's speed.

Readers, from the floor up:

* ``socket`` — a blocking ``recv`` per token, nothing parsed: the system calls and wake-ups.
* ``httpx`` — ``iter_bytes`` of the openai SDK's own HTTP client (httpx, httpcore, h11): the
  transport alone.
* ``sdk`` — the SDK's raw stream as the adapter opens it (``cast_to=object``: SSE decoded,
  each chunk a dict).
* ``adapter`` — ``OpenAICompatAdapter.stream`` (``llm.wire.relay``): what a turn
  ran on its own thread until ``PROVIDER_STREAM_ON_LOOP`` (still the way with it off).
* ``adapter-loop`` — ``llm.wire.arelay`` over the adapter's async client on an
  event loop: what a turn runs now (the web server's loop, or a worker's publisher loop).
* ``async-sdk`` — the same raw stream through ``openai.AsyncOpenAI`` on an event loop (uvloop
  when installed, as uvicorn runs).
* ``async-sdk-aiohttp`` — the same with the SDK's aiohttp transport
  (``openai.DefaultAioHttpClient``, the ``httpx-aiohttp`` package: ``openai[aiohttp]``).
* ``aiohttp`` — aiohttp's client (its HTTP parser is C) on that loop, splitting SSE lines and
  ``json.loads`` per chunk: the path Open WebUI reads its upstream with.

Prints, per reader, CPU µs per token of this process (median of ``--repeat`` rounds after a
warm-up round; each reader's clients are made before the rounds, as a process keeps them) and
``items``, what the reader counted in the last round over all streams — socket reads, byte
chunks, SSE chunks or adapter events, so about streams × tokens, a few more per stream for
the role and finish chunks; far fewer means streams broke off.

Usage: ``.venv/bin/python bench/stream_read.py [--streams 50] [--tokens 300] [--rate 50]
[--repeat 3] [--readers socket,httpx,...]`` after ``make install-dev``; about 3 minutes with
the defaults, no database or Redis.
Measured 2026-12-04 on a 2-core box, 50 streams × 50 tokens/s, µs per token: socket 23, httpx
82, sdk 117, adapter 118, async-sdk 100, async-sdk-aiohttp 54, aiohttp 38 (another run of the
same box: 0–20 % less, same order). A stream alone costs more per token, since each of its
tokens wakes the process: the threads' readers 2–3 times as much, the loop's 4–7 times.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench" / "side_by_side"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")

READERS = ("socket", "httpx", "sdk", "adapter", "adapter-loop", "async-sdk", "async-sdk-aiohttp", "aiohttp")


class Readers:
    """``streams`` concurrent streams of ``tokens`` tokens at ``rate`` tokens/s per call: the
    synchronous readers on one thread each (as turn threads read), the asynchronous ones as
    tasks of one event loop (as the web server's loop would). Each returns the number of
    items it read over all streams."""

    def __init__(self, base_url: str, tokens: int, rate: float, streams: int) -> None:
        import logging

        import django

        django.setup()
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
        from llm.base import ChatMessage, ChatRequest
        from llm.openai_compat import OpenAICompatAdapter

        self.base_url = base_url
        self.streams = streams
        self.wire = OpenAICompatAdapter(base_url=base_url, api_key="sk-bench")
        self.request = ChatRequest(model=f"bench-n{tokens}-r{rate:g}", system="",
                                   messages=[ChatMessage(role="user", content="count")])
        self.body = {**self.wire.build_body(self.request), "stream": True}
        try:  # the web server's loop (uvicorn takes uvloop when it is installed, as here)
            import uvloop

            self.loop = uvloop.new_event_loop()
        except ImportError:
            self.loop = asyncio.new_event_loop()
        self._clients: dict[str, object] = {}  # the async readers' clients, made once

    def _client(self, name: str, make):
        """The async client ``name``, made on the loop on first use (``make()`` is a coroutine)."""
        if name not in self._clients:
            self._clients[name] = self.loop.run_until_complete(make())
        return self._clients[name]

    def close(self) -> None:
        for client in self._clients.values():
            self.loop.run_until_complete(client.close())
        self.loop.run_until_complete(self.wire.async_clients.aclose())  # adapter-loop's
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())  # the SDK's inner SSE generators
        self.loop.close()

    def _threads(self, read_one) -> int:
        with concurrent.futures.ThreadPoolExecutor(self.streams) as pool:
            return sum(pool.map(lambda _n: read_one(), range(self.streams)))

    def _tasks(self, read_one) -> int:
        async def all_streams() -> int:
            return sum(await asyncio.gather(*(read_one() for _ in range(self.streams))))

        return self.loop.run_until_complete(all_streams())

    def socket(self) -> int:
        body = json.dumps(self.body).encode()
        address = urlsplit(self.base_url)

        def read_one() -> int:
            conn = socket.create_connection((address.hostname, address.port))
            conn.settimeout(120)  # as every HTTP client does: a poll before each recv
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            reads = 0
            while conn.recv(65536):
                reads += 1
            conn.close()
            return reads

        return self._threads(read_one)

    def httpx(self) -> int:
        def read_one() -> int:
            with self.wire.client._client.stream("POST", f"{self.base_url}/chat/completions", json=self.body) as resp:
                return sum(1 for _chunk in resp.iter_bytes())

        return self._threads(read_one)

    def sdk(self) -> int:
        def read_one() -> int:
            upstream = self.wire.open(self.wire.build_body(self.request), self.request)
            try:
                return sum(1 for _data in upstream)
            finally:
                upstream.close()

        return self._threads(read_one)

    def adapter(self) -> int:
        return self._threads(lambda: sum(1 for _event in self.wire.stream(self.request)))

    def adapter_loop(self) -> int:
        from llm.wire import arelay

        async def read_one() -> int:
            events = []
            await arelay(self.wire, self.request, events.append)
            return len(events)

        return self._tasks(read_one)

    def async_sdk(self, transport: str = "httpx") -> int:
        import openai

        async def make():
            http_client = openai.DefaultAioHttpClient() if transport == "aiohttp" else None
            return openai.AsyncOpenAI(base_url=self.base_url, api_key="sk-bench", http_client=http_client)

        client = self._client(f"async-sdk-{transport}", make)

        async def read_one() -> int:
            stream = await client.post("/chat/completions", body=self.body, cast_to=object, stream=True,
                                       stream_cls=openai.AsyncStream[object])
            items = 0
            async for _data in stream:
                items += 1
            return items

        return self._tasks(read_one)

    def async_sdk_aiohttp(self) -> int:
        return self.async_sdk("aiohttp")

    def aiohttp(self) -> int:
        import aiohttp

        async def read_one() -> int:
            items = 0
            async with session.post(f"{self.base_url}/chat/completions", json=self.body,
                                    headers={"Authorization": "Bearer sk-bench"}) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                        json.loads(line[6:])
                        items += 1
            return items

        async def make():
            return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

        session = self._client("aiohttp", make)
        return self._tasks(read_one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=50, help="concurrent streams (50: the 50-chat point)")
    parser.add_argument("--tokens", type=int, default=300, help="tokens per stream")
    parser.add_argument("--rate", type=float, default=50.0, help="tokens/s of each stream (one chunk per token)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--readers", default=",".join(READERS))
    args = parser.parse_args()
    unknown = sorted(set(args.readers.split(",")) - set(READERS))
    if unknown:
        parser.error(f"unknown reader(s) {', '.join(map(repr, unknown))}; known: {', '.join(READERS)}")
    try:
        import aiohttp  # noqa: F401 - the fake upstream and the aiohttp readers
        import httpx_aiohttp  # noqa: F401 - openai.DefaultAioHttpClient
    except ImportError as exc:
        parser.error(f"{exc}: install the project first (make install-dev)")
    # make bench's own start-up of the fake upstream (bench/side_by_side/run.py): awaited on /health
    from run import start_upstream

    with tempfile.TemporaryDirectory() as tmp:
        upstream, base_url = start_upstream(Path(tmp) / "upstream.jsonl")
        readers = None
        try:
            readers = Readers(base_url, args.tokens, args.rate, args.streams)
            print(f"{args.streams} × {args.tokens} tokens at {args.rate:g} tokens/s per stream, median of {args.repeat}; "
                  f"load average {os.getloadavg()[0]:.2f}")
            print(f"{'reader':<18} {'CPU µs/token':>13} {'items':>6}")
            for name in args.readers.split(","):
                read = getattr(readers, name.replace("-", "_"))
                read()  # warm-up: imports, the connection pool
                samples, items = [], 0
                for _ in range(args.repeat):
                    started = time.process_time()
                    items = read()
                    samples.append((time.process_time() - started) / (args.tokens * args.streams) * 1e6)
                print(f"{name:<18} {statistics.median(samples):>13.1f} {items:>6}")
        finally:
            if readers is not None:
                readers.close()
            upstream.terminate()
            upstream.wait(10)


if __name__ == "__main__":
    main()
