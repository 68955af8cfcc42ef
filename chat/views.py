"""Web UI pages. They call the same selectors and services as the API."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext, ngettext
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_POST

from agents.catalogue import provider_health
from agents.event_types import vocabulary
from agents.models import Environment
from agents.presentation import provider_status_for_viewer, provider_status_text, sees_error_details
from agents.risk import env_tier
from agents.selectors import default_model_for, model_choice_parse, model_choices_for, provider_list
from agents.services import MAX_MESSAGE_CHARS
from agents.temporary_chats import temporary_chats_close
from chat.attachments import accepted_suffixes
from chat.attachments import limits as attachment_limits
from chat.selectors import memberships_for_user
from chatplatform.errors import ServiceError
from knowledge.selectors import knowledge_can_create

from .artifacts import artifacts_enabled, frame_headers
from .breakglass import (
    audit_for_owner,
    request_create,
    request_decide,
    request_get_for_user,
    request_revoke,
    request_state,
    requests_for_user,
)
from .language import (
    browser_language,
    language_choices,
    language_for_user,
    language_remember,
    language_set,
)
from .models import UserPreferences
from .organise import folder_list_for_user, tag_list_for_user, thread_tag_names
from .selectors import (
    INSTRUCTIONS_MAX_CHARS,
    NO_FOLDER,
    ThreadBlinded,
    custom_instructions_for_user,
    thread_get_for_user,
    thread_list_for_user,
    thread_title_for,
    workspace_get_for_user,
)
from .services import (
    custom_instructions_set,
    default_model_set,
    thread_create,
    workspace_artifacts_set,
)

_ZERO = "00000000-0000-0000-0000-000000000000"


def _url_template(name: str) -> str:
    """A page URL with "ID" where the object's uuid goes (for the browser modules)."""
    return reverse(name, args=[_ZERO]).replace(_ZERO, "ID")


RAIL_THREADS = 100  # chats the page draws per list (the rail's script reads more on its next refresh)


def _rail_context(request, *, search: str = "") -> dict:
    providers = list(provider_list())
    detailed = sees_error_details(user=request.user)  # a probe's upstream text: staff and admins only
    memberships = memberships_for_user(user=request.user)
    # Folders first (an open one with its chats), then the chats in no folder; a search is
    # one flat list whose rows name their folder.
    folders = [] if search else list(folder_list_for_user(user=request.user))
    for folder in folders:
        folder.rail_threads = [] if folder.collapsed else \
            list(thread_list_for_user(user=request.user, folder=folder)[:RAIL_THREADS])
    return {
        "url_templates": {"page": _url_template("chat:thread"), "knowledge_item": _url_template("knowledge:detail")},
        "threads": thread_list_for_user(user=request.user, search=search,
                                        folder=None if search else NO_FOLDER)[:RAIL_THREADS],
        "folders": folders,
        "tags": list(tag_list_for_user(user=request.user)),
        "rail_workspaces": [{"slug": m.workspace.slug, "name": m.workspace.name} for m in memberships],
        "search": search,
        "memberships": memberships,
        "providers": [{"row": p, "ok": provider_health(p) == "ok", "status": provider_status_text(
            provider_status_for_viewer(provider_health(p), detailed=detailed))}
                      for p in providers],
    }


def _composer_context(request, *, workspace_id) -> dict:
    """What the composer and the header's model picker need on both chat pages: the models the
    user may pick in ``workspace_id`` with their default (``chat.api.providers``), the
    environments (the environment control shows only when there are some), the limits."""
    from chat.api.providers import model_choice_payload

    return {
        "model_choices": model_choice_payload(user=request.user, workspace_id=workspace_id),
        "environments": list(Environment.objects.order_by("name")),
        "max_chars": MAX_MESSAGE_CHARS,
        "max_frame_bytes": settings.WS_MAX_FRAME_BYTES,
    }


