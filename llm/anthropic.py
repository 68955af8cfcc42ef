"""Anthropic Messages API through the official ``anthropic`` SDK, streaming with tools.

Canonical → wire (``to_wire_messages``):

* the system prompt goes in the ``system`` field, never as a message;
* an assistant message becomes one ``assistant`` turn ``[text?, tool_use…]`` in that order
  (shared/cases/anthropic/01 variant); empty or whitespace-only text is never replayed
  (the API returns such blocks but rejects them in history, cases/anthropic/01);
* tool results become ``tool_result`` blocks in the ``user`` turn right after their
  ``tool_use`` (consecutive results merged into one turn, before any text), with
  ``is_error`` kept;
* turns alternate and the first one is ``user`` (a short placeholder opens a history window
  that starts with an assistant turn);
* ids and names from other providers are made valid (``^[a-zA-Z0-9_-]+$``) and unique, the
  same way for a ``tool_use`` and its ``tool_result``; arguments that never parsed are
  replayed as ``{}`` (their error result already told the model).

Wire → canonical (``_read``): ``text_delta`` → text, ``thinking_delta`` → hidden reasoning,
``input_json_delta`` fragments joined per block (malformed JSON is passed on raw, so the
loop answers with an actionable error instead of crashing, cases/anthropic/02),
``stop_reason`` ``tool_use`` → calls in block order, ``max_tokens`` → ``Finish("length")``
with no call executed (a call cut off mid-input is never run).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import httpx2

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
from .errors import scrub, sdk_error_detail
from .tls import ssl_context
from .wire import Ending, Failure, LoopClients, catalogue_call, relay

DEFAULT_BASE_URL = "https://api.anthropic.com"
# Anthropic requires max_tokens; used when the tier sets no limit (the small tier sets 4096).
DEFAULT_MAX_TOKENS = 8192
HISTORY_OPENER = "(Earlier messages of this conversation are omitted.)"
EMPTY_RESULT = "(no output)"
_VALID_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


def arguments_object(arguments: str | None) -> dict:
    """Stored arguments text → the ``input`` object of a replayed ``tool_use`` (``{}`` when
    empty, invalid or not an object)."""
    if not arguments or not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def wire_name(name: str) -> str:
    if _VALID_NAME.match(name or ""):
        return name
    cleaned = re.sub(r"[^a-zA-Z0-9_-]", "_", name or "")[:128]
    return cleaned or "unknown_tool"


def _clean_id(call_id: str) -> str:
    if _VALID_ID.match(call_id or ""):
        return call_id
    digest = hashlib.sha1((call_id or "").encode()).hexdigest()[:8]
    return (re.sub(r"[^a-zA-Z0-9_-]", "_", call_id or "")[:48] or "call") + "_" + digest


def to_wire_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Canonical messages (already repaired: every call answered) → Messages API turns."""
    out: list[dict[str, Any]] = []
    used_ids: set[str] = set()
    current: dict[str, str] = {}  # canonical id → wire id, for the latest assistant turn

    def append(role: str, blocks: list[dict]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            merged = out[-1]["content"] + blocks
            # tool_result blocks first, then the rest (the API's rule for user turns).
            merged.sort(key=lambda b: 0 if b["type"] == "tool_result" else 1)
            out[-1]["content"] = merged
        else:
            out.append({"role": role, "content": blocks})

    for msg in messages:
        if msg.role == "user":
            # Images first, then the text (Anthropic's advice for image questions).
            blocks = [{"type": "image", "source": {"type": "base64", "media_type": image.media_type,
                                                   "data": image.data}} for image in msg.images]
            if msg.content.strip():
                blocks.append({"type": "text", "text": msg.content})
            append("user", blocks)
        elif msg.role == "assistant":
            blocks: list[dict] = []
            if msg.content.strip():
                blocks.append({"type": "text", "text": msg.content})
            current = {}
            for call in msg.tool_calls:
                wire_id = _clean_id(call["id"])
                n = 2
                while wire_id in used_ids:  # ids must be unique across the conversation
                    wire_id = f"{_clean_id(call['id'])}_{n}"
                    n += 1
                used_ids.add(wire_id)
                current[call["id"]] = wire_id
                blocks.append({"type": "tool_use", "id": wire_id, "name": wire_name(call["name"]),
                               "input": arguments_object(call.get("arguments"))})
            append("assistant", blocks)
        elif msg.role == "tool":
            wire_id = current.get(msg.tool_call_id)
            if wire_id is None:
                continue  # repair_history never lets this happen; never send an orphan
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": wire_id,
                                     "content": msg.content if msg.content.strip() else EMPTY_RESULT}
            if msg.is_error:
                block["is_error"] = True
            append("user", [block])
    if not out or out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": HISTORY_OPENER}]})
    last = out[-1]
    if last["role"] == "assistant":  # a final assistant turn is a prefill: no trailing space
        for block in last["content"]:
            if block["type"] == "text":
                block["text"] = block["text"].rstrip()
    return out


