"""Provider adapters: one module per wire format, and a factory. This package knows no app and
no ORM: a provider is any object with the fields of ``agents.Provider`` (``pk``, ``kind``,
``base_url``, ``default_model``, ``echo_reasoning``, ``options`` …), and its key is given by
the caller (``agents.provider_keys.provider_for`` reads it from the environment or the
encrypted field and checks the row first).

``adapter_for(provider, api_key=…)`` builds (or reuses) the adapter; ``capabilities(provider)`` says what the row's adapter
can do (key rule, model listing and details, request options per prompt tier, cloud);
nothing outside this package branches on ``provider.kind``.

An adapter (``capabilities.CAPABILITIES`` names its class) has:

* ``from_provider(row, *, api_key, max_retries, connect_timeout_s, read_timeout_s)``;
* ``stream(ChatRequest) -> Iterator[StreamEvent]`` — for an HTTP adapter
  ``wire.relay(self, request)``, the adapter implementing the :class:`wire.Wire` protocol
  (``build_body``, ``open``, ``items``, ``reader`` → a :class:`wire.Reader` giving
  text/reasoning/one ``Ending``, ``close``, ``failure(exc)``) and :class:`wire.AsyncWire`
  (``aopen``, ``aitems``, ``aclose``: the same on an event loop, ``wire.arelay``); the error,
  close and finish rules live once in ``wire.py``;
* with ``lists_models``: ``list_models()``; with ``model_details``: ``model_info(name)``
  and ``list_models(skip_details=names)``.
"""

from __future__ import annotations

import hashlib
import os
import threading

from django.conf import settings

from .base import (
    ChatMessage,
    ChatRequest,
    Finish,
    ImageInput,
    ModelInfo,
    ProviderAdapter,
    ProviderError,
    ReasoningDelta,
    StreamedToolCall,
    StreamEvent,
    TextDelta,
    ToolDefinition,
    Usage,
)
from .capabilities import Capabilities, adapter_class, capabilities, takes_images

__all__ = [
    "Capabilities",
    "ChatMessage",
    "ChatRequest",
    "Finish",
    "ImageInput",
    "ModelInfo",
    "ProviderAdapter",
    "ProviderError",
    "ReasoningDelta",
    "StreamEvent",
    "StreamedToolCall",
    "TextDelta",
    "takes_images",
    "ToolDefinition",
    "Usage",
    "capabilities",
    "adapter_for",
]


def _limits(overrides: dict) -> dict:
    """Retries and timeouts from settings, or the caller's (catalogue probes use short ones)."""
    return {
        "max_retries": overrides.get("max_retries", settings.PROVIDER_MAX_RETRIES),
        "connect_timeout_s": overrides.get("connect_timeout_s", settings.PROVIDER_CONNECT_TIMEOUT_S),
        "read_timeout_s": overrides.get("read_timeout_s", settings.PROVIDER_READ_TIMEOUT_S),
    }


def adapter_for(provider, *, api_key: str, **overrides) -> ProviderAdapter:
    """The adapter for ``provider`` (a row with ``agents.Provider``'s fields) with ``api_key``.

    ``overrides``: ``max_retries`` / ``connect_timeout_s`` / ``read_timeout_s`` instead of
    the settings (the catalogue probes with short timeouts).

    Raises ``ProviderError("not_configured", …)`` when the row's kind has no stream adapter
    (``agent_runs`` is served by its backend).
    """
    caps = capabilities(provider)
    if not caps.adapter:  # agent_runs is served by its backend, never by a stream adapter
        raise ProviderError("not_configured", f"provider kind {provider.kind!r} is not available in this version")

    def build() -> ProviderAdapter:
        return adapter_class(caps).from_provider(provider, api_key=api_key, **_limits(overrides))

    if not caps.shares_client:
        return build()
    # Building an SDK client (HTTP pool, TLS context) costs tens of ms of CPU: reuse one per
    # provider configuration. The key includes a digest of the API key, so a changed key or
    # setting builds a new client; SDK clients are safe to share between threads.
    key = (
        provider.pk, provider.kind, provider.base_url, provider.echo_reasoning,
        hashlib.sha256(api_key.encode()).hexdigest(),
        tuple(sorted(_limits(overrides).items())),
        # The TLS trust the client was built with (tls.ssl_context): a new CA bundle, a new client.
        os.environ.get("SSL_CERT_FILE") or os.environ.get("REQUESTS_CA_BUNDLE") or "",
    )
    with _cache_lock:
        adapter = _adapter_cache.get(key)
        if adapter is None:
            if len(_adapter_cache) >= 64:
                _adapter_cache.pop(next(iter(_adapter_cache)))
            adapter = _adapter_cache[key] = build()
        return adapter


_adapter_cache: dict[tuple, ProviderAdapter] = {}
_cache_lock = threading.Lock()
