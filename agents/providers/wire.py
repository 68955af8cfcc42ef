"""The stream, error and finish plumbing every HTTP adapter shares; an adapter only maps its
wire format.

An adapter implements the :class:`Wire` protocol and its ``stream(request)`` is
``return relay(self, request)``; catalogue calls go through :func:`catalogue_call`. The rules that
live here, once:

* **Errors name their root cause** (DESIGN §1). An adapter says what an SDK or transport
  exception *is* (:meth:`Wire.failure` → :class:`Failure`); :func:`provider_error` turns
  that into the one :class:`ProviderError` every adapter reports:

  ===============  ===============================================  ===========================
  failure          before the response started                      while streaming
  ===============  ===============================================  ===========================
  ``timeout``      ``timeout`` "provider timed out (<url>)"         same
  ``connect``      ``unreachable`` "provider unreachable: <root      ``stream_interrupted`` "the
                   cause> to <host:port>"                           provider's stream broke off"
  ``transport``    ``unreachable`` (as above)                       ``stream_interrupted`` "…
                                                                    broke off: <detail>"
  ``status``       :func:`errors.status_error` (401 auth, 404 model, 429 retry-after, 5xx …)
  ``other``        ``upstream_error`` with the exception's text
  ===============  ===============================================  ===========================

  Every message is scrubbed of the API key. A :class:`ProviderError` raised by the adapter
  itself (an error event inside a 200 stream) passes through unchanged.
* **The upstream is always closed**, also when the consumer stops iterating early.
* **Reasoning never reaches the answer**: with ``Wire.think_tags``, text deltas pass a
  :class:`ThinkFilter` (``<think>`` blocks become :class:`ReasoningDelta`).
* **No NUL reaches the platform**: text, reasoning and tool calls pass
  :func:`chatplatform.safe_input.storable` (NUL → U+FFFD; PostgreSQL stores no NUL), so what
  streams is what is stored.
* **A response ends once**: the adapter's reader yields one :class:`Ending` when the wire
  says the response is complete; a stream without one is ``stream_interrupted``
  (retryable). A response cut by the output limit is ``Finish("length")`` and its tool
  calls are dropped (a call cut off mid-arguments is never executed); otherwise the calls
  come out in order, then ``Finish("tool_calls" | "stop", usage)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from chatplatform.safe_input import NUL, storable

from .base import Finish, ProviderError, ReasoningDelta, TextDelta
from .errors import scrub, status_error, unreachable
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

    def read(self, upstream: Any, request: ChatRequest) -> Iterable[StreamEvent | Ending]:
        """Map the wire's events: text, reasoning, then one :class:`Ending`."""
        ...

    def close(self, upstream: Any) -> None: ...

    def failure(self, exc: BaseException) -> Failure | ProviderError | None:
        """What ``exc`` means, or None when it is not an SDK/transport error (re-raised)."""
        ...

    def prefilled_thinking(self, request: ChatRequest) -> bool:
        """Whether the model's template opens the think block itself (only with ``think_tags``)."""
        ...


def provider_error(wire: Wire, exc: BaseException, *, model: str, midstream: bool) -> ProviderError | None:
    """The :class:`ProviderError` for ``exc`` (see the module table), None when ``wire``
    does not recognise it."""
    if isinstance(exc, ProviderError):
        return exc
    failure = wire.failure(exc)
    if failure is None or isinstance(failure, ProviderError):
        return failure
    if failure.kind == "timeout":
        return ProviderError("timeout", f"provider timed out ({wire.base_url})", retryable=True)
    if failure.kind == "connect":
        if midstream:
            return ProviderError("stream_interrupted", "the provider's stream broke off", retryable=True)
        return unreachable(wire.base_url, exc)
    if failure.kind == "transport":
        if midstream:
            detail = scrub(str(exc), wire._api_key) or type(exc).__name__
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
        yield from _finished(wire, wire.read(upstream, request), request)
    except Exception as exc:
        _raise_translated(wire, exc, model=request.model, midstream=True)
    finally:
        wire.close(upstream)


def _raise_translated(wire: Wire, exc: Exception, *, model: str, midstream: bool) -> NoReturn:
    error = provider_error(wire, exc, model=model, midstream=midstream)
    if error is None or error is exc:
        raise exc
    raise error from exc


def _finished(wire: Wire, events: Iterable[StreamEvent | Ending], request: ChatRequest) -> Iterator[StreamEvent]:
    think = ThinkFilter(prefilled=wire.prefilled_thinking(request)) if wire.think_tags else None
    ending: Ending | None = None
    for event in events:
        if isinstance(event, Ending):
            ending = event
            break
        if isinstance(event, TextDelta | ReasoningDelta) and NUL in event.text:
            event = type(event)(storable(event.text))
        if think is not None and isinstance(event, TextDelta):
            yield from _split(*think.feed(event.text))
        else:
            yield event
    if think is not None:
        yield from _split(*think.finish())
    if ending is None:
        raise ProviderError("stream_interrupted", wire.unfinished, retryable=True)
    if ending.truncated:
        yield Finish("length", ending.usage)
        return
    for call in ending.calls:
        yield replace(call, id=storable(call.id), name=storable(call.name), arguments=storable(call.arguments))
    yield Finish("tool_calls" if ending.calls else "stop", ending.usage)


def _split(answer: str, hidden: str) -> Iterator[StreamEvent]:
    if hidden:
        yield ReasoningDelta(hidden)
    if answer:
        yield TextDelta(answer)


def catalogue_call(wire: Wire, func: Callable[..., T], *args: Any, model: str = "") -> T:
    """``func(*args)`` (a catalogue request: list models, model details) with its SDK and
    transport errors turned into :class:`ProviderError` as for a stream's start."""
    try:
        return func(*args)
    except Exception as exc:
        _raise_translated(wire, exc, model=model, midstream=False)