@login_required
def index(request):
    """The landing page is a composer: type and send; the chat is created on send with the
    default model (or the one picked in the header) — no form first."""
    context = _rail_context(request, search=request.GET.get("q", "").strip())
    first = next(iter(context["memberships"]), None)
    context.update(_composer_context(request, workspace_id=first.workspace_id if first else None))
    context["attach"] = {**attachment_limits(), "accept": ",".join(accepted_suffixes())}  # held until the send
    return render(request, "chat/app.html", context)


@login_required
@require_POST
def thread_new(request):
    try:
        workspace = workspace_get_for_user(user=request.user, workspace=request.POST.get("workspace", ""))
    except Http404:
        return redirect("chat:index")
    provider = next((p for p in provider_list() if p.slug == request.POST.get("provider")), None)
    model = request.POST.get("model", "").strip()[:200]
    if provider is None:  # none picked: the default model (the user's, the workspace's, the platform's)
        provider, default_model, _ = default_model_for(user=request.user, workspace_id=workspace.pk)
        model = model or default_model
    temporary_chats_close(owner=request.user)  # starting another chat closes a temporary one
    thread = thread_create(workspace=workspace, owner=request.user, provider=provider, model=model)
    return redirect("chat:thread", thread_id=thread.pk)


@login_required
def thread_page(request, thread_id):
    try:
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, reading="page")
    except ThreadBlinded as blinded:
        return _blinded_page(request, blinded.thread)
    context = _rail_context(request)
    env_id = (thread.ui_context or {}).get("envId") or ""
    context.update(_composer_context(request, workspace_id=thread.workspace_id))
    environments = context["environments"]
    membership = next((m for m in context["memberships"] if m.workspace_id == thread.workspace_id), None)
    can_write = thread.owner_id == request.user.pk
    context.update({
        "thread": thread,
        # Break-glass: the owner is told who read their chat and why; a reader under a grant, until when.
        "break_glass_notices": audit_for_owner(thread=thread) if can_write and not thread.temporary else [],
        "break_glass_grant": thread.break_glass,
        "can_write": can_write,
        "can_save_knowledge": can_write and knowledge_can_create(user=request.user, workspace=thread.workspace_id),
        "role_name": membership.role.name if membership else "",
        "is_prod": env_tier(env_id) == "prod",
        "env_id": env_id,
        "env_known": any(e.name == env_id for e in environments),
        "env_tier": env_tier(env_id) if env_id else "",
        "attach": {**attachment_limits(), "accept": ",".join(accepted_suffixes())},
        "event_vocabulary": vocabulary(),
        "temporary_ttl": _duration(settings.CHAT_TEMPORARY_TTL_S),
        # The ⚙ menu's folder and tags: the owner's own (an admin reading the chat sees neither).
        "thread_tags": thread_tag_names(thread) if can_write else [],
        "workspace_folders": [f for f in context["folders"] if f.workspace_id == thread.workspace_id],
        "instructions_note": _instructions_note(
            workspace=bool(thread.workspace.instructions.strip()),
            custom=bool(custom_instructions_for_user(user_id=thread.owner_id).strip())),
    })
    return render(request, "chat/app.html", context)


def _duration(seconds: float) -> str:
    """``CHAT_TEMPORARY_TTL_S`` in words for the temporary chat's marker, in the request's
    language: "24 hours", "90 minutes"."""
    if seconds >= 3600 and seconds % 3600 == 0:
        n = round(seconds / 3600)
        return ngettext("%(n)d hour", "%(n)d hours", n) % {"n": n}
    if seconds >= 60:
        n = round(seconds / 60)
        return ngettext("%(n)d minute", "%(n)d minutes", n) % {"n": n}
    n = round(seconds)
    return ngettext("%(n)d second", "%(n)d seconds", n) % {"n": n}


def _instructions_note(*, workspace: bool, custom: bool) -> str:
    """Which instructions the assistant gets as context in a chat, as a sentence ("" for none)."""
    if workspace and custom:
        return gettext("Workspace instructions and your custom instructions are given to the assistant as context "
                       "(not as your words).")
    if workspace:
        return gettext("Workspace instructions are given to the assistant as context (not as your words).")
    if custom:
        return gettext("Your custom instructions are given to the assistant as context (not as your words).")
    return ""


