"""MCP benchmark: tool-list and call latency through the platform vs calling the server
directly with the ``mcp`` SDK, for the reference time server (stdio) and the tests' own
streamable HTTP server (``tests.mcp.http_server lab``).

* ``direct list`` — ``session.list_tools()`` on a client session of our own;
* ``platform list`` — ``tool_sources.all()`` + ``tool_pipeline`` (what every model request
  pays: the platform serves the listing from its long-lived session, re-listing in the
  background);
* ``direct call`` — ``session.call_tool(...)``;
* ``platform call`` — the tool spec's ``func`` (the runtime hop from a tool thread to the
  MCP loop, progress plumbing, result → text), i.e. what the loop executes.

Usage: ``.venv/bin/python bench/mcp_latency.py [--n 200]``. A throw-away SQLite database
under ``var/``; numbers go to stdout (milliseconds, p50/p95); nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
(REPO / "var").mkdir(exist_ok=True)
_db = tempfile.NamedTemporaryFile(dir=REPO / "var", prefix="bench-mcp-", suffix=".sqlite3", delete=False)
os.environ["DATABASE_URL"] = f"sqlite:///{_db.name}"

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from agents.pipeline import policy_views, tool_pipeline  # noqa: E402
from agents.tools import ToolContext, tool_sources  # noqa: E402
from mcp_client import sync, trust  # noqa: E402
from mcp_client.models import MCPServer  # noqa: E402
from tests.mcp.conftest import HttpServer  # noqa: E402

CTX = ToolContext(workspace_id=1, thread_id="t", user_id=1, run_id="r", role="member")
TIME_BIN = str(Path(sys.executable).parent / "mcp-server-time")


def stats(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    return f"p50 {statistics.median(ms):7.2f} ms   p95 {p95:7.2f} ms"


async def direct(open_transport, tool: str, args: dict, n: int) -> tuple[list[float], list[float]]:
    async with open_transport() as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        lists, calls = [], []
        for _ in range(n):
            t = time.perf_counter()
            await session.list_tools()
            lists.append(time.perf_counter() - t)
        for _ in range(n):
            t = time.perf_counter()
            await session.call_tool(tool, args)
            calls.append(time.perf_counter() - t)
        return lists, calls


def platform(slug: str, tool: str, args: dict, n: int) -> tuple[list[float], list[float]]:
    lists, calls = [], []
    for _ in range(n):
        t = time.perf_counter()
        tool_pipeline(role_name="member", object_type=None, allow_model_save=False, policies=policy_views())
        lists.append(time.perf_counter() - t)
    spec = tool_sources.get(tool)
    for _ in range(n):
        t = time.perf_counter()
        spec.func(ctx=CTX, **args)
        calls.append(time.perf_counter() - t)
    return lists, calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    n = parser.parse_args().n
    call_command("migrate", verbosity=0)
    lab = HttpServer("lab").start()
    try:
        time_server = MCPServer(slug="time", name="Time", command=TIME_BIN, enabled=True,
                                allowlist=["get_current_time"])
        trust.sign(time_server)  # as a superuser's save would: only signed stdio commands run
        time_server.save()
        MCPServer.objects.create(slug="lab", name="Lab", transport="streamable_http", url=lab.url, enabled=True,
                                 allowlist=["echo"])
        sync.warm_up()
        cases = [
            ("time (stdio)", "get_current_time", {"timezone": "UTC"},
             lambda: stdio_client(StdioServerParameters(command=TIME_BIN))),
            ("lab (streamable HTTP)", "echo", {"text": "hello"}, lambda: streamable_http_client(lab.url)),
        ]
        print(f"n = {n} per measurement; tools offered: {len(tool_sources.all())}")
        for label, tool, args, transport in cases:
            d_list, d_call = asyncio.run(direct(transport, tool, args, n))
            p_list, p_call = platform(label.split()[0], tool, args, n)
            print(f"\n{label}")
            print(f"  direct   list_tools      {stats(d_list)}")
            print(f"  platform offer (list)    {stats(p_list)}")
            print(f"  direct   call_tool       {stats(d_call)}")
            print(f"  platform call (spec)     {stats(p_call)}")
    finally:
        sync.reset()
        lab.stop()
        os.unlink(_db.name)


if __name__ == "__main__":
    main()
