"""Ollama's native API: ``/api/chat`` (NDJSON streaming, tools, ``options``, ``think``),
the model list from ``/api/tags`` and details from ``/api/show``.

``/api/chat`` goes through ``httpx`` directly (the request body is built here), because the
``ollama`` package re-validates tool schemas through a model that drops nested
``properties``, ``minimum``, ``additionalProperties`` and the like — the model would see a
different schema than the one declared. Listing and details use the ``ollama`` package.

Canonical → wire: the system prompt is the first ``system`` message; an assistant tool-call
turn carries ``tool_calls[].function.arguments`` as an *object* (Ollama rejects a string);
a tool result is ``{"role": "tool", "tool_name": …}`` (Ollama links results by name and
order, not by id). Wire → canonical: tool calls arrive whole; ids are the server's when it
sends one, else minted here (``call_<hex>``) so every provider can replay them.

Options (``ChatRequest.options``, set by the prompt tier for Ollama only): ``num_ctx``,
``num_predict`` go in ``options``; ``think`` is top-level. ``max_output_tokens`` becomes
``num_predict`` when the options do not set it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterator
from typing import Any

import httpx
import httpx_aiohttp
import ollama

from .anthropic import arguments_object
from .base import (
    ChatMessage,
    ChatRequest,
    ModelInfo,
    ProviderError,
    ReasoningDelta,
    StreamedToolCall,
    StreamEvent,
    TextDelta,
    Usage,
)
from .errors import scrub, status_error
from .tls import ssl_context
from .wire import Ending, Failure, LoopClients, catalogue_call, relay

DEFAULT_BASE_URL = "http://127.0.0.1:11434"
#: Keys of ``ChatRequest.options`` that go into Ollama's ``options`` object.
OPTION_KEYS = ("num_ctx", "num_predict", "temperature", "top_p", "top_k", "seed", "repeat_penalty", "stop")


def normalize_base_url(url: str) -> str:
    """Rows may hold the ``/v1`` (OpenAI-compatible) or ``/api`` URL; the native API is at the root."""
    base = (url or DEFAULT_BASE_URL).rstrip("/")
    for suffix in ("/v1", "/api"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


def to_wire_messages(request: ChatRequest, *, echo_reasoning: bool) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    if request.system:
        wire.append({"role": "system", "content": request.system})
    names: dict[str, str] = {}
    for msg in request.messages:
        wire.append(_to_wire(msg, names, echo_reasoning=echo_reasoning))
    return wire


def _to_wire(msg: ChatMessage, names: dict[str, str], *, echo_reasoning: bool) -> dict[str, Any]:
    if msg.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": msg.content}
        if msg.tool_calls:
            out["tool_calls"] = []
            for call in msg.tool_calls:
                names[call["id"]] = call["name"]
                out["tool_calls"].append(
                    {"function": {"name": call["name"], "arguments": arguments_object(call.get("arguments"))}}
                )
            if echo_reasoning and msg.reasoning:
                out["thinking"] = msg.reasoning
        return out
    if msg.role == "tool":
        return {"role": "tool", "content": msg.content, "tool_name": names.get(msg.tool_call_id, "")}
    if msg.images:  # Ollama's /api/chat: base64 images beside the text
        return {"role": msg.role, "content": msg.content, "images": [image.data for image in msg.images]}
    return {"role": msg.role, "content": msg.content}


class LineReader:
    """One response's ``/api/chat`` NDJSON lines → events (:class:`llm.wire.Reader`):
    thinking, content and whole tool calls per line; the ``done`` line ends the response
    (with Ollama's prompt and output counts). A malformed line or an ``error`` line fails it."""

    def __init__(self, api_key: str | None) -> None:
        self._api_key = api_key
        self.calls: list[StreamedToolCall] = []

    def feed(self, line: str) -> list[StreamEvent | Ending]:
        if not line.strip():
            return []
        try:
            part = json.loads(line)
        except ValueError as exc:
            raise ProviderError("stream_interrupted", "the provider sent a malformed stream line",
                                retryable=True) from exc
        if part.get("error"):
            detail = scrub(str(part["error"]), self._api_key)[:300]
            raise ProviderError("upstream_error", f"provider error mid-stream: {detail}", retryable=True)
        out: list[StreamEvent | Ending] = []
        message = part.get("message") or {}
        if message.get("thinking"):
            out.append(ReasoningDelta(message["thinking"]))
        if message.get("content"):
            out.append(TextDelta(message["content"]))
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            args = fn.get("arguments")
            if isinstance(args, str):
                raw = args if args.strip() else "{}"
            else:
                raw = json.dumps(args if args is not None else {}, ensure_ascii=False)
            call_id = call.get("id") or f"call_{uuid.uuid4().hex[:24]}"
            self.calls.append(StreamedToolCall(id=call_id, name=fn.get("name") or "", arguments=raw))
        if part.get("done"):
            # Ollama counts prompt and output tokens only; no cache or reasoning count.
            usage = Usage(input_tokens=part.get("prompt_eval_count"), output_tokens=part.get("eval_count"))
            out.append(Ending(truncated=part.get("done_reason") == "length", calls=self.calls, usage=usage))
        return out

    def end(self) -> list[Ending]:
        return []


class OllamaAdapter:
    """One provider row's client. ``api_key`` (optional: a remote Ollama behind a proxy or
    ollama.com) is sent as a bearer token. The stream, error and finish plumbing is
    :mod:`llm.wire`; this class maps Ollama's native wire format."""

    think_tags = True
    unfinished = "the provider's stream ended before it was done"

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        echo_reasoning: bool = False,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 120.0,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self._api_key = api_key or None
        self.echo_reasoning = echo_reasoning
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self._headers, self._timeout = headers, timeout
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout, verify=ssl_context(), headers=headers)
        self.client = ollama.Client(host=self.base_url, timeout=timeout, verify=ssl_context(), headers=headers)
        self.async_clients = LoopClients(self._async_client)

    @classmethod
    def from_provider(cls, provider, *, api_key: str, max_retries: int = 0, **limits) -> OllamaAdapter:
        """``max_retries`` is ignored: a local server gets no retry loop."""
        return cls(base_url=provider.base_url, api_key=api_key or None, echo_reasoning=provider.echo_reasoning,
                   **limits)

    def build_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body of ``POST /api/chat``."""
        echo = self.echo_reasoning if request.echo_reasoning is None else request.echo_reasoning
        body: dict[str, Any] = {
            "model": request.model,
            "messages": to_wire_messages(request, echo_reasoning=echo),
            "stream": True,
        }
        if request.tools:
            body["tools"] = [
                {"type": "function",
                 "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in request.tools
            ]
        options = {k: request.options[k] for k in OPTION_KEYS if request.options.get(k) is not None}
        if request.max_output_tokens:  # the tier's cap, or a budget's lower one (usage.services.budget_admit)
            options["num_predict"] = min(options.get("num_predict") or request.max_output_tokens,
                                         request.max_output_tokens)
        if options:
            body["options"] = options
        if request.options.get("think") is not None:
            body["think"] = request.options["think"]
        if request.options.get("keep_alive") is not None:
            body["keep_alive"] = request.options["keep_alive"]
        return body

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        return relay(self, request)

    # -- the Wire protocol -------------------------------------------------------------
    def open(self, body: dict[str, Any], request: ChatRequest) -> httpx.Response:
        response = self.http.send(self.http.build_request("POST", "/api/chat", json=body), stream=True)
        if response.status_code >= 400:
            try:
                response.read()
                raise status_error(response.status_code, self._detail(response), model=request.model,
                                   retry_after=response.headers.get("retry-after"))
            finally:
                response.close()
        return response

    def close(self, upstream: httpx.Response) -> None:
        upstream.close()

    def prefilled_thinking(self, request: ChatRequest) -> bool:
        return False

    def items(self, upstream: httpx.Response) -> Iterator[str]:
        return upstream.iter_lines()

    def reader(self, request: ChatRequest) -> LineReader:
        return LineReader(self._api_key)

    # -- the AsyncWire part: the same request on the process's event loop -------------------
    async def aopen(self, body: dict[str, Any], request: ChatRequest) -> httpx.Response:
        """:meth:`open` through an ``httpx.AsyncClient`` on aiohttp (``httpx_aiohttp``: the
        transport the openai SDK uses for ``DefaultAioHttpClient``)."""
        http = self.async_clients.get()
        response = await http.send(http.build_request("POST", "/api/chat", json=body), stream=True)
        if response.status_code >= 400:
            try:
                await response.aread()
                raise status_error(response.status_code, self._detail(response), model=request.model,
                                   retry_after=response.headers.get("retry-after"))
            finally:
                await response.aclose()
        return response

    def aitems(self, upstream: httpx.Response) -> Any:
        return upstream.aiter_lines()

    async def aclose(self, upstream: httpx.Response) -> None:
        await upstream.aclose()

    def _async_client(self) -> httpx.AsyncClient:
        return httpx_aiohttp.HttpxAiohttpClient(base_url=self.base_url, timeout=self._timeout, verify=ssl_context(),
                                                headers=self._headers)

    def failure(self, exc: BaseException) -> Failure | None:
        if isinstance(exc, ollama.ResponseError):
            return Failure("status", exc.status_code if exc.status_code > 0 else 502, str(exc.error)[:300])
        if isinstance(exc, httpx.TimeoutException):
            return Failure("timeout")
        if isinstance(exc, httpx.ConnectError | httpx.UnsupportedProtocol):
            return Failure("connect")
        if isinstance(exc, httpx.HTTPError | ConnectionError):
            # ollama raises a bare ConnectionError "from None"; the httpx error (and the
            # OSError under it) is still on __context__ for the root cause.
            return Failure("transport")
        return None

    def _detail(self, response: httpx.Response) -> str:
        try:
            data = response.json()
            text = data.get("error") if isinstance(data, dict) else None
        except ValueError:
            text = None
        return scrub(str(text or response.text or response.reason_phrase), self._api_key)[:300]

    # -- catalogue ---------------------------------------------------------------------
    def list_models(self, *, skip_details: Collection[str] = ()) -> list[ModelInfo]:
        """``/api/tags``, plus ``/api/show`` (context length, tool support) for every model
        not in ``skip_details``. Embedding-only models are left out: they cannot chat."""
        listing = catalogue_call(self, self.client.list)
        out = []
        for item in listing.models:
            name = item.model or ""
            info = ModelInfo(name=name, parameter_size=(item.details.parameter_size or "") if item.details else "")
            if name not in skip_details:
                try:
                    info, can_chat = self._show(name, listed=info)
                except ProviderError:
                    can_chat = True
                if not can_chat:
                    continue
            out.append(info)
        return out

    def model_info(self, name: str) -> ModelInfo:
        """``/api/show`` for one model: parameter size, context length, tool support."""
        return self._show(name)[0]

    def _show(self, name: str, *, listed: ModelInfo | None = None) -> tuple[ModelInfo, bool]:
        shown = catalogue_call(self, self.client.show, name, model=name)
        details = shown.details
        model_info = dict(shown.modelinfo or {})
        context = next((v for k, v in model_info.items() if k.endswith(".context_length") and isinstance(v, int)), None)
        size = (details.parameter_size if details else "") or (listed.parameter_size if listed else "")
        count = model_info.get("general.parameter_count")
        if not size and isinstance(count, int):
            size = f"{count / 1e9:.1f}B"
        caps = list(shown.capabilities or [])
        info = ModelInfo(name=name, parameter_size=size or "", context_window=context,
                         supports_tools=("tools" in caps) if caps else None,
                         supports_images=("vision" in caps) if caps else None)
        return info, (not caps or "completion" in caps)
