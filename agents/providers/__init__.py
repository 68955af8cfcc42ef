"""Provider adapters: one module per wire format, a factory from the Provider row.

``provider_for(provider_row)`` builds an adapter with the row's key (read now, from the
environment or the encrypted field) and raises :class:`ProviderError` ``not_configured``
when a required key is missing.
"""

from __future__ import annotations

from django.conf import settings

from .base import (
    ChatMessage,
    ChatRequest,
    Finish,
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


def _openai_compatible(provider) -> ProviderAdapter:
    from .openai_compat import OpenAICompatAdapter

    return OpenAICompatAdapter(
        base_url=provider.base_url or "https://api.openai.com/v1",
        api_key=provider_api_key(provider) or None,
        echo_reasoning=provider.echo_reasoning,
        max_retries=settings.PROVIDER_MAX_RETRIES,
        connect_timeout_s=settings.PROVIDER_CONNECT_TIMEOUT_S,
        read_timeout_s=settings.PROVIDER_READ_TIMEOUT_S,
    )


def _ollama_v1(provider) -> ProviderAdapter:
    # Until the native /api/chat adapter lands, Ollama is served through its /v1 endpoint.
    from .openai_compat import OpenAICompatAdapter

    base = (provider.base_url or "http://127.0.0.1:11434").rstrip("/")
    return OpenAICompatAdapter(
        base_url=base if base.endswith("/v1") else base + "/v1",
        api_key=None,
        max_retries=settings.PROVIDER_MAX_RETRIES,
        connect_timeout_s=settings.PROVIDER_CONNECT_TIMEOUT_S,
        read_timeout_s=settings.PROVIDER_READ_TIMEOUT_S,
    )


def _offline(provider) -> ProviderAdapter:
    from .offline import OfflineAdapter

    return OfflineAdapter(delta_delay_s=settings.OFFLINE_DELTA_DELAY_S)


ADAPTERS = {
    "openai_compatible": _openai_compatible,
    "ollama": _ollama_v1,
    "offline": _offline,
}


def provider_for(provider) -> ProviderAdapter:
    """Build the adapter for an ``agents.Provider`` row.

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
    return factory(provider)
