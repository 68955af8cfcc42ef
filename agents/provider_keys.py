"""Provider API keys — from the environment variable named on the row, or the admin-entered key
stored Fernet-encrypted — and :func:`provider_for`, the adapter for a row with its key. Keys
are read when a client is built; never logged or returned."""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from chatplatform.redaction import remember
from llm import ProviderAdapter, ProviderError, adapter_for
from llm.capabilities import KEY_OPTIONAL, KEY_REQUIRED, capabilities


def _fernet() -> Fernet:
    material = settings.FIELD_ENCRYPTION_KEY or settings.SECRET_KEY
    key = base64.urlsafe_b64encode(hashlib.sha256(f"provider-keys:{material}".encode()).digest())
    return Fernet(key)


def encrypt_key(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode() if plaintext else ""


def decrypt_key(token: str) -> str:
    """The stored key, or "" when there is none or it was encrypted under another secret."""
    if not token:
        return ""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        return ""


def provider_api_key(provider) -> str:
    """The key for ``provider`` (an ``agents.Provider``): env var first, then the stored one."""
    value = os.environ.get(provider.api_key_env, "") if provider.api_key_env else ""
    value = value or decrypt_key(provider.api_key_encrypted)
    remember(value)  # from now on redacted wherever it shows up (errors, events, logs)
    return value


def key_status(provider) -> str | None:
    """``None`` when usable, else what to set ("set ANTHROPIC_API_KEY"), by the adapter's key
    rule (``capabilities.KEY_*``): an optional key is never missing; a named env var must
    be set; a required key must be set somewhere."""

    rule = capabilities(provider).key
    if rule == KEY_OPTIONAL or provider_api_key(provider):
        return None
    if provider.api_key_env:
        return f"set {provider.api_key_env}"
    if rule == KEY_REQUIRED:
        return "enter an API key in the admin"
    return None  # an OpenAI-compatible local server may need no key


def warn_unconfigured_providers() -> list[str]:
    """At a worker's start: one warning per enabled provider whose key this process cannot
    find (:func:`key_status`) — its runs would each fail ``not_configured``, and nothing else
    says so until a person sends a message (a worker started without the provider's key
    variable looks healthy otherwise). Returns the warnings; a database that cannot be read is logged
    at debug level and skipped."""
    import logging

    from agents.models import Provider

    logger = logging.getLogger(__name__)
    try:
        providers = list(Provider.objects.filter(enabled=True).order_by("slug"))
        warnings = [f"provider {p.slug!r} is enabled but not configured in this process: {missing}; its runs "
                    "here will fail not_configured" for p in providers if (missing := key_status(p))]
    except Exception:  # noqa: BLE001 - a start-up hint only
        logger.debug("could not check the providers' keys", exc_info=True)
        return []
    for warning in warnings:
        logger.warning(warning)
    return warnings


def provider_for(provider, **overrides) -> ProviderAdapter:
    """Build the adapter for an ``agents.Provider`` row with its key (``llm.adapter_for``).

    ``overrides``: ``max_retries`` / ``connect_timeout_s`` / ``read_timeout_s`` instead of
    the settings (the catalogue probes with short timeouts).

    Raises ``ProviderError("not_configured", …)`` when the row is missing or disabled, its kind
    has no adapter here, or its key is missing ("not configured: set OPENAI_API_KEY").
    """
    if provider is None:
        raise ProviderError("not_configured", "no provider selected for this thread")
    if not provider.enabled:
        raise ProviderError("not_configured", f"provider {provider.slug!r} is disabled")
    missing = key_status(provider)
    if missing:
        raise ProviderError("not_configured", f"provider {provider.slug!r} is not configured: {missing}")
    return adapter_for(provider, api_key=provider_api_key(provider), **overrides)
