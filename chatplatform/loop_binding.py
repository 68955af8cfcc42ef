"""Tell the event publisher which loop serves ASGI (see ``agents.events``)."""

import asyncio

from agents.events import bind_server_loop


class BindServerLoop:
    """ASGI middleware: records the running loop on every connection (one assignment)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        bind_server_loop(asyncio.get_running_loop())
        return await self.app(scope, receive, send)
