"""Web UI pages. They call the same selectors and services as the API."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from agents.api import provider_health
from agents.event_types import vocabulary
from agents.risk import env_tier
from agents.selectors import provider_list
from chat.models import Membership

from .selectors import thread_get_for_user, thread_list_for_user, workspace_get_for_user
from .services import thread_create


def _rail_context(request, *, search: str = "") -> dict:
    providers = list(provider_list())
    memberships = Membership.objects.filter(user=request.user).select_related("workspace", "role")
    return {
        "threads": thread_list_for_user(user=request.user, search=search)[:100],
        "search": search,
        "memberships": memberships,
        "providers": [{"row": p, "status": provider_health(p)} for p in providers],
    }


@login_required
def index(request):
    return render(request, "chat/app.html", _rail_context(request, search=request.GET.get("q", "").strip()))


@login_required
@require_POST
def thread_new(request):
    try:
        workspace = workspace_get_for_user(user=request.user, workspace=request.POST.get("workspace", ""))
    except Http404:
        return redirect("chat:index")
    provider = next((p for p in provider_list() if p.slug == request.POST.get("provider")), None)
    thread = thread_create(
        workspace=workspace, owner=request.user, provider=provider, model=request.POST.get("model", "").strip()[:200]
    )
    return redirect("chat:thread", thread_id=thread.pk)


@login_required
def thread_page(request, thread_id):
    thread = thread_get_for_user(user=request.user, thread_id=thread_id)
    context = _rail_context(request)
    context.update({
        "thread": thread,
        "can_write": thread.owner_id == request.user.pk,
        "is_prod": env_tier((thread.ui_context or {}).get("envId")) == "prod",
        "event_vocabulary": vocabulary(),
    })
    return render(request, "chat/app.html", context)
