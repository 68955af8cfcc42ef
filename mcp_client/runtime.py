"""One long-lived, initialised MCP session per enabled server per process.

The sessions live on a background event loop (thread ``mcp-loop``): the web process in
embedded mode, each worker process in production. Tool threads call :func:`call` (blocking)
and never touch the loop's objects directly; async code here never calls the ORM (the
database side is ``mcp_client.sync``, which runs in ordinary threads).

Per server, a :class:`Connection` task: start the transport (``stdio`` process or
streamable HTTP) → ``initialize`` → list tools and resources (bounded by the server's
``connect_timeout_s``) → serve calls, re-listing every ``MCP_REFRESH_S`` and on
``notifications/tools/list_changed`` → on failure, reconnect with exponential backoff
(``MCP_MIN_BACKOFF_S`` doubling to ``MCP_MAX_BACKOFF_S``; it starts over once a session had
been connected for ``MCP_BACKOFF_RESET_S``). A failed server is only skipped: its state says
why.

Recovery: a call while the server is waiting to reconnect starts the next attempt at once —
at most one attempt is in flight, every caller waits for it (up to the call's timeout) and
then calls or gets the attempt's error — except an attempt that found nothing listening (a
server restarting on its port), after which callers ask again within their time. A session whose calls time out
``MCP_SUSPECT_TIMEOUTS`` times in a row (a hung server) is restarted: for stdio a new process.

Calls: progress notifications are queued and handed to the calling tool thread (which
publishes ``tool.progress``); when the run gives up on the call (``ctx.cancelled``), the
call's task is cancelled and the SDK sends ``notifications/cancelled`` for it. A connection
that dies mid-call raises :class:`ServerGone`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import queue
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
from django.conf import settings
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

logger = logging.getLogger(__name__)

MAX_RESOURCES = 200  # resources listed per server (the synthetic read tool's enum)
Elicit = Callable[[types.ElicitRequestParams], types.ElicitResult]
REFUSED_RETRY_S = 0.25  # first pause before asking a server that refused the connection again (doubles to 2 s)


class ConnectFailed(Exception):
    """Starting, initialising or listing a server failed; the message is the root cause."""


class ServerGone(ConnectionError):
    """The server's connection ended (process died, HTTP endpoint gone) during a call."""


class ServerUnavailable(ConnectionError):
    """The server is not connected (failed to start, or reconnecting)."""


class CallTimedOut(Exception):
    """The server did not answer a call within its timeout (the SDK cancelled it)."""


class CallCancelled(Exception):
    """The caller gave up on the call; the SDK sent ``notifications/cancelled``."""


class CallFailed(Exception):
    """The server answered a call with a protocol error (unknown tool, bad arguments…)."""


class Unauthorized(ConnectionError):
    """The server answered HTTP 401 to a person's bearer token (before the call reached the
    tool: the session's initialisation or the call request itself was refused)."""


class BudgetSpent(Exception):
    """A call's own time (not counting the person's) ran out."""


class CallSlot:
    """One call in flight, shared by the calling tool thread and the MCP loop.

    ``asks``: the server's elicitations (``(params, concurrent.futures.Future)``), answered by
    the tool thread (:meth:`Runtime.call` hands them to its ``elicit``). While one waits, the
    call's clock stops: ``timeout_s`` bounds the server's own work, not the person's answer
    (that wait is bounded by ``MCP_ELICITATION_TIMEOUT_S`` on the platform side)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.asks: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._held = 0.0
        self._since: float | None = None
        self._depth = 0

    def restart(self) -> None:
        """Start the clock now (after connecting: the connection has its own timeout)."""
        with self._lock:
            self._start, self._held = time.monotonic(), 0.0

    def left(self) -> float | None:
        """Seconds of the call's own time left; None while a person is being asked."""
        with self._lock:
            if self._depth:
                return None
            return self._start + self.timeout_s + self._held - time.monotonic()

    async def ask(self, params: types.ElicitRequestParams) -> types.ElicitResult:
        """Hand an elicitation to the calling thread and wait for its answer (clock stopped)."""
        answer: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if not self._depth:
                self._since = time.monotonic()
            self._depth += 1
        self.asks.put((params, answer))
        try:
            return await asyncio.wrap_future(answer)
        finally:
            with self._lock:
                self._depth -= 1
                if not self._depth and self._since is not None:
                    self._held += time.monotonic() - self._since
                    self._since = None


