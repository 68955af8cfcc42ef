"""Reads for the agents app, scoped to the caller."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from chat.selectors import thread_get_for_user

from .models import LLMModel, Provider, Run


def run_get_for_user(*, user, run_id) -> Run:
    """The run if ``user`` may see its thread; Http404 otherwise (also for bad ids)."""
    try:
        run = Run.objects.select_related("thread").get(pk=run_id)
    except Exception as exc:
        raise Http404("No such run.") from exc
    thread_get_for_user(user=user, thread_id=run.thread_id)
    return run


def provider_list() -> QuerySet[Provider]:
    return Provider.objects.filter(enabled=True).order_by("name")


def provider_get(*, slug: str) -> Provider:
    try:
        return Provider.objects.get(slug=slug, enabled=True)
    except Provider.DoesNotExist as exc:
        raise Http404("No such provider.") from exc


def model_list_for_provider(*, provider: Provider) -> QuerySet[LLMModel]:
    return provider.models.filter(enabled=True).order_by("name")
