"""``python -m config.serve``: uvicorn's command line with a server loop that ticks once a
second, still refreshing the Date header on every tick and stopping at once on a signal."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
import pytest
import uvicorn

from config.serve import Server
from tests.e2e.harness import free_port

REPO = Path(__file__).resolve().parent.parent


async def hello(scope, receive, send):
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"hello"})


class Recording(Server):
    """Records the counters uvicorn's ``on_tick`` is called with."""

    def __init__(self, *, tick_s: float, stop_at: int | None = None) -> None:
        config = uvicorn.Config(hello, lifespan="off", log_level="warning")
        config.load()
        super().__init__(config)
        self.TICK_S = tick_s
        self.stop_at = stop_at
        self.ticks: list[int] = []

    async def on_tick(self, counter: int) -> bool:
        self.ticks.append(counter)
        stop = await super().on_tick(counter)
        return stop or (self.stop_at is not None and counter >= self.stop_at)


def test_every_tick_counts_a_second_so_the_date_header_is_refreshed_each_time():
    server = Recording(tick_s=0.001, stop_at=30)
    asyncio.run(asyncio.wait_for(server.main_loop(), 10))
    assert server.ticks == [0, 10, 20, 30]  # uvicorn refreshes the Date header when counter % 10 == 0
    assert dict(server.server_state.default_headers)[b"date"]


def test_a_stop_signal_ends_the_loop_without_waiting_for_the_next_tick():
    server = Recording(tick_s=3600)  # a tick an hour: only the wake-up can end the loop in time

    async def go():
        asyncio.get_running_loop().call_later(0.05, server.handle_exit, signal.SIGTERM, None)
        await asyncio.wait_for(server.main_loop(), 10)

    asyncio.run(go())
    assert server.should_exit and server.ticks == [0, 10]


def test_the_command_takes_uvicorn_s_options_serves_and_stops_on_sigterm():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "config.serve", "--host", "127.0.0.1", "--port", str(port),
                             "--lifespan", "off", "--no-access-log", "tests.test_serve:hello"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with httpx.Client(trust_env=False, timeout=2) as client:
            for _ in range(200):
                try:
                    response = client.get(f"http://127.0.0.1:{port}/")
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, proc.stdout.read()
                    time.sleep(0.05)
            else:
                pytest.fail("config.serve did not answer")
        assert (response.status_code, response.text) == (200, "hello")
        assert parsedate_to_datetime(response.headers["date"]).tzinfo is not None
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Finished server process" in out  # a graceful shutdown, not a kill
    assert proc.returncode == -signal.SIGTERM  # uvicorn re-raises the signal it captured once stopped
