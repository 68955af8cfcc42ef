"""The production web server: uvicorn's own command line with a quieter server loop.

``python -m config.serve [uvicorn's options] config.asgi:application`` takes every
option ``uvicorn`` does (``--host``, ``--port``, ``--ws``, ``--loop``, ``--workers``…) and runs
uvicorn with one change, :class:`Server`: its main loop looks at the process once a second
instead of every 0.1 s. uvicorn's loop only refreshes the ``Date`` header (once a second),
checks ``--limit-max-requests`` and notices a stop signal; its ten wake-ups a second are a bare
app's whole idle cost, and a share of every web process's CPU while runs stream
(``bench/idle_cpu.py``). A stop signal still
ends the loop at once (:meth:`Server.handle_exit` wakes it).
"""

from __future__ import annotations

import asyncio
import importlib
from types import FrameType

import uvicorn


class Server(uvicorn.Server):
    """uvicorn's server with a main loop that ticks every ``TICK_S`` seconds."""

    TICK_S = 1.0
    TENTHS_PER_TICK = 10  # uvicorn's on_tick counts 0.1-s ticks; the Date header is refreshed every tenth

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + self.TENTHS_PER_TICK) % 864000
            try:
                await asyncio.wait_for(self._wake.wait(), self.TICK_S)
            except TimeoutError:
                pass
            should_exit = await self.on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """uvicorn's signal handler (SIGINT, SIGTERM), then a wake-up of the main loop so it
        sees ``should_exit`` now rather than at its next tick."""
        super().handle_exit(sig, frame)
        loop = getattr(self, "_loop", None)
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)


def main() -> None:
    """uvicorn's command line (``uvicorn.main.main``), building :class:`Server` for ``run``."""
    cli = importlib.import_module("uvicorn.main")  # the module: the package's ``main`` is the command
    cli.Server = Server
    cli.main()


if __name__ == "__main__":
    main()