def favicon(request):
    """``/favicon.ico`` (browsers ask for it on pages without an icon link: the admin, the API
    docs): a permanent redirect to the site's icon (static ``chat/favicon.svg``), not a 404."""
    from django.http import HttpResponsePermanentRedirect
    from django.templatetags.static import static

    return HttpResponsePermanentRedirect(static("chat/favicon.svg"))


@login_required
def approvals_page(request):
    """The approval inbox: the list is read by the page (``GET /api/v1/approvals/``) and kept
    live over ``/ws/approvals/`` (templates/static/chat/approvals/inbox.js)."""
    return render(request, "chat/approvals.html", {})


@login_required
def preferences(request):
    """Personal settings: the language of the pages, the default model of new chats and custom
    instructions (each form POSTs its own field, then redirects; an error keeps what was typed),
    the artifact previews switch of each workspace the caller administers (others see it
    read-only; form fields ``artifacts_workspace`` = the workspace id, ``artifacts_enabled`` =
    "on" or absent; a member who is not an admin: 403 with the reason), and the workspace
    instructions the admins set, read-only."""
    text = custom_instructions_for_user(user_id=request.user.pk)
    prefs = UserPreferences.objects.filter(user=request.user).select_related("default_provider").first()
    chosen = (f"{prefs.default_provider.slug}/{prefs.default_model or prefs.default_provider.default_model}"
              if prefs is not None and prefs.default_provider is not None else "")
    error = model_error = artifacts_error = language_error = ""
    saved = request.GET.get("saved") == "1"
    if request.method == "POST" and "language" in request.POST:
        try:
            prefs = language_set(user=request.user, code=request.POST.get("language", ""))
        except ServiceError as exc:
            language_error = exc.message
        else:
            response = redirect(reverse("chat:preferences") + "?saved=1")
            language_remember(request, response, prefs.language)
            return response
    elif request.method == "POST" and "default_model" in request.POST:
        chosen = request.POST.get("default_model", "")
        try:
            provider, model = model_choice_parse(user=request.user, value=chosen)
        except ServiceError as exc:
            model_error = exc.message
        else:
            default_model_set(user=request.user, provider=provider, model=model)
            return redirect(reverse("chat:preferences") + "?saved=1")
    elif request.method == "POST" and "artifacts_workspace" in request.POST:
        # A workspace admin's switch (chat.services.workspace_artifacts_set checks who, now);
        # an unchecked box is absent from the form: off.
        try:
            workspace_artifacts_set(user=request.user, workspace_id=_workspace_pk(request.POST["artifacts_workspace"]),
                                    enabled=request.POST.get("artifacts_enabled") == "on")
        except ServiceError as exc:
            artifacts_error = exc.message
        else:
            return redirect(reverse("chat:preferences") + "?saved=artifacts#artifact-previews")
    elif request.method == "POST":
        text = request.POST.get("custom_instructions", "")
        try:
            custom_instructions_set(user=request.user, text=text)
        except ServiceError as exc:
            error = exc.message
        else:
            return redirect(reverse("chat:preferences") + "?saved=1")
    memberships = memberships_for_user(user=request.user)
    first = memberships.first()
    fallback = default_model_for(user=request.user, workspace_id=first.workspace_id) if first else (None, "", "")
    return render(request, "chat/preferences.html", {
        "custom_instructions": text, "error": error, "saved": saved, "memberships": memberships,
        "artifacts_error": artifacts_error, "artifacts_saved": request.GET.get("saved") == "artifacts",
        "is_staff": request.user.is_staff,
        "max_chars": INSTRUCTIONS_MAX_CHARS, "model_groups": model_choices_for(user=request.user),
        "default_model": chosen, "model_error": model_error,
        "in_effect": f"{fallback[0].name} · {fallback[1]}" if fallback[0] is not None else "",
        # a new assistant starts on the model a new chat would (the assistants section)
        "assistant_model": f"{fallback[0].slug}/{fallback[1]}" if fallback[0] is not None else "",
        "languages": language_choices(), "language": language_for_user(user_id=request.user.pk),
        "browser_language": dict(language_choices()).get(browser_language(request), ""),
        "language_error": language_error,
    }, status=400 if error or model_error or language_error else 403 if artifacts_error else 200)


