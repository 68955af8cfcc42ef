"""Provider adapters: one module per wire format, a factory from the Provider row.

``provider_for(provider_row)`` builds an adapter with the row's key (read now, from the
environment or the encrypted field) and raises :class:`ProviderError` ``not_configured``
when a required key is missing.
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
from .keys import key_status, provider_api_key

__all__ = [
    "ChatMessage",
    "ChatRequest",
    "Finish",
    "ModelInfo",
    "ProviderAdapter",
    "ProviderError",
    "ReasoningDelta",
    "StreamEvent",
    "StreamedToolCall",
    "TextDelta",
    "ToolDefinition",
    "Usage",
    "provider_for",
]


def _limits(overrides: dict) -> dict:
    """Retries and timeouts from settings, or the caller's (catalogue probes use short ones)."""
    return {
        "max_retries": overrides.get("max_retries", settings.PROVIDER_MAX_RETRIES),
        "connect_timeout_s": overrides.get("connect_timeout_s", settings.PROVIDER_CONNECT_TIMEOUT_S),
        "read_timeout_s": overrides.get("read_timeout_s", settings.PROVIDER_READ_TIMEOUT_S),
    }


def _openai_compatible(provider, **overrides) -> ProviderAdapter:
    from .openai_compat import OpenAICompatAdapter

    return OpenAICompatAdapter(
        base_url=provider.base_url or "https://api.openai.com/v1",
        api_key=provider_api_key(provider) or None,
        echo_reasoning=provider.echo_reasoning,
        **_limits(overrides),
    )


def _anthropic(provider, **overrides) -> ProviderAdapter:
    from .anthropic import DEFAULT_BASE_URL, AnthropicAdapter

    return AnthropicAdapter(
        base_url=provider.base_url or DEFAULT_BASE_URL,
        api_key=provider_api_key(provider),
        **_limits(overrides),
    )


def _ollama(provider, **overrides) -> ProviderAdapter:
    from .ollama import OllamaAdapter

    limits = _limits(overrides)
    limits.pop("max_retries")  # a local server: no SDK retry loop
    return OllamaAdapter(
        base_url=provider.base_url,
        api_key=provider_api_key(provider) or None,
        echo_reasoning=provider.echo_reasoning,
        **limits,
    )


def _offline(provider, **overrides) -> ProviderAdapter:
    from .offline import OfflineAdapter

    return OfflineAdapter(delta_delay_s=settings.OFFLINE_DELTA_DELAY_S)


ADAPTERS = {
    "openai_compatible": _openai_compatible,
    "anthropic": _anthropic,
    "ollama": _ollama,
    "offline": _offline,
}


def provider_for(provider, **overrides) -> ProviderAdapter:
    """Build the adapter for an ``agents.Provider`` row.

    ``overrides``: ``max_retries`` / ``connect_timeout_s`` / ``read_timeout_s`` instead of
    the settings (the catalogue probes with short timeouts).

    Raises ``ProviderError("not_configured", …)`` when the row is disabled, its kind has no
    adapter here, or its key is missing ("not configured: set OPENAI_API_KEY").
    """
    if provider is None:
        raise ProviderError("not_configured", "no provider selected for this thread")
    if not provider.enabled:
        raise ProviderError("not_configured", f"provider {provider.slug!r} is disabled")
    missing = key_status(provider)
    if missing:
        raise ProviderError("not_configured", f"provider {provider.slug!r} is not configured: {missing}")
    factory = ADAPTERS.get(provider.kind)
    if factory is None:
        raise ProviderError("not_configured", f"provider kind {provider.kind!r} is not available in this version")
    if provider.kind == "offline":
        return factory(provider, **overrides)
    # Building an SDK client (HTTP pool, TLS context) costs tens of ms of CPU: reuse one per
    # provider configuration. The key includes a digest of the API key, so a changed key or
    # setting builds a new client; SDK clients are safe to share between threads.
    key = (
        provider.pk, provider.kind, provider.base_url, provider.echo_reasoning,
        hashlib.sha256(provider_api_key(provider).encode()).hexdigest(),
        tuple(sorted(_limits(overrides).items())),
        # The TLS trust the client was built with (tls.ssl_context): a new CA bundle, a new client.
        os.environ.get("SSL_CERT_FILE") or os.environ.get("REQUESTS_CA_BUNDLE") or "",
    )
    with _cache_lock:
        adapter = _adapter_cache.get(key)
        if adapter is None:
            if len(_adapter_cache) >= 64:
                _adapter_cache.pop(next(iter(_adapter_cache)))
            adapter = _adapter_cache[key] = factory(provider, **overrides)
        return adapter


_adapter_cache: dict[tuple, ProviderAdapter] = {}
_cache_lock = threading.Lock()
