"""On a web process's first connection: connect its enabled external MCP servers (in a
thread, ``mcp_client.sync.warm_up_in_background``), tell the event publisher which loop serves ASGI (see ``agents.events``), size the loop's
default executor (the ``WEB_DB_THREADS`` threads that run websocket and SSE database work,
``chatplatform.dbasync.db_async``) and watch the loop for stalls (``chatplatform.loopwatch``)."""

import asyncio
import concurrent.futures
import threading

from django.conf import settings

from agents.runs.reaper import start_reaper
from chatplatform.loops import bind_server_loop
from chatplatform.loopwatch import watch_loop
from llm.capabilities import preload_adapters
from mcp_client import sync as mcp_sync
from schedules.ticker import start_ticker


class BindServerLoop:
    """ASGI middleware: records the running loop on every connection (one assignment); on the
    first one starts this process's run reaper (recovers turns after a restart), the loop's
    stall watch (``web``) and the connections to the enabled external MCP servers."""

    def __init__(self, app):
        self.app = app
        self._reaper_started = False

    async def __call__(self, scope, receive, send):
        loop = asyncio.get_running_loop()
        bind_server_loop(loop)
        if not self._reaper_started:
            self._reaper_started = True
            loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(
                max_workers=settings.WEB_DB_THREADS, thread_name_prefix="web-db"))
            start_reaper()
            mcp_sync.warm_up_in_background()
            watch_loop(loop, name="web")
            if settings.RUN_EXECUTOR == "embedded":  # this process runs turns: load their SDKs now
                start_ticker()  # and fires the schedules (with Celery, every worker does)
                threading.Thread(target=preload_adapters, name="preload-adapters", daemon=True).start()
        return await self.app(scope, receive, send)