def tool_schema(parameters: dict | None) -> dict:
    schema = dict(parameters or {})
    schema.setdefault("type", "object")
    if schema["type"] == "object":
        schema.setdefault("properties", {})
    return schema


class AnthropicAdapter:
    """One provider row's client. ``api_key`` is read when the adapter is built. The
    stream, error and finish plumbing is :mod:`llm.wire`; this class maps the
    Messages API wire format."""

    think_tags = False  # thinking arrives in its own blocks
    unfinished = "the provider's stream ended without a stop reason"

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        max_retries: int = 2,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 120.0,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        if base.endswith("/v1"):  # the SDK adds /v1 itself
            base = base[:-3]
        self.base_url = base
        self._api_key = api_key
        self.default_max_tokens = default_max_tokens
        self._max_retries = max_retries
        self._timeout = anthropic.Timeout(read_timeout_s, connect=connect_timeout_s)
        self.client = anthropic.Anthropic(
            api_key=api_key,
            base_url=base,
            max_retries=max_retries,
            timeout=self._timeout,
            http_client=anthropic.DefaultHttpxClient(verify=ssl_context()),
        )
        self.async_clients = LoopClients(self._async_client)

    @classmethod
    def from_provider(cls, provider, *, api_key: str, **limits) -> AnthropicAdapter:
        return cls(base_url=provider.base_url or DEFAULT_BASE_URL, api_key=api_key, **limits)

    def build_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body sent to ``/v1/messages`` (minus ``stream``). Provider options of
        other providers (Ollama's ``num_ctx``, ``think``) are never read here."""
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens or self.default_max_tokens,
            "messages": to_wire_messages(request.messages),
        }
        if request.system.strip():
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {"name": wire_name(t.name), "description": t.description or t.name, "input_schema": tool_schema(t.parameters)}
                for t in request.tools
            ]
        return body

    def stream(self, request: ChatRequest) -> Iterator[StreamEvent]:
        return relay(self, request)

    # -- the Wire protocol -------------------------------------------------------------
    def open(self, body: dict[str, Any], request: ChatRequest) -> Any:
        return self.client.messages.create(stream=True, **body)

    def close(self, upstream: Any) -> None:
        upstream.close()

    def prefilled_thinking(self, request: ChatRequest) -> bool:
        return False

    def items(self, upstream: Any) -> Any:
        return upstream

    def reader(self, request: ChatRequest) -> EventReader:
        return EventReader()

    # -- the AsyncWire part: the same request on the process's event loop -------------------
    async def aopen(self, body: dict[str, Any], request: ChatRequest) -> Any:
        """:meth:`open` through ``anthropic.AsyncAnthropic`` on the SDK's aiohttp transport
        (``anthropic[aiohttp]``)."""
        return await self.async_clients.get().messages.create(stream=True, **body)

    def aitems(self, upstream: Any) -> Any:
        return upstream

    async def aclose(self, upstream: Any) -> None:
        await upstream.close()

    def _async_client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(api_key=self._api_key, base_url=self.base_url, max_retries=self._max_retries,
                                        timeout=self._timeout,
                                        http_client=anthropic.DefaultAioHttpClient(verify=ssl_context(),
                                                                                   timeout=self._timeout))

    def failure(self, exc: BaseException) -> Failure | ProviderError | None:
        if isinstance(exc, anthropic.APITimeoutError):
            return Failure("timeout")
        if isinstance(exc, anthropic.APIConnectionError):
            return Failure("connect")
        if isinstance(exc, anthropic.APIStatusError):
            if exc.status_code < 400:  # an "error" event inside a 200 stream
                return _error_event(exc, scrub(sdk_error_detail(exc), self._api_key))
            return Failure("status", exc.status_code, sdk_error_detail(exc), exc.response.headers.get("retry-after"))
        if isinstance(exc, anthropic.APIError):
            return Failure("other")
        if isinstance(exc, httpx2.HTTPError | httpx.HTTPError):
            return Failure("transport")
        return None

    # -- catalogue ---------------------------------------------------------------------
    def list_models(self) -> list[ModelInfo]:
        """``GET /v1/models`` (all pages)."""
        listed = catalogue_call(self, lambda: list(self.client.models.list(limit=100)))
        return [ModelInfo(name=m.id, label=getattr(m, "display_name", "") or "", supports_tools=True) for m in listed]