async def within(call: CallSlot, coro) -> Any:
    """Await ``coro`` within the call's own time (see :class:`CallSlot`); BudgetSpent when it
    ran out (the request is cancelled: the SDK sends ``notifications/cancelled``)."""
    task = asyncio.ensure_future(coro)
    try:
        while True:
            left = call.left()
            await asyncio.wait([task], timeout=0.25 if left is None else max(0.0, min(left, 1.0)))
            if task.done():
                return task.result()
            left = call.left()
            if left is not None and left <= 0:
                raise BudgetSpent
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def call_once(config: ServerConfig, bearer: str, name: str, arguments: dict, timeout_s: float,
                    on_progress: Callable[[float, float | None, str | None], None],
                    call: CallSlot | None = None) -> types.CallToolResult:
    """One call in its own short session carrying ``bearer`` (a person's OAuth token): open
    the transport, initialise, call, close. Per-person sessions are not kept: a token changes
    on every refresh, and a session bound to one person must never serve another.

    Its elicitations go to ``call`` (this session serves one call only); time spent waiting
    for the person does not count against ``timeout_s``.

    Raises Unauthorized (HTTP 401), CallTimedOut, CallFailed, ServerGone."""
    refused: list[int] = []
    call = call or CallSlot(timeout_s)

    async def elicit(_context, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await call.ask(params)


    async def watch(response: httpx2.Response) -> None:
        if response.status_code == 401:
            refused.append(401)

    client = httpx2.AsyncClient(
        headers={**dict(config.headers), "Authorization": f"Bearer {bearer}"},
        timeout=httpx2.Timeout(30.0, read=max(timeout_s, 30.0)), event_hooks={"response": [watch]})

    async def progress(value: float, total: float | None, message: str | None) -> None:
        on_progress(value, total, message)

    try:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(client)
            read, write = await stack.enter_async_context(streamable_http_client(config.url, http_client=client))
            session = await stack.enter_async_context(ClientSession(read, write, elicitation_callback=elicit))
            with anyio.fail_after(config.connect_timeout_s):
                await session.initialize()
            call.restart()
            try:
                return await within(call, session.call_tool(name, arguments, progress_callback=progress))
            except BudgetSpent:
                raise CallTimedOut(f"{name} timed out after {timeout_s:g} s") from None
    except CallTimedOut:
        raise
    except MCPError as exc:
        if refused:
            raise Unauthorized(f"MCP server {config.slug!r} refused the token") from None
        if exc.code == types.REQUEST_TIMEOUT:
            raise CallTimedOut(f"{name} timed out after {timeout_s:g} s") from None
        if exc.code == types.CONNECTION_CLOSED:
            raise ServerGone(f"MCP server {config.slug!r} stopped responding") from None
        raise CallFailed(exc.message) from None
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 — transport errors arrive wrapped in groups
        if refused:
            raise Unauthorized(f"MCP server {config.slug!r} refused the token") from None
        if isinstance(exc, TimeoutError):
            raise CallTimedOut(f"{name}: the MCP server did not answer in time") from None
        raise ServerGone(f"MCP server {config.slug!r}: {config.redact(root_cause(exc))}") from None


async def read_once(config: ServerConfig, bearer: str, uri: str, timeout_s: float) -> types.ReadResourceResult:
    """``resources/read`` in its own short session carrying ``bearer`` (a person's token).
    Raises CallFailed, ServerGone, TimeoutError."""
    client = httpx2.AsyncClient(headers={**dict(config.headers), "Authorization": f"Bearer {bearer}"},
                                timeout=httpx2.Timeout(30.0, read=max(timeout_s, 30.0)))
    try:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(client)
            read, write = await stack.enter_async_context(streamable_http_client(config.url, http_client=client))
            session = await stack.enter_async_context(ClientSession(read, write))
            with anyio.fail_after(timeout_s):
                await session.initialize()
                return await session.read_resource(uri)
    except MCPError as exc:
        raise CallFailed(exc.message) from None
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 — transport errors arrive wrapped in groups
        raise ServerGone(f"MCP server {config.slug!r}: {config.redact(root_cause(exc))}") from None


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Everything needed to connect, with ``${VAR}`` already expanded. ``secrets``: values
    that must never appear in a status, log or error text (redacted to ``***``)."""

    slug: str
    transport: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    connect_timeout_s: float = 20.0
    secrets: tuple[str, ...] = ()

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret and len(secret) >= 4:
                text = text.replace(secret, "***")
        return text


@dataclasses.dataclass(frozen=True)
class Listing:
    """What a server offered at one listing. ``seq`` grows with each listing."""

    seq: int
    tools: tuple[types.Tool, ...]
    resources: tuple[types.Resource, ...]
    listed_at: datetime


def refused_connection(exc: BaseException) -> bool:
    """Nothing accepted the connection (a server restarting on its port, not yet listening) —
    unlike a process that exited or a handshake the server refused, this may pass in a moment."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError | httpx.ConnectError):
            return True
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for inner in (current.__cause__, current.__context__):
            if inner is not None:
                stack.append(inner)
    return False


def root_cause(exc: BaseException) -> str:
    """The innermost meaningful error of an exception (groups unwrapped), as one line."""
    while True:
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
            continue
        if isinstance(exc, MCPError):
            return f"MCP error {exc.code}: {exc.message}"
        if isinstance(exc, ConnectFailed | ServerGone):
            return str(exc)
        inner = exc.__cause__
        if inner is not None and not isinstance(exc, OSError | TimeoutError):
            exc = inner
            continue
        break
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not text.startswith(type(exc).__name__) else text


class Connection:
    """The session to one server, owned by one task on the MCP loop."""

    def __init__(self, config: ServerConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock  # measures how long a session stayed healthy (tests inject one)
        self.state = "connecting"  # connecting | connected | failed | stopped
        self.error = ""
        self.checked_at: datetime | None = None
        self.listing: Listing | None = None
        self.server_info: str = ""
        self._session: ClientSession | None = None
        self._seq = 0
        self._stop = asyncio.Event()
        self._poke = asyncio.Event()  # re-list now / reconnect now
        self._broken = asyncio.Event()
        self._connected = asyncio.Event()
        self.attempts = 0  # finished connection attempts (connected-then-lost included)
        self.started = 0  # connection attempts started
        self.backoff_s = 0.0  # the wait chosen after the last failure, seconds
        self.timeouts = 0  # consecutive call timeouts of this session
        self.restarts = 0  # sessions restarted as suspect (calls timing out)
        self._connected_at: float | None = None
        self._suspect = False
        self._waiters: dict[asyncio.Future, int] = {}  # caller → the attempt number it waits for
        self.refused = False  # the last attempt found nothing listening (refused_connection)
        self.task: asyncio.Task | None = None
        self._calls: dict[int, CallSlot] = {}  # calls in flight on the shared session

    # -- status -----------------------------------------------------------------------
    @property
    def health(self) -> str:
        if self.state == "failed":
            return f"failed: {self.error}"[:480]
        return self.state

    def _set(self, state: str, error: str = "") -> None:
        self.state = state
        self.error = self.config.redact(error)
        self.checked_at = datetime.now(UTC)

    # -- the owner task -----------------------------------------------------------------
    async def run(self) -> None:
        first = float(getattr(settings, "MCP_MIN_BACKOFF_S", 1.0))
        backoff = first
        while not self._stop.is_set():
            self._connected.clear()
            self._broken.clear()
            self._suspect = False
            self.started += 1
            self.refused = False
            self._set("connecting")
            try:
                await self._session_once()
                backoff = first
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 — any failure: mark it, back off, retry
                self._set("failed", root_cause(exc))
                self.refused = refused_connection(exc)
                logger.warning("MCP server %s: %s", self.config.slug, self.error)
            finally:
                self._session = None
                self._connected.clear()
                self.attempts += 1
                healthy_s = 0.0 if self._connected_at is None or self._suspect else self._clock() - self._connected_at
                self._connected_at = None
            if self._stop.is_set():
                break
            if healthy_s >= float(getattr(settings, "MCP_BACKOFF_RESET_S", 30.0)):
                backoff = first  # a crash after a healthy while is not part of a failing streak
            # No await between the failure and here: a caller that arrived meanwhile is either
            # settled now (it waited for this attempt) or pokes the next one below.
            self._poke.clear()
            self._settle()
            if self._waiters:
                self._poke.set()  # callers wait for the next attempt: make it now
            self.backoff_s = backoff
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), timeout=backoff)
            backoff = min(backoff * 2, float(getattr(settings, "MCP_MAX_BACKOFF_S", 60)))
        self._set("stopped")
        self._settle(everyone=True)

    def _settle(self, everyone: bool = False) -> None:
        """Wake the callers waiting for an attempt that has now finished (connected or
        failed); they look at ``_session``/``error`` themselves."""
        for waiter, wanted in list(self._waiters.items()):
            if (everyone or wanted <= self.started) and not waiter.done():
                waiter.set_result(None)

    async def _session_once(self) -> None:
        cfg = self.config
        async with contextlib.AsyncExitStack() as stack:
            if cfg.transport == "stdio":
                errlog = stack.enter_context(tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace"))
                self._errlog = errlog
                params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=dict(cfg.env) or None)
                try:  # spawning is immediate; a server that never answers is caught by initialise
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                except Exception as exc:
                    raise ConnectFailed(self._with_stderr(root_cause(exc))) from None
            else:
                client = create_mcp_http_client(headers=dict(cfg.headers))
                await stack.enter_async_context(client)
                read, write = await stack.enter_async_context(streamable_http_client(cfg.url, http_client=client))
            session = await stack.enter_async_context(ClientSession(
                read, write, message_handler=self._on_message, elicitation_callback=self._on_elicit))
            try:
                with anyio.fail_after(cfg.connect_timeout_s):
                    result = await session.initialize()
                    self.server_info = f"{result.server_info.name} {result.server_info.version}".strip()
                    await self._list(session)
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise ConnectFailed(self._with_stderr(f"initialise/list: {root_cause(exc)}")) from None
            self._session = session
            self.timeouts = 0
            self._connected_at = self._clock()
            self._set("connected")
            self._connected.set()
            self._settle()
            await self._serve(session)

    def _with_stderr(self, message: str) -> str:
        errlog = getattr(self, "_errlog", None)
        if errlog is None or self.config.transport != "stdio":
            return message
        try:
            errlog.flush()
            errlog.seek(0)
            tail = errlog.read()[-400:].strip().splitlines()
        except (OSError, ValueError):
            tail = []
        return f"{message} — stderr: {tail[-1]}" if tail else message

    async def _serve(self, session: ClientSession) -> None:
        refresh_s = float(getattr(settings, "MCP_REFRESH_S", 60))
        while True:
            waiters = [asyncio.ensure_future(e.wait()) for e in (self._stop, self._broken, self._poke)]
            try:
                await asyncio.wait(waiters, timeout=refresh_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
            if self._stop.is_set():
                return
            if self._broken.is_set():
                raise ServerGone(self.error or "connection closed")
            self._poke.clear()
            try:
                with anyio.fail_after(self.config.connect_timeout_s):
                    await self._list(session)
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise ConnectFailed(f"list: {root_cause(exc)}") from None
            self.checked_at = datetime.now(UTC)

    async def _list(self, session: ClientSession) -> None:
        tools: list[types.Tool] = []
        cursor = None
        while True:
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        resources: list[types.Resource] = []
        caps = session.server_capabilities
        if caps is not None and caps.resources is not None:
            cursor = None
            try:
                while len(resources) < MAX_RESOURCES:
                    page = await session.list_resources(
                        params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
                    resources.extend(page.resources)
                    cursor = page.next_cursor
                    if not cursor:
                        break
            except MCPError as exc:  # a server may announce resources and then refuse to list them
                if exc.code == types.CONNECTION_CLOSED:
                    raise
                logger.info("MCP server %s: resources not listed: %s", self.config.slug, exc.message)
        self._seq += 1
        self.listing = Listing(self._seq, tuple(tools), tuple(resources[:MAX_RESOURCES]), datetime.now(UTC))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification | types.ResourceListChangedNotification):
            self._poke.set()
        elif isinstance(message, Exception):
            logger.info("MCP server %s transport error: %s", self.config.slug, self.config.redact(str(message)))

    async def _on_elicit(self, _context, params: types.ElicitRequestParams) -> types.ElicitResult:
        """An elicitation on the shared session goes to the call in flight. The SDK does not
        say which request it belongs to: with several calls in flight it is declined rather
        than shown to a person who may not be the one the server asks."""
        calls = list(self._calls.values())
        if len(calls) != 1:
            logger.warning("MCP server %s: elicitation declined: %d calls in flight on the shared session",
                           self.config.slug, len(calls))
            return types.ElicitResult(action="decline")
        return await calls[0].ask(params)

    # -- requests (run as their own tasks on the loop) ------------------------------------
    async def _ready_session(self, wait_s: float) -> ClientSession:
        """The live session; when there is none, wait (up to ``wait_s``) for a connection
        attempt that finishes after this call arrived: the one in flight, or — while the
        server waits out its backoff — one started now. ServerUnavailable with the reason
        when that attempt failed, the server is stopped, or the wait ran out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        pause = REFUSED_RETRY_S
        while self._session is None and self.state != "stopped" and not self._stop.is_set():
            # the attempt in flight counts only if it started after the session was lost
            wanted = self.started if self.state == "connecting" else self.started + 1
            waiter = loop.create_future()
            self._waiters[waiter] = wanted
            if self.state != "connecting":
                self._poke.set()  # reconnect now rather than after the backoff
            try:
                await asyncio.wait_for(waiter, timeout=max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise ServerUnavailable(f"MCP server {self.config.slug!r} did not reconnect within "
                                        f"{wait_s:g} s" + (f" ({self.error})" if self.error else "")) from None
            finally:
                self._waiters.pop(waiter, None)
            if self._session is not None or not self.refused or loop.time() + pause >= deadline:
                break
            # Nothing listened yet (a server restarting on its port): ask again shortly, within
            # the caller's time, rather than fail a call the server would answer in a moment.
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)
        if self._session is None:
            reason = f": {self.error}" if self.error else ""
            raise ServerUnavailable(f"MCP server {self.config.slug!r} is not connected{reason}")
        return self._session

    def _gone(self, exc: BaseException, session: ClientSession | None = None) -> ServerGone:
        if session is None or session is self._session:  # not an older session's late news
            self._set("failed", f"connection lost: {root_cause(exc)}")
            self._session = None  # callers from now on wait for the reconnect
            self._broken.set()
        return ServerGone(f"MCP server {self.config.slug!r} stopped responding: {self.error}")

    def _timed_out(self, session: ClientSession) -> None:
        """One more call timed out; after ``MCP_SUSPECT_TIMEOUTS`` in a row the session is
        suspect (a hung server) and restarted."""
        if session is not self._session:
            return  # an old session's call; it is already gone
        self.timeouts += 1
        limit = int(getattr(settings, "MCP_SUSPECT_TIMEOUTS", 3))
        if limit > 0 and self.timeouts >= limit:
            self.restarts += 1
            self._suspect = True
            self._set("failed", f"restarted: {self.timeouts} calls in a row timed out")
            logger.warning("MCP server %s: %s", self.config.slug, self.error)
            self._session = None
            self._broken.set()

    async def call_tool(self, name: str, arguments: dict, timeout_s: float,
                        on_progress: Callable[[float, float | None, str | None], None],
                        call: CallSlot | None = None) -> types.CallToolResult:
        """Call ``name``; while the server is reconnecting, wait up to ``timeout_s`` for it
        first (see ``_ready_session``). Elicitations go to ``call`` (see :class:`CallSlot`).
        Raises ServerUnavailable, ServerGone, CallTimedOut, CallFailed."""
        session = await self._ready_session(timeout_s)
        call = call or CallSlot(timeout_s)
        call.restart()

        async def progress(value: float, total: float | None, message: str | None) -> None:
            on_progress(value, total, message)

        self._calls[id(call)] = call
        try:
            result = await within(call, session.call_tool(name, arguments, progress_callback=progress))
        except BudgetSpent:
            self._timed_out(session)
            raise CallTimedOut(f"{name} timed out after {timeout_s:g} s") from None
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                raise self._gone(exc, session) from None
            if exc.code == types.REQUEST_TIMEOUT:
                self._timed_out(session)
                raise CallTimedOut(f"{name} timed out after {timeout_s:g} s") from None
            if session is self._session:
                self.timeouts = 0  # it answered
            raise CallFailed(exc.message) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            raise self._gone(exc, session) from None
        finally:
            self._calls.pop(id(call), None)
        if session is self._session:
            self.timeouts = 0  # it answered
        return result

    async def read_resource(self, uri: str, timeout_s: float) -> types.ReadResourceResult:
        session = await self._ready_session(min(timeout_s, self.config.connect_timeout_s + 5))
        try:
            with anyio.fail_after(timeout_s):
                return await session.read_resource(uri)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                raise self._gone(exc, session) from None
            raise CallFailed(exc.message) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            raise self._gone(exc, session) from None

    def poke(self) -> None:
        self._poke.set()

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()


class Runtime:
    """The process's MCP loop and its connections, keyed by server slug."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[str, Connection] = {}

    # -- the loop ---------------------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or not self._thread or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=main, name="mcp-loop", daemon=True)
                self._thread.start()
                started.wait(5)
                self._loop = loop
            return self._loop

    def submit(self, coro) -> Any:
        """Run ``coro`` on the MCP loop; returns a ``concurrent.futures.Future``."""
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())

    # -- connections ------------------------------------------------------------------------
    def connection(self, slug: str) -> Connection | None:
        return self._connections.get(slug)

    def connections(self) -> dict[str, Connection]:
        return dict(self._connections)

    def ensure(self, configs: list[ServerConfig]) -> None:
        """Make the set of connections match ``configs``: start new ones, restart those whose
        settings changed, stop those no longer listed (disabled or deleted servers)."""
        wanted = {c.slug: c for c in configs}
        with self._lock:
            current = dict(self._connections)
        for slug, conn in current.items():
            if slug not in wanted or wanted[slug] != conn.config:
                self._stop(slug)
        for slug, config in wanted.items():
            if slug not in self._connections:
                conn = Connection(config)
                loop = self._ensure_loop()

                def start(conn=conn) -> None:
                    conn.task = asyncio.ensure_future(conn.run())

                loop.call_soon_threadsafe(start)
                with self._lock:
                    self._connections[slug] = conn

    def _stop(self, slug: str) -> None:
        with self._lock:
            conn = self._connections.pop(slug, None)
        if conn is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(conn.stop)

    def wait_attempt(self, slug: str, timeout_s: float) -> Connection | None:
        """Block until the server's current connection attempt has finished (connected or
        failed) or ``timeout_s`` passed; the connection (None when unknown)."""
        conn = self._connections.get(slug)
        if conn is None:
            return None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and conn.state == "connecting":
            time.sleep(0.05)
        return conn

    def relist(self, slug: str, timeout_s: float = 30.0) -> Connection | None:
        """Ask the server to list its tools again now (a failed one: to reconnect now) and
        wait until that listing or attempt has finished; the connection (None: unknown)."""
        conn = self._connections.get(slug)
        if conn is None or self._loop is None:
            return None
        seq0 = conn.listing.seq if conn.listing else 0
        attempts0 = conn.attempts
        self._loop.call_soon_threadsafe(conn.poke)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (conn.listing and conn.listing.seq > seq0) or conn.attempts > attempts0:
                break
            time.sleep(0.05)
        return conn

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop every connection (their processes end) and the loop; tests and exit."""
        with self._lock:
            conns = list(self._connections.values())
            self._connections.clear()
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        for conn in conns:
            loop.call_soon_threadsafe(conn.stop)

        async def drain() -> None:
            tasks = [c.task for c in conns if c.task is not None]
            if tasks:
                _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
                for task in pending:
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(drain(), loop).result(timeout_s + 2)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout_s)

    # -- blocking calls for tool threads ---------------------------------------------------------
    def call(self, slug: str, tool: str, arguments: dict, *, timeout_s: float,
             cancelled: threading.Event, progress: Callable[[str], None],
             elicit: Elicit | None = None) -> types.CallToolResult:
        """Call ``tool`` on server ``slug`` from a tool thread, blocking. Progress
        notifications become ``progress(label)`` calls on this thread, and the server's
        elicitations ``elicit(params) -> ElicitResult`` calls (blocking while a person answers;
        without ``elicit``: declined); when ``cancelled`` is set the call's task is cancelled
        (the SDK sends ``notifications/cancelled``).

        Raises ``ServerUnavailable``, ``ServerGone``, ``CallFailed``, ``CallTimedOut`` or
        ``CallCancelled``."""
        conn = self._connections.get(slug)
        if conn is None:
            raise ServerUnavailable(f"MCP server {slug!r} is not enabled")
        updates: queue.SimpleQueue = queue.SimpleQueue()

        def on_progress(value: float, total: float | None, message: str | None) -> None:
            updates.put((value, total, message))

        slot = CallSlot(timeout_s)
        future = self.submit(conn.call_tool(tool, arguments, timeout_s, on_progress, slot))
        while not future.done():
            concurrent.futures.wait([future], timeout=0.1)
            _drain(updates, progress)
            _answer(slot, elicit)
            if cancelled.is_set() and not future.done():
                future.cancel()
                raise CallCancelled(f"{tool} was cancelled")
        _drain(updates, progress)
        return future.result()

    def call_as(self, config: ServerConfig, bearer: str, tool: str, arguments: dict, *, timeout_s: float,
                cancelled: threading.Event, progress: Callable[[str], None],
                elicit: Elicit | None = None) -> types.CallToolResult:
        """:func:`call_once` from a tool thread, blocking, with progress and cancellation as
        :meth:`call`. Raises ``Unauthorized``, ``ServerGone``, ``CallFailed``, ``CallTimedOut``
        or ``CallCancelled``."""
        updates: queue.SimpleQueue = queue.SimpleQueue()

        def on_progress(value: float, total: float | None, message: str | None) -> None:
            updates.put((value, total, message))

        slot = CallSlot(timeout_s)
        future = self.submit(call_once(config, bearer, tool, arguments, timeout_s, on_progress, slot))
        while not future.done():
            concurrent.futures.wait([future], timeout=0.1)
            _drain(updates, progress)
            _answer(slot, elicit)
            if cancelled.is_set() and not future.done():
                future.cancel()
                raise CallCancelled(f"{tool} was cancelled")
        _drain(updates, progress)
        return future.result()

    def read_as(self, config: ServerConfig, bearer: str, uri: str, *, timeout_s: float) -> types.ReadResourceResult:
        """:func:`read_once` from an ordinary thread, blocking."""
        return self.submit(read_once(config, bearer, uri, timeout_s)).result(timeout_s + 5)

    def read_resource(self, slug: str, uri: str, *, timeout_s: float) -> types.ReadResourceResult:
        conn = self._connections.get(slug)
        if conn is None:
            raise ServerUnavailable(f"MCP server {slug!r} is not enabled")
        return self.submit(conn.read_resource(uri, timeout_s)).result(timeout_s + 5)


def _answer(slot: CallSlot, elicit: Elicit | None) -> None:
    """Answer the call's pending elicitations on this (the tool's) thread."""
    while True:
        try:
            params, answer = slot.asks.get_nowait()
        except queue.Empty:
            return
        if answer.done():  # the call ended meanwhile
            continue
        try:
            result = elicit(params) if elicit is not None else types.ElicitResult(action="decline")
        except Exception:  # a broken handler cancels the request rather than hang the server
            logger.exception("elicitation handler failed")
            result = types.ElicitResult(action="cancel")
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            answer.set_result(result)


def _drain(updates: queue.SimpleQueue, progress: Callable[[str], None]) -> None:
    while True:
        try:
            value, total, message = updates.get_nowait()
        except queue.Empty:
            return
        label = message or (f"{value:g}/{total:g}" if total else f"{value:g}")
        with contextlib.suppress(Exception):
            progress(label)


runtime = Runtime()
