"""Knowledge pages (``/knowledge/``): list and search, item view, create, edit, delete, "Ask
about this", and the live feed the pages follow. They call the same selectors and services
as the REST API; content is rendered by ``chat.rendering.render_markdown`` (markdown-it +
nh3), so item text can never inject markup.
"""

from __future__ import annotations

import asyncio
import json

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from chat.rendering import render_markdown
from chat.selectors import memberships_for_user, workspace_get_for_user

from .embedding_jobs import embedding_status
from .events import knowledge_group
from .forms import TYPE_CHOICES, KnowledgeItemForm
from .importing import SUFFIXES, max_file_bytes
from .models import KnowledgeItem
from .selectors import (
    knowledge_can_create,
    knowledge_item_can_edit,
    knowledge_item_get_for_user,
    knowledge_item_list_for_user,
    knowledge_search_for_user,
)
from .services import (
    KnowledgeRejected,
    knowledge_item_ask_thread,
    knowledge_item_create_for_user,
    knowledge_item_delete_for_user,
    knowledge_item_update_for_user,
)
from .snippets import markup_of, snippet_html

PAGE_SIZE = 50
SEARCH_LIMIT = 50


@login_required
def item_list(request):
    """``?q=`` (web-search syntax) ranks; without it the newest first. ``type``, ``tag``,
    ``workspace`` and ``hidden=1`` filter; ``partial=1`` renders only the results (the live
    refresh swaps them in)."""
    params = request.GET
    q = params.get("q", "").strip()
    type_ = params.get("type", "").strip()
    tag = params.get("tag", "").strip().lower()
    show_hidden = params.get("hidden") == "1"
    memberships = list(memberships_for_user(user=request.user))
    workspace = None
    if params.get("workspace"):
        try:
            workspace = workspace_get_for_user(user=request.user, workspace=params["workspace"])
        except Http404:
            workspace = None
    filters = {"types": [type_] if type_ else None, "tags": [tag] if tag else None}
    page = None
    if q:
        hits = knowledge_search_for_user(user=request.user, query=q, workspace=workspace, top_k=SEARCH_LIMIT,
                                         include_hidden=show_hidden, **filters)
        by_id = {str(i.pk): i for i in KnowledgeItem.objects.filter(pk__in=[h.item_id for h in hits])
                 .select_related("workspace", "owner")}
        results = [{"item": by_id[h.item_id],
                    "snippet": snippet_html(h.snippet, query=q, markup=markup_of(by_id[h.item_id].source_path))}
                   for h in hits if h.item_id in by_id]
    else:
        listed = knowledge_item_list_for_user(user=request.user, workspace=workspace, include_hidden=show_hidden,
                                              **filters)
        page = Paginator(listed, PAGE_SIZE).get_page(params.get("page"))
        results = [{"item": i, "snippet": snippet_html(i.content, markup=markup_of(i.source_path))} for i in page]
    visible = knowledge_item_list_for_user(user=request.user, include_hidden=True)
    embedding = []  # progress of search by meaning, and why it is paused (knowledge/embedding_jobs.py)
    for w in ([workspace] if workspace else [m.workspace for m in memberships]):
        status = embedding_status(workspace_id=w.pk)
        if status and (status["state"] == "failed" or status["error"] or status["switching"]
                       or status["embedded"] < status["total"]):
            embedding.append({"workspace": w, "status": status})
    upload_workspaces = [m.workspace for m in memberships
                         if knowledge_can_create(user=request.user, workspace=m.workspace_id)]
    context = {
        "results": results,
        "embedding": embedding,
        "page": page,
        "q": q,
        "type": type_,
        "tag": tag,
        "show_hidden": show_hidden,
        "workspace": workspace,
        "memberships": memberships,
        "types": sorted(set(visible.values_list("type", flat=True).distinct()) | {t for t, _ in TYPE_CHOICES}),
        "tags": sorted({t for tags in visible.values_list("tags", flat=True)[:500] for t in tags or []}),
        "can_create": bool(upload_workspaces),
        "upload_workspaces": upload_workspaces,
        "upload_max_bytes": max_file_bytes(),
        "upload_max_mb": max_file_bytes() // (1024 * 1024),
        "upload_suffixes": sorted(SUFFIXES),
        "querystring": params.urlencode(),
    }
    template = "knowledge/_results.html" if params.get("partial") == "1" else "knowledge/list.html"
    return render(request, template, context)


@login_required
def item_detail(request, item_id):
    item = knowledge_item_get_for_user(user=request.user, item_id=item_id)
    return render(request, "knowledge/detail.html", {
        "item": item,
        "content_html": render_markdown(item.content),
        "can_edit": knowledge_item_can_edit(user=request.user, item=item),
        "source_thread_id": item.source_message.thread_id if item.source_message_id else None,
    })