class EventReader:
    """One response's Messages API events → events (:class:`llm.wire.Reader`):
    text and thinking as they come; ``tool_use`` blocks assembled from their JSON fragments;
    usage from ``message_start`` and ``message_delta``; the stop reason ends the response."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.usage = Usage()
        self.stop_reason: str | None = None

    def feed(self, event: Any) -> list[StreamEvent]:
        data = event.to_dict() if hasattr(event, "to_dict") else dict(event)
        kind = data.get("type")
        out: list[StreamEvent] = []
        if kind == "message_start":
            _read_usage(self.usage, (data.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start":
            block = dict(data.get("content_block") or {})
            self.blocks[data.get("index", len(self.blocks))] = block
            if block.get("type") == "text" and block.get("text"):
                out.append(TextDelta(block["text"]))
            elif block.get("type") == "thinking" and block.get("thinking"):
                out.append(ReasoningDelta(block["thinking"]))
            elif block.get("type") == "tool_use":
                block["partial"] = []
        elif kind == "content_block_delta":
            delta = data.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta" and delta.get("text"):
                out.append(TextDelta(delta["text"]))
            elif dtype == "thinking_delta" and delta.get("thinking"):
                out.append(ReasoningDelta(delta["thinking"]))
            elif dtype == "input_json_delta":
                block = self.blocks.get(data.get("index"))
                if block is not None and block.get("type") == "tool_use":
                    block["partial"].append(delta.get("partial_json") or "")
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop_reason = delta["stop_reason"]
            _read_usage(self.usage, data.get("usage") or {})
        return out

    def end(self) -> list[Ending]:
        if self.stop_reason is None:
            return []
        # A tool_use cut off by the token limit (max_tokens) has partial input: dropped.
        return [Ending(truncated=self.stop_reason == "max_tokens", calls=_tool_calls(self.blocks), usage=self.usage)]


def _read_usage(usage: Usage, raw: dict[str, Any]) -> None:
    """Fold a ``usage`` object (``message_start``, then cumulative counts in
    ``message_delta``) into ``usage``. Input tokens include the cache reads and writes;
    ``cached_tokens`` are the cache reads. The Messages API reports no reasoning count."""
    parts = [raw.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    if any(p is not None for p in parts):
        usage.input_tokens = sum(p or 0 for p in parts)
    if raw.get("cache_read_input_tokens") is not None:
        usage.cached_tokens = raw["cache_read_input_tokens"]
    if raw.get("output_tokens") is not None:
        usage.output_tokens = raw["output_tokens"]


def _tool_calls(blocks: dict[int, dict[str, Any]]) -> list[StreamedToolCall]:
    """The ``tool_use`` blocks of a response as calls, in block order."""
    calls = []
    for index in sorted(blocks):
        block = blocks[index]
        if block.get("type") != "tool_use":
            continue
        raw_args = "".join(block.get("partial") or [])
        if not raw_args.strip():
            raw_args = json.dumps(block["input"]) if block.get("input") else "{}"
        calls.append(StreamedToolCall(id=block.get("id") or f"toolu_{index}", name=block.get("name") or "",
                                      arguments=raw_args))
    return calls


def _error_event(exc: anthropic.APIStatusError, detail: str) -> ProviderError:
    """An ``event: error`` inside a 200 stream (overloaded, api_error …)."""
    err_type = _error_type(exc)
    if err_type == "overloaded_error":
        return ProviderError("upstream_error", f"provider overloaded mid-stream: {detail}", retryable=True)
    return ProviderError("stream_interrupted", f"provider error mid-stream ({err_type or 'error'}): {detail}",
                         retryable=True)


def _error_type(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("type"), str):
            return err["type"]
    return ""
