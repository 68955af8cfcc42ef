"""The model catalogue and provider health: cached on the rows, refreshed on demand.

* :func:`provider_health` — the status shown in the API, pages and the admin, without any
  network call: "ok", "not configured: set ANTHROPIC_API_KEY", or the last probe's result
  ("unreachable: connection refused to 127.0.0.1:11434", "error: invalid API key (HTTP
  401): …"). A provider never probed is "ok" once configured.
* :func:`models_refresh` — the probe: list the provider's models (``/v1/models``,
  ``/api/tags`` + ``/api/show``, Anthropic's ``/v1/models``) with short timeouts, cache the
  listing as LLMModel rows and the outcome as the health status, with a timestamp. Called
  by the admin action "Refresh models and health", ``manage.py providers_refresh``, and
  :func:`refresh_if_stale` (the models endpoint, at most once per
  ``PROVIDER_HEALTH_TTL_S``).
* :func:`model_details_refresh` — one model's parameter size for the prompt tier (adapters
  with ``model_details``: Ollama).

Admin choices on a model row (enabled, prompt tier, echo reasoning, label) are never
overwritten by a refresh; a model gone from the listing keeps its row (threads name it)
with ``listed_at`` cleared.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from llm import ModelInfo, ProviderError
from llm.capabilities import capabilities

from .provider_keys import key_status, provider_for

logger = logging.getLogger(__name__)



def health_ttl_s() -> float:
    return float(getattr(settings, "PROVIDER_HEALTH_TTL_S", 300.0))


def probe_timeout_s() -> float:
    return float(getattr(settings, "PROVIDER_PROBE_TIMEOUT_S", 3.0))


def setup_hint(provider) -> str:
    """What to set for the provider to work ("set ANTHROPIC_API_KEY"), "" when nothing."""
    return key_status(provider) or ""


def lists_models(provider) -> bool:
    """Whether the provider has a model listing (otherwise model names are typed)."""
    return capabilities(provider).lists_models


def provider_health(provider) -> str:
    """The provider's status, from the row only (never a network call)."""
    if not provider.enabled:
        return "disabled"
    missing = key_status(provider)
    if missing:
        return f"not configured: {missing}"
    caps = capabilities(provider)
    if not caps.available:
        return f"not available: provider kind {provider.kind!r} has no adapter in this version"
    if not caps.probed:
        return "ok"
    return provider.health_status or "ok"


def health_is_stale(provider, *, now=None) -> bool:
    if not capabilities(provider).probed:
        return False
    checked = provider.health_checked_at
    return checked is None or ((now or timezone.now()) - checked) > timedelta(seconds=health_ttl_s())


def health_text(exc: ProviderError) -> str:
    """A probe failure as a status line: "unreachable: …", "not configured: …", "error: …"."""
    message = exc.message
    if exc.code in ("unreachable", "timeout"):
        return "unreachable: " + message.removeprefix("provider unreachable: ")
    if exc.code == "not_configured":
        return "not configured: " + message.split("not configured: ", 1)[-1]
    return f"error: {message}"[:300]


@dataclass
class RefreshResult:
    status: str
    listed: list[str] = field(default_factory=list)
    error: ProviderError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == "ok"