def _workspace_pk(value: str) -> int:
    """A workspace id from a form; anything but digits is no workspace of the caller's (404)."""
    if not (value.isascii() and value.isdigit() and len(value) < 19):
        raise Http404("No such workspace.")
    return int(value)


@login_required
@xframe_options_sameorigin
def artifact_frame(request, workspace_id: int):
    """The artifact preview document (``chat.artifacts``), framed by the chat page in
    ``<iframe sandbox="allow-scripts">``; the source arrives by ``postMessage``, never in the
    URL. 404 for a workspace the caller is not a member of; 403 (a short notice, shown in the
    frame) while the workspace has previews off — checked at every load, not only when the page
    was drawn. Both answers carry the frame's own CSP (``chat.artifacts.frame_headers``)."""
    enabled = artifacts_enabled(user=request.user, workspace_id=workspace_id)
    if enabled is None:
        raise Http404("No such workspace.")
    template, status = ("chat/artifact_frame.html", 200) if enabled else ("chat/artifact_refused.html", 403)
    response = render(request, template, {}, status=status)
    for header, value in frame_headers(request).items():
        response[header] = value
    return response


def _blinded_page(request, thread, *, error: str = "", reason: str = "", status: int = 403):
    """An admin-blind chat as its workspace's admin sees it: metadata, and a break-glass request
    form (or their open request's state). 403: the content is not theirs to read."""
    mine = [r for r in requests_for_user(user=request.user).filter(thread=thread, requested_by=request.user)[:5]]
    open_request = next((r for r in mine if request_state(r) in ("pending", "approved")), None)
    return render(request, "chat/blinded.html", {
        "thread": thread, "title": thread_title_for(thread, blinded=True),
        "open_request": open_request, "open_state": request_state(open_request) if open_request else "",
        "error": error, "reason": reason,
    }, status=status)


@login_required
def break_glass_page(request):
    """Break-glass requests (``chat.breakglass``): GET lists those of the workspaces the caller
    is an admin of, and their own, with Approve / Deny for a second admin. POST ``action``:
    ``request`` (``thread``, ``reason``: from a blinded chat's page), ``approve``, ``deny``,
    ``revoke`` (``id``); each redirects back (an error keeps what was typed)."""
    error = ""
    if request.method == "POST":
        action = request.POST.get("action", "")
        try:
            if action == "request":
                thread_id = request.POST.get("thread", "")
                try:
                    row = request_create(user=request.user, thread_id=thread_id, reason=request.POST.get("reason", ""))
                except ServiceError as exc:
                    thread = thread_get_for_user(user=request.user, thread_id=thread_id, metadata=True)
                    return _blinded_page(request, thread, error=exc.message, reason=request.POST.get("reason", ""),
                                         status=400 if exc.status == 400 else 409)
                return redirect("chat:thread", thread_id=row.thread_ref)
            if action in ("approve", "deny", "revoke"):
                row = request_get_for_user(user=request.user, request_id=request.POST.get("id", ""))
                if action == "revoke":
                    request_revoke(request=row, user=request.user)
                else:
                    request_decide(request=row, user=request.user, approve=action == "approve",
                                   note=request.POST.get("note", ""))
                return redirect(reverse("chat:break-glass") + f"?done={action}")
            error = gettext("Unknown action.")
        except ServiceError as exc:
            error = exc.message
    rows = list(requests_for_user(user=request.user).prefetch_related("reads__user")[:200])
    for row in rows:
        row.state = request_state(row)
        row.may_decide = row.state == "pending" and row.requested_by_id != request.user.pk
        row.title_shown = thread_title_for(row.thread, blinded=True) if row.thread is not None else ""
    admin_of = memberships_for_user(user=request.user, admin=True).exists()
    return render(request, "chat/break_glass.html", {
        "rows": rows, "error": error, "done": request.GET.get("done", ""), "is_admin": admin_of,
        "access_minutes": round(settings.BREAK_GLASS_ACCESS_S / 60),
    }, status=400 if error else 200)
