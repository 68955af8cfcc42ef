"""The stream, error and finish plumbing every HTTP adapter shares; an adapter only maps its
wire format.

An adapter implements the :class:`Wire` protocol and its ``stream(request)`` is
``return relay(self, request)``; catalogue calls go through :func:`catalogue_call`. An adapter
that also implements the :class:`AsyncWire` part (``aopen``/``aitems``/``aclose``) can be read
on an event loop with :func:`arelay` — the same :class:`Reader` maps the same items, so both
ways give the same events and errors. The rules that live here, once:

* **Errors name their root cause** (DESIGN §1). An adapter says what an SDK or transport
  exception *is* (:meth:`Wire.failure` → :class:`Failure`); :func:`provider_error` turns
  that into the one :class:`ProviderError` every adapter reports:

  ===============  ===============================================  ===========================
  failure          before the response started                      while streaming
  ===============  ===============================================  ===========================
  ``timeout``      ``timeout`` "provider timed out (<url>)"         same (also a read timeout
                                                                    the SDK leaves unwrapped)
  ``connect``      ``unreachable`` "provider unreachable: <root      ``stream_interrupted`` "the
                   cause> to <host:port>"                           provider's stream broke off"
  ``transport``    ``unreachable`` (as above)                       ``stream_interrupted`` "…
                                                                    broke off: <detail>"
  ``status``       :func:`errors.status_error` (401 auth, 404 model, 429 retry-after, 5xx …)
  ``other``        ``upstream_error`` with the exception's text
  not JSON         ``upstream_error`` "the provider sent a chunk that is not valid JSON: …"
  ===============  ===============================================  ===========================

  Every message is scrubbed of the API key. A :class:`ProviderError` raised by the adapter
  itself (an error event inside a 200 stream) passes through unchanged.
* **The upstream is always closed**, also when the consumer stops iterating early.
* **Reasoning never reaches the answer**: with ``Wire.think_tags``, text deltas pass a
  :class:`ThinkFilter` (``<think>`` blocks become :class:`ReasoningDelta`).
* **No NUL reaches the platform**: text, reasoning and tool calls pass
  :func:`chatplatform.safe_input.storable` (NUL → U+FFFD; PostgreSQL stores no NUL), so what
  streams is what is stored.
* **A response ends once**: the adapter's :class:`Reader` gives one :class:`Ending` when the wire
  says the response is complete; a stream without one is ``stream_interrupted``
  (retryable). A response cut by the output limit is ``Finish("length")`` and its tool
  calls are dropped (a call cut off mid-arguments is never executed); otherwise the calls
  come out in order, then ``Finish("tool_calls" | "stop", usage)``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

import aiohttp

from chatplatform.safe_input import NUL, storable

from .base import Finish, ProviderError, ReasoningDelta, TextDelta
from .errors import exception_chain, network_root_cause, scrub, status_error, unreachable
from .thinking import ThinkFilter

if TYPE_CHECKING:  # annotations only
    from .base import ChatRequest, StreamedToolCall, StreamEvent, Usage

T = TypeVar("T")


@dataclass
class Failure:
    """What an SDK/transport exception means. ``kind``: ``timeout`` | ``connect`` |
    ``transport`` | ``status`` | ``other``; ``status``/``detail``/``retry_after`` for
    ``status`` (``detail``: the provider's own message, scrubbed here)."""

    kind: str
    status: int = 0
    detail: str = ""
    retry_after: str | None = None


@dataclass
class Ending:
    """The wire said the response is complete. ``truncated``: the output limit cut it."""

    truncated: bool = False
    calls: list[StreamedToolCall] = field(default_factory=list)
    usage: Usage | None = None


class Reader(Protocol):
    """Maps one response's wire items (SSE chunks, SDK events, NDJSON lines) to events; one
    per response, so it may keep state (tool-call fragments, usage)."""

    def feed(self, item: Any) -> Iterable[StreamEvent | Ending]:
        """The events of one item: text, reasoning, or the response's :class:`Ending`."""
        ...

    def end(self) -> Iterable[StreamEvent | Ending]:
        """The events once the items ran out (the :class:`Ending`, if the wire said it so far
        only implicitly); nothing when the response is incomplete."""
        ...


class Wire(Protocol):
    """What an HTTP adapter implements for :func:`relay` and :func:`catalogue_call`."""

    base_url: str
    #: The API key (or None); scrubbed from every error message, never shown.
    _api_key: str | None
    #: Whether answer text may carry ``<think>`` blocks (OpenAI-compatible servers, Ollama).
    think_tags: bool
    #: The ``stream_interrupted`` message when the stream ends without an :class:`Ending`.
    unfinished: str

    def build_body(self, request: ChatRequest) -> dict[str, Any]: ...

    def open(self, body: dict[str, Any], request: ChatRequest) -> Any:
        """Send the request; return the open upstream once the response started."""
        ...

    def items(self, upstream: Any) -> Iterable[Any]:
        """The upstream's wire items, for :meth:`reader`."""
        ...

    def reader(self, request: ChatRequest) -> Reader: ...

    def close(self, upstream: Any) -> None: ...

    def failure(self, exc: BaseException) -> Failure | ProviderError | None:
        """What ``exc`` means, or None when it is not an SDK/transport error (re-raised)."""
        ...

    def prefilled_thinking(self, request: ChatRequest) -> bool:
        """Whether the model's template opens the think block itself (only with ``think_tags``)."""
        ...


class AsyncWire(Wire, Protocol):
    """A :class:`Wire` that can also be read on an event loop (:func:`arelay`): the same
    request, items and errors through the SDK's async client. Its async clients belong to
    the loop that made them (:class:`LoopClients`)."""

    async def aopen(self, body: dict[str, Any], request: ChatRequest) -> Any: ...

    def aitems(self, upstream: Any) -> AsyncIterable[Any]: ...

    async def aclose(self, upstream: Any) -> None: ...


def provider_error(wire: Wire, exc: BaseException, *, model: str, midstream: bool) -> ProviderError | None:
    """The :class:`ProviderError` for ``exc`` (see the module table), None when ``wire``
    does not recognise it."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, json.JSONDecodeError):  # the SDK's SSE decoding of a chunk
        sample = scrub(exc.doc[:200], wire._api_key)
        return ProviderError("upstream_error", f"the provider sent a chunk that is not valid JSON: {sample!r}")
    failure = wire.failure(exc)
    if failure is None or isinstance(failure, ProviderError):
        return failure
    kind, detail = failure.kind, None
    if kind in ("timeout", "connect", "transport"):
        kind, detail = _network_cause(kind, exc)
    if kind == "timeout":
        return ProviderError("timeout", f"provider timed out ({wire.base_url})", retryable=True)
    if kind == "connect":
        if midstream:
            return ProviderError("stream_interrupted", "the provider's stream broke off", retryable=True)
        return unreachable(wire.base_url, exc)
    if kind == "transport":
        if midstream:
            detail = detail or scrub(str(exc), wire._api_key) or type(exc).__name__
            return ProviderError("stream_interrupted", f"the provider's stream broke off: {detail}", retryable=True)
        return unreachable(wire.base_url, exc)
    if failure.kind == "status":
        return status_error(failure.status, scrub(failure.detail, wire._api_key), model=model,
                            retry_after=failure.retry_after)
    return ProviderError("upstream_error", scrub(str(exc), wire._api_key) or type(exc).__name__)


def relay(wire: Wire, request: ChatRequest) -> Iterator[StreamEvent]:
    """``wire``'s stream for ``request`` as provider-neutral events (the module's rules)."""
    body = wire.build_body(request)
    try:
        upstream = wire.open(body, request)
    except Exception as exc:
        _raise_translated(wire, exc, model=request.model, midstream=False)
    try:
        finisher = _Finisher(wire, request)
        for item in wire.items(upstream):
            yield from finisher.feed(item)
            if finisher.ended:
                break
        yield from finisher.finish()
    except Exception as exc:
        _raise_translated(wire, exc, model=request.model, midstream=True)
    finally:
        wire.close(upstream)


async def arelay(wire: AsyncWire, request: ChatRequest, deliver: Callable[[StreamEvent], None]) -> None:
    """:func:`relay` on an event loop: ``deliver(event)`` (on the loop; it must not block)
    gets the same events in the same order, and the same :class:`ProviderError` is raised.
    An exception ``deliver`` raises (a cancel) ends the stream and passes through unchanged;
    so does cancelling the task. The upstream is closed either way."""
    body = wire.build_body(request)
    try:
        upstream = await wire.aopen(body, request)
    except Exception as exc:
        _raise_translated(wire, exc, model=request.model, midstream=False)
    try:
        finisher = _Finisher(wire, request)
        items = aiter(wire.aitems(upstream))
        while not finisher.ended:
            try:
                events = finisher.feed(await anext(items))
            except StopAsyncIteration:
                break
            except Exception as exc:
                _raise_translated(wire, exc, model=request.model, midstream=True)
            for event in events:
                deliver(event)
        try:
            events = finisher.finish()
        except Exception as exc:
            _raise_translated(wire, exc, model=request.model, midstream=True)
        for event in events:
            deliver(event)
    finally:
        await wire.aclose(upstream)


def _network_cause(kind: str, exc: BaseException) -> tuple[str, str | None]:
    """``(kind, detail)`` of a network failure the adapter called ``kind`` (``timeout`` |
    ``connect`` | ``transport``), from the exception's cause chain: an aiohttp error behind
    it decides (an async client's: the ``httpx_aiohttp`` transport raises every
    ``ClientConnectionError`` — refused, reset, disconnected — as ``httpx.ConnectTimeout``, and
    a cut-short body as a text naming aiohttp's internal "TransferEncodingError: 400"); else a
    ``transport`` failure caused by a timeout is one (httpx's mid-stream ``ReadTimeout``, which
    the SDKs leave unwrapped). ``detail``: words for the failure, None to use the exception's."""
    for err in exception_chain(exc):
        if isinstance(err, aiohttp.ServerTimeoutError):
            return "timeout", None
        if isinstance(err, aiohttp.ClientConnectorError):
            return "connect", None
        if isinstance(err, aiohttp.ClientPayloadError):
            return "transport", "the connection closed before the response ended"
        if isinstance(err, aiohttp.ClientError):
            return "transport", None
    if kind == "transport" and network_root_cause(exc) == "timed out":
        return "timeout", None
    return kind, None


def _raise_translated(wire: Wire, exc: Exception, *, model: str, midstream: bool) -> NoReturn:
    error = provider_error(wire, exc, model=model, midstream=midstream)
    if error is None or error is exc:
        raise exc
    raise error from exc


class _Finisher:
    """The module's rules over one response: its reader's events, NUL-free, with ``<think>``
    blocks split off, then the finish (or ``stream_interrupted``)."""

    def __init__(self, wire: Wire, request: ChatRequest) -> None:
        self.wire = wire
        self.reader = wire.reader(request)
        self.think = ThinkFilter(prefilled=wire.prefilled_thinking(request)) if wire.think_tags else None
        self.ending: Ending | None = None

    @property
    def ended(self) -> bool:
        return self.ending is not None

    def feed(self, item: Any) -> list[StreamEvent]:
        """The events of one wire item (none once the response ended)."""
        return self._take(self.reader.feed(item))

    def finish(self) -> list[StreamEvent]:
        """The last events: held think text, then the tool calls and :class:`Finish`. Raises
        ``stream_interrupted`` when the response never ended."""
        out = [] if self.ended else self._take(self.reader.end())
        if self.think is not None:
            out.extend(_split(*self.think.finish()))
        ending = self.ending
        if ending is None:
            raise ProviderError("stream_interrupted", self.wire.unfinished, retryable=True)
        if ending.truncated:
            out.append(Finish("length", ending.usage))
            return out
        for call in ending.calls:
            out.append(replace(call, id=storable(call.id), name=storable(call.name),
                               arguments=storable(call.arguments)))
        out.append(Finish("tool_calls" if ending.calls else "stop", ending.usage))
        return out

    def _take(self, events: Iterable[StreamEvent | Ending]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if self.ended:
            return out
        for event in events:
            if isinstance(event, Ending):
                self.ending = event
                break
            if isinstance(event, TextDelta | ReasoningDelta) and NUL in event.text:
                event = type(event)(storable(event.text))
            if self.think is not None and isinstance(event, TextDelta):
                out.extend(_split(*self.think.feed(event.text)))
            else:
                out.append(event)
        return out


def _split(answer: str, hidden: str) -> list[StreamEvent]:
    out: list[StreamEvent] = []
    if hidden:
        out.append(ReasoningDelta(hidden))
    if answer:
        out.append(TextDelta(answer))
    return out


def catalogue_call(wire: Wire, func: Callable[..., T], *args: Any, model: str = "") -> T:
    """``func(*args)`` (a catalogue request: list models, model details) with its SDK and
    transport errors turned into :class:`ProviderError` as for a stream's start."""
    try:
        return func(*args)
    except Exception as exc:
        _raise_translated(wire, exc, model=model, midstream=False)


def _close(client: Any) -> Any:
    """The coroutine closing ``client``: an httpx client's ``aclose``, an SDK client's ``close``."""
    return (getattr(client, "aclose", None) or client.close)()


def _close_clients(clients: dict[int, tuple[asyncio.AbstractEventLoop, Any]]) -> None:
    for loop, client in clients.values():
        if not loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(_close(client), loop)
            except RuntimeError:  # the loop closed meanwhile
                pass


class LoopClients:
    """One async SDK client per event loop, made on first use by ``factory()`` on that loop:
    an aiohttp session (``DefaultAioHttpClient``) belongs to the loop that made it. Clients
    of closed loops are dropped (not closed: their loop can no longer run the close)."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}
        self._lock = threading.Lock()
        # The adapter dropped (a changed key or setting, the cache's eviction): each client is
        # closed on its loop, so no aiohttp session is left to the garbage collector.
        weakref.finalize(self, _close_clients, self._clients)

    def get(self) -> Any:
        """The running loop's client (call on the loop)."""
        loop = asyncio.get_running_loop()
        entry = self._clients.get(id(loop))
        if entry is not None and entry[0] is loop:
            return entry[1]
        with self._lock:
            for key in [k for k, (other, _client) in self._clients.items() if other.is_closed()]:
                del self._clients[key]
            client = self._factory()
            self._clients[id(loop)] = (loop, client)
            return client

    async def aclose(self) -> None:
        """Close and forget the running loop's client, if one was made (before the loop closes)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._clients.pop(id(loop), None)
        if entry is not None and entry[0] is loop:
            await _close(entry[1])