def models_refresh(*, provider, details: bool = True, timeout_s: float | None = None) -> RefreshResult:
    """Probe ``provider`` by listing its models; cache the listing and the health status.

    ``details``: with ``model_details`` (Ollama's ``/api/show``), ask about every model
    (context length, tool support); otherwise only about models not listed before. Non-chat
    entries (embeddings, speech) are left out by the adapter. Never raises for provider
    failures: they become the status.
    """
    from agents.models import LLMModel

    now = timezone.now()
    missing = key_status(provider)
    caps = capabilities(provider)
    if caps.probe and not missing and provider.enabled:  # a health probe instead of a model listing
        status = caps.health_probe()(provider, timeout_s=probe_timeout_s() if timeout_s is None else timeout_s)
        _save_health(provider, status, now, listed=status == "ok")
        return RefreshResult(status=status, listed=[provider.default_model] if status == "ok" else [])
    if missing or not caps.lists_models:
        status = provider_health(provider)
        _save_health(provider, status, now, listed=False)
        return RefreshResult(status=status)
    timeout = probe_timeout_s() if timeout_s is None else timeout_s
    try:
        adapter = provider_for(provider, max_retries=0, connect_timeout_s=timeout, read_timeout_s=timeout)
        if caps.model_details:
            # Without ``details``, per-model details are asked only about models not listed before.
            known = () if details else set(
                LLMModel.objects.filter(provider=provider, listed_at__isnull=False).values_list("name", flat=True))
            infos = adapter.list_models(skip_details=known)
        else:
            infos = adapter.list_models()
    except ProviderError as exc:
        status = health_text(exc)
        _save_health(provider, status, now, listed=False)
        logger.info("provider %s: %s", provider.slug, status)
        return RefreshResult(status=status, error=exc)
    infos = [i for i in infos if i.name]
    _store_listing(provider, infos, now)
    _save_health(provider, "ok", now, listed=True)
    return RefreshResult(status="ok", listed=[i.name for i in infos])


def refresh_if_stale(provider) -> str:
    """Probe ``provider`` when its cached status is older than the TTL; return the status.

    Used by the models endpoint: at most one short probe per TTL per provider."""
    if key_status(provider) or not health_is_stale(provider):
        return provider_health(provider)
    return models_refresh(provider=provider, details=False).status


def model_details_refresh(*, provider, name: str):
    """Ask a provider with model details (Ollama's ``/api/show``, short timeout) about one
    model and cache the answer on its LLMModel row; return the row, or None when the
    provider has no details or cannot tell."""
    if not capabilities(provider).model_details or not name:
        return None
    try:
        adapter = provider_for(provider, connect_timeout_s=probe_timeout_s(), read_timeout_s=probe_timeout_s())
        info = adapter.model_info(name)
    except ProviderError as exc:
        logger.info("provider %s: no details for model %r (%s)", provider.slug, name, exc.code)
        return None
    return _upsert_model(provider, info, listed_at=None)


# -- rows ----------------------------------------------------------------------------------
def _save_health(provider, status: str, now, *, listed: bool) -> None:
    from agents.models import Provider

    fields = {"health_status": status[:300], "health_checked_at": now}
    if listed:
        fields["models_refreshed_at"] = now
    Provider.objects.filter(pk=provider.pk).update(**fields)
    for key, value in fields.items():
        setattr(provider, key, value)


def _store_listing(provider, infos: list[ModelInfo], now) -> None:
    from agents.models import LLMModel

    names = {i.name for i in infos}
    for info in infos:
        _upsert_model(provider, info, listed_at=now)
    LLMModel.objects.filter(provider=provider, listed_at__isnull=False).exclude(name__in=names).update(listed_at=None)


def _upsert_model(provider, info: ModelInfo, *, listed_at):
    from agents.models import LLMModel

    updates: dict = {}
    if info.parameter_size:
        updates["parameter_size"] = info.parameter_size[:20]
    if info.context_window:
        updates["context_window"] = info.context_window
    if info.supports_tools is not None:
        updates["supports_tools"] = info.supports_tools
    if listed_at is not None:
        updates["listed_at"] = listed_at
    for attempt in range(2):
        try:
            with transaction.atomic():
                row, created = LLMModel.objects.get_or_create(
                    provider=provider, name=info.name[:200],
                    defaults={**updates, "label": info.label[:200], "supports_images": info.supports_images},
                )
                if not created:
                    if info.label and not row.label:
                        updates["label"] = info.label[:200]
                    # The listing fills it in; once set (by a listing or an administrator) it stays.
                    if info.supports_images is not None and row.supports_images is None:
                        updates["supports_images"] = info.supports_images
                    if updates:
                        LLMModel.objects.filter(pk=row.pk).update(**updates)
                        for key, value in updates.items():
                            setattr(row, key, value)
                return row
        except IntegrityError:  # created concurrently: update it on the second pass
            if attempt:
                raise
    return None