def _form_values(form: KnowledgeItemForm) -> dict:
    data = form.cleaned_data
    return {key: data[key] for key in ("title", "content", "type", "tags", "url", "is_hidden", "is_private")}


@login_required
def item_create(request):
    workspaces = [m.workspace for m in memberships_for_user(user=request.user)
                  if knowledge_can_create(user=request.user, workspace=m.workspace_id)]
    if not workspaces:
        raise PermissionDenied("Your role can read the knowledge base but not add to it.")
    form = KnowledgeItemForm(request.POST or None, workspaces=workspaces,
                             initial={"workspace": request.GET.get("workspace", "")})
    if request.method == "POST" and form.is_valid():
        try:
            workspace = workspace_get_for_user(user=request.user, workspace=form.cleaned_data["workspace"])
            item = knowledge_item_create_for_user(user=request.user, workspace=workspace, **_form_values(form))
        except KnowledgeRejected as exc:
            form.add_error(None, exc.message)  # the input stays in the form
        else:
            return redirect("knowledge:detail", item_id=item.pk)
    return render(request, "knowledge/form.html", {"form": form, "item": None})


@login_required
def item_edit(request, item_id):
    item = knowledge_item_get_for_user(user=request.user, item_id=item_id)
    if not knowledge_item_can_edit(user=request.user, item=item):
        raise PermissionDenied("Only the item's owner or a workspace admin can change it.")
    form = KnowledgeItemForm(request.POST or None, initial=KnowledgeItemForm.initial_for(item))
    if request.method == "POST" and form.is_valid():
        values = _form_values(form)
        changed = {k: v for k, v in values.items() if k in form.changed_data}
        try:
            knowledge_item_update_for_user(user=request.user, item=item, **changed)
        except KnowledgeRejected as exc:
            form.add_error(None, exc.message)
        else:
            return redirect("knowledge:detail", item_id=item.pk)
    return render(request, "knowledge/form.html", {"form": form, "item": item})


@login_required
@require_POST
def item_delete(request, item_id):
    item = knowledge_item_get_for_user(user=request.user, item_id=item_id)
    try:
        knowledge_item_delete_for_user(user=request.user, item=item)
    except KnowledgeRejected as exc:
        raise PermissionDenied(exc.message) from exc
    return redirect("knowledge:list")


@login_required
@require_POST
def item_ask(request, item_id):
    item = knowledge_item_get_for_user(user=request.user, item_id=item_id)
    thread = knowledge_item_ask_thread(user=request.user, item=item)
    return redirect("chat:thread", thread_id=thread.pk)


# --- the live feed ------------------------------------------------------------------------
def _workspace_ids(user) -> list[int]:
    return list(memberships_for_user(user=user).values_list("workspace_id", flat=True))


async def knowledge_events(request):
    """``GET /knowledge/events/``: ``knowledge.changed`` of the caller's workspaces as
    server-sent events (``event: knowledge.changed``, ``data: {"type", "item_ids",
    "workspace_id"}``), a ``: keep-alive`` comment every ``SSE_KEEPALIVE_S`` seconds (15),
    and the end after ``KNOWLEDGE_EVENTS_MAX_S`` (300 s; ``EventSource`` reconnects). The
    ids are only a hint to refresh: the page re-reads through the permission-checked views,
    so a private item of someone else is never shown."""
    user = await request.auser()
    if not user.is_authenticated:
        return JsonResponse({"error": {"code": "not_authenticated", "message": "Sign in first."}}, status=401)
    workspace_ids = await sync_to_async(_workspace_ids)(user)
    response = StreamingHttpResponse(_feed(workspace_ids), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _feed(workspace_ids: list[int]):
    layer = get_channel_layer()
    channel = await layer.new_channel()
    groups = [knowledge_group(w) for w in workspace_ids]
    for group in groups:
        await layer.group_add(group, channel)
    keepalive = float(getattr(settings, "SSE_KEEPALIVE_S", 15.0))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + float(getattr(settings, "KNOWLEDGE_EVENTS_MAX_S", 300.0))
    try:
        yield "retry: 3000\n: connected\n\n"
        while (left := deadline - loop.time()) > 0:
            try:
                message = await asyncio.wait_for(layer.receive(channel), timeout=min(keepalive, left))
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            event = message.get("event") or {}
            if event.get("type") == "knowledge.changed":
                yield f"event: knowledge.changed\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"
    finally:
        for group in groups:
            await layer.group_discard(group, channel)
