"""Tell the event publisher which loop serves ASGI (see ``agents.events``)."""

import asyncio

from agents.events import bind_server_loop
from agents.runs.reaper import start_reaper


class BindServerLoop:
    """ASGI middleware: records the running loop on every connection (one assignment), and
    starts this process's run reaper on the first one (recovers turns after a restart)."""

    def __init__(self, app):
        self.app = app
        self._reaper_started = False

    async def __call__(self, scope, receive, send):
        bind_server_loop(asyncio.get_running_loop())
        if not self._reaper_started:
            self._reaper_started = True
            start_reaper()
        return await self.app(scope, receive, send)
