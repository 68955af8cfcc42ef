"""OpenAI Chat Completions (and every compatible server: Ollama /v1, vLLM, DeepSeek,
LM Studio) through the official ``openai`` SDK, streaming with tools.

Wire hardening (shared/cases/openai/): tool-call fragments are keyed by id first and index
second (fragments without ``index``; parallel calls sharing one index), missing or null
arguments become ``"{}"``, usage-only chunks with empty or null ``choices`` are read for
usage, a stream that closes without ``[DONE]`` is fine once a finish reason arrived, and
``<think>`` reasoning or ``reasoning_content`` never reaches the answer channel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai

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
from .capabilities import OPENAI_DEFAULT_BASE_URL
from .errors import sdk_error_detail
from .tls import ssl_context
from .wire import Ending, Failure, LoopClients, catalogue_call, relay

# Models whose chat template opens the think block itself (only "</think>" is streamed).
PREFILLED_THINKING_RE = re.compile(r"(deepseek-r1|\br1\b|qwq|thinking)", re.IGNORECASE)


def arguments_for_replay(arguments: str | None) -> str:
    """The arguments string to send back in history: valid JSON text, ``"{}"`` otherwise.

    A stored call whose arguments never parsed (e.g. two calls glued into ``{..}{..}``)
    must not break every later request of the thread (shared/cases/openai/02, part 2); its
    tool result already tells the model what went wrong.
    """
    if not arguments or not arguments.strip():
        return "{}"
    try:
        json.loads(arguments)
    except ValueError:
        return "{}"
    return arguments


def to_wire_messages(request: ChatRequest, *, echo_reasoning: bool) -> list[dict[str, Any]]:
    """Canonical messages → Chat Completions ``messages`` (system prompt first)."""
    wire: list[dict[str, Any]] = []
    if request.system:
        wire.append({"role": "system", "content": request.system})
    for msg in request.messages:
        wire.append(_to_wire(msg, echo_reasoning=echo_reasoning))
    return wire


def _to_wire(msg: ChatMessage, *, echo_reasoning: bool) -> dict[str, Any]:
    if msg.role == "tool":
        return {"role": "tool", "tool_call_id": msg.tool_call_id, "content": msg.content}
    if msg.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": msg.content or None}
        if msg.tool_calls:
            out["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": arguments_for_replay(call.get("arguments"))},
                }
                for call in msg.tool_calls
            ]
            if echo_reasoning and msg.reasoning:
                out["reasoning_content"] = msg.reasoning
        return out
    if msg.images:
        # Chat Completions content parts: the text, then each image as a data URL.
        parts: list[dict[str, Any]] = [{"type": "text", "text": msg.content}] if msg.content.strip() else []
        parts += [{"type": "image_url", "image_url": {"url": image.data_url}} for image in msg.images]
        return {"role": msg.role, "content": parts}
    return {"role": msg.role, "content": msg.content}


def usage_from_wire(raw: dict[str, Any]) -> Usage:
    """A Chat Completions ``usage`` object (the final chunk with ``include_usage``) →
    :class:`Usage`; ``prompt_tokens_details.cached_tokens`` and
    ``completion_tokens_details.reasoning_tokens`` when the server sends them."""
    prompt_details = raw.get("prompt_tokens_details") or {}
    completion_details = raw.get("completion_tokens_details") or {}
    return Usage(
        input_tokens=raw.get("prompt_tokens"),
        output_tokens=raw.get("completion_tokens"),
        cached_tokens=prompt_details.get("cached_tokens"),
        reasoning_tokens=completion_details.get("reasoning_tokens"),
    )


class ToolCallAssembler:
    """Assemble streamed tool-call fragments into whole calls.

    Keying rule: a fragment with a new non-empty id starts a new call (even on an index
    already in use — parallel calls sharing index 0); a fragment without id continues the
    call with its index, or the latest call when it has no index.
    """

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._by_index: dict[int, dict[str, Any]] = {}

    def add(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index")
        call_id = fragment.get("id") or ""
        function = fragment.get("function") or {}
        current = self._by_index.get(index) if index is not None else (self.calls[-1] if self.calls else None)
        if current is None or (call_id and current["id"] and call_id != current["id"]):
            current = {"id": call_id, "name": "", "arguments": ""}
            self.calls.append(current)
            if index is not None:
                self._by_index[index] = current
        elif call_id and not current["id"]:
            current["id"] = call_id
        if function.get("name"):
            # Some servers resend the name on every fragment; others split it.
            if not current["name"] or not current["name"].endswith(function["name"]):
                current["name"] += function["name"]
        if function.get("arguments"):
            current["arguments"] += function["arguments"]

    def finished(self) -> list[StreamedToolCall]:
        done = []
        for n, call in enumerate(self.calls):
            call_id = call["id"] or f"call_{n}"
            args = call["arguments"] if call["arguments"].strip() else "{}"
            done.append(StreamedToolCall(id=call_id, name=call["name"], arguments=args))
        return done


class ChunkReader:
    """One response's Chat Completions chunks → events (:class:`llm.wire.Reader`):
    text and reasoning as they come; tool-call fragments, usage and the finish reason kept
    until the stream ends (usage may follow the finish reason in a chunk of its own)."""

    def __init__(self) -> None:
        self.calls = ToolCallAssembler()
        self.usage: Usage | None = None
        self.finish_reason: str | None = None

    def feed(self, data: Any) -> list[StreamEvent]:
        if not isinstance(data, dict):
            raise ProviderError("upstream_error", f"the provider sent a chunk that is not a JSON object: "
                                                  f"{str(data)[:200]!r}")
        if data.get("usage"):
            self.usage = usage_from_wire(data["usage"])
        out: list[StreamEvent] = []
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                out.append(ReasoningDelta(reasoning))
            if delta.get("content"):
                out.append(TextDelta(delta["content"]))
            for fragment in delta.get("tool_calls") or []:
                self.calls.add(fragment)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return out

    def end(self) -> list[Ending]:
        if self.finish_reason is None:
            return []
        return [Ending(truncated=self.finish_reason == "length", calls=self.calls.finished(), usage=self.usage)]


# Entries of a /v1/models listing that cannot chat.
NOT_CHAT_RE = re.compile(r"(embed|whisper|tts|dall-e|moderation|davinci|babbage|transcribe|realtime|-audio|image)",
                         re.IGNORECASE)


class OpenAICompatAdapter:
    """One provider row's client. ``api_key`` is read when the adapter is built. The
    stream, error and finish plumbing is :mod:`llm.wire`; this class maps the
    Chat Completions wire format."""

    think_tags = True
    unfinished = "the provider's stream ended without a finish reason"

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        echo_reasoning: bool = False,
        max_retries: int = 2,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 120.0,
        send_usage_option: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.echo_reasoning = echo_reasoning
        self.send_usage_option = send_usage_option
        self._max_retries = max_retries
        self._timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self.client = openai.OpenAI(
            base_url=self.base_url,
            # Local servers (Ollama, vLLM) need no key; the SDK insists on a non-empty one.
            api_key=api_key or "not-needed",
            max_retries=max_retries,
            timeout=self._timeout,
            http_client=openai.DefaultHttpxClient(verify=ssl_context()),
        )
        self.async_clients = LoopClients(self._async_client)

    @classmethod
    def from_provider(cls, provider, *, api_key: str, **limits) -> OpenAICompatAdapter:
        return cls(base_url=provider.base_url or OPENAI_DEFAULT_BASE_URL, api_key=api_key or None,
                   echo_reasoning=provider.echo_reasoning, **limits)

    def build_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body sent to ``/chat/completions`` (minus ``stream``)."""
        echo = self.echo_reasoning if request.echo_reasoning is None else request.echo_reasoning
        body: dict[str, Any] = {
            "model": request.model,
            "messages": to_wire_messages(request, echo_reasoning=echo),
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
        if request.max_output_tokens:
            body["max_tokens"] = request.max_output_tokens
        if self.send_usage_option:
            body["stream_options"] = {"include_usage": True}
        return body

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        return relay(self, request)

    # -- the Wire protocol -------------------------------------------------------------
    def open(self, body: dict[str, Any], request: ChatRequest) -> Any:
        """The SDK's request — auth, retries, status errors, SSE decoding, ``error`` events
        raised as ``APIError`` — with each chunk left as the JSON object it is
        (``cast_to=object``, the SDK's documented raw request): building a pydantic chunk per
        token only to turn it back into a dict would be a large share of a worker's CPU while
        it streams."""
        return self.client.post("/chat/completions", body={**body, "stream": True}, cast_to=object,
                                options={"security": {"bearer_auth": True}}, stream=True,
                                stream_cls=openai.Stream[object])

    def close(self, upstream: Any) -> None:
        upstream.close()

    def prefilled_thinking(self, request: ChatRequest) -> bool:
        return bool(PREFILLED_THINKING_RE.search(request.model))

    def items(self, upstream: Any) -> Any:
        return upstream

    def reader(self, request: ChatRequest) -> ChunkReader:
        return ChunkReader()

    # -- the AsyncWire part: the same request on the process's event loop -------------------
    async def aopen(self, body: dict[str, Any], request: ChatRequest) -> Any:
        """:meth:`open` through ``openai.AsyncOpenAI`` on the SDK's aiohttp transport
        (``openai[aiohttp]``): a token costs 54 µs of CPU to read there against 118 through
        the sync client's httpx (bench/stream_read.py, 50 streams × 50 tokens/s)."""
        return await self.async_clients.get().post(
            "/chat/completions", body={**body, "stream": True}, cast_to=object,
            options={"security": {"bearer_auth": True}}, stream=True, stream_cls=openai.AsyncStream[object])

    def aitems(self, upstream: Any) -> Any:
        return upstream

    async def aclose(self, upstream: Any) -> None:
        await upstream.close()

    def _async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self._api_key or "not-needed",
                                  max_retries=self._max_retries, timeout=self._timeout,
                                  http_client=openai.DefaultAioHttpClient(verify=ssl_context(), timeout=self._timeout))

    def failure(self, exc: BaseException) -> Failure | None:
        if isinstance(exc, openai.APITimeoutError):
            return Failure("timeout")
        if isinstance(exc, openai.APIConnectionError):
            return Failure("connect")
        if isinstance(exc, openai.APIStatusError):
            return Failure("status", exc.status_code, sdk_error_detail(exc), exc.response.headers.get("retry-after"))
        if isinstance(exc, openai.APIError):
            return Failure("other")
        if isinstance(exc, httpx.HTTPError):
            return Failure("transport")
        return None

    # -- catalogue ---------------------------------------------------------------------
    def list_models(self) -> list[ModelInfo]:
        """``GET /models`` (the catalogue's cached listing), without entries that cannot chat
        (embeddings, speech, images, moderation)."""
        listed = catalogue_call(self, lambda: list(self.client.models.list()))
        return [ModelInfo(name=m.id) for m in listed if m.id and not NOT_CHAT_RE.search(m.id)]
