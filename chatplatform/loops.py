"""The process's event loop for work that sync threads hand to asyncio: the ASGI server's own
loop in a web process (bound on each connection by ``config.loop_binding``), else one daemon
loop thread per process (Celery workers, management commands). Run events are published from
it (``agents.events``) and a turn reads its model's stream on it (``run_on_loop``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

from .loopwatch import watch_loop

_server_loop: asyncio.AbstractEventLoop | None = None
_own_loop: asyncio.AbstractEventLoop | None = None
_own_loop_lock = threading.Lock()


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Called by the ASGI application on each connection: publish on the server's loop."""
    global _server_loop
    _server_loop = loop


def publisher_loop() -> asyncio.AbstractEventLoop:
    """The loop events are sent from: the bound server loop if alive, else our own thread."""
    global _own_loop
    if _server_loop is not None and _server_loop.is_running() and not _server_loop.is_closed():
        return _server_loop
    with _own_loop_lock:
        if _own_loop is None or _own_loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="event-publisher", daemon=True)
            thread.start()
            _own_loop = loop
            watch_loop(loop, name="worker")  # a Celery worker reads its model streams on it
        return _own_loop


def run_coroutine(coro: Any, timeout: float | None = None) -> Any:
    """Run ``coro`` on the publisher loop from a sync thread and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, publisher_loop()).result(timeout)


class LoopStopped(RuntimeError):
    """The publisher loop stopped while :func:`run_on_loop` waited for a task on it."""


def run_on_loop(make_coro: Callable[[], Any], *, poll_s: float, stop: Callable[[], BaseException | None]) -> Any:
    """Run ``make_coro()`` as a task on the publisher loop and wait for it from a sync thread;
    return its result or raise its exception.

    Every ``poll_s`` seconds while it runs, ``stop()`` is asked (on this thread): an
    exception it returns (or raises) cancels the task — also one waiting on a silent
    upstream — and is raised here once the task has ended (its ``finally`` blocks done), so
    nothing the task does comes after. A loop that stops meanwhile (a server shutting down)
    raises :class:`LoopStopped`."""
    loop = publisher_loop()
    done: concurrent.futures.Future = concurrent.futures.Future()
    tasks: list[asyncio.Task] = []

    def settle(task: asyncio.Task) -> None:
        if task.cancelled():
            done.cancel()
        elif task.exception() is not None:
            done.set_exception(task.exception())
        else:
            done.set_result(task.result())

    def start() -> None:
        task = loop.create_task(make_coro())
        tasks.append(task)
        task.add_done_callback(settle)

    loop.call_soon_threadsafe(start)
    reason: BaseException | None = None
    while True:
        try:
            return done.result(timeout=poll_s)
        except concurrent.futures.TimeoutError:
            pass
        except concurrent.futures.CancelledError:
            if reason is not None:
                raise reason from None
            raise
        if loop.is_closed() or not loop.is_running():
            raise LoopStopped("the event loop stopped while a task ran on it")
        if reason is None:
            try:
                reason = stop()
            except BaseException as exc:  # raised here once the task has ended
                reason = exc
            if reason is not None:
                loop.call_soon_threadsafe(lambda: tasks[0].cancel())  # start() ran first: one FIFO
