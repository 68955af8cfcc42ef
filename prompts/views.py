"""The Prompts page (``/prompts/``): list and search, create, edit, delete. The same
selectors and services as ``/api/v1/prompts/``; every text is escaped by the templates."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from chat.selectors import memberships_for_user

from .forms import PromptForm
from .selectors import (
    SCOPES,
    prompt_can_edit,
    prompt_edit_checker,
    prompt_get_for_user,
    prompt_list_for_user,
    prompt_workspaces_for_sharing,
)
from .services import BODY_MAX, PromptRejected, prompt_create, prompt_delete, prompt_update
from .variables import prompt_variables


@login_required
def prompt_list(request):
    """``?q=`` words to find; ``?scope=personal|workspace``."""
    q = request.GET.get("q", "").strip()[:200]
    scope = request.GET.get("scope", "")
    scope = scope if scope in SCOPES else ""
    may_edit = prompt_edit_checker(user=request.user)
    prompts = [{"prompt": p, "preview": p.body.strip(), "variables": prompt_variables(p.body), "can_edit": may_edit(p)}
               for p in prompt_list_for_user(user=request.user, scope=scope, q=q)]
    return render(request, "prompts/list.html", {
        "prompts": prompts, "q": q, "scope": scope,
        "has_workspaces": memberships_for_user(user=request.user).exists(),
    })


def _apply(form: PromptForm, error: PromptRejected) -> None:
    field = error.field if error.field in form.fields else None
    form.add_error(field, error.message)


@login_required
def prompt_new(request):
    workspaces = prompt_workspaces_for_sharing(user=request.user)
    form = PromptForm(request.POST or None, workspaces=workspaces)
    if request.method == "POST" and form.is_valid():
        try:
            prompt = prompt_create(user=request.user, workspace=form.chosen_workspace(),
                                   **{k: form.cleaned_data[k] for k in ("command", "title", "body")})
        except PromptRejected as exc:
            _apply(form, exc)
        else:
            messages.success(request, _("Saved /%(command)s.") % {"command": prompt.command})
            return redirect("prompts:list")
    return render(request, "prompts/form.html", {"form": form, "prompt": None, "body_max": BODY_MAX})


@login_required
def prompt_edit(request, prompt_id):
    prompt = prompt_get_for_user(user=request.user, prompt_id=prompt_id)
    if not prompt_can_edit(user=request.user, prompt=prompt):
        raise PermissionDenied(_("You may use this prompt but not change it: its author and the workspace's "
                                 "admins can."))
    workspaces = prompt_workspaces_for_sharing(user=request.user)
    if prompt.workspace is not None and prompt.workspace not in workspaces:
        workspaces.append(prompt.workspace)  # an admin's choices always include where it is
    initial = {"command": prompt.command, "title": prompt.title, "body": prompt.body,
               "workspace": str(prompt.workspace_id or "")}
    form = PromptForm(request.POST or None, initial=initial, workspaces=workspaces)
    if request.method == "POST" and form.is_valid():
        try:
            prompt = prompt_update(prompt=prompt, by=request.user, workspace=form.chosen_workspace(),
                                   **{k: form.cleaned_data[k] for k in ("command", "title", "body")})
        except PromptRejected as exc:
            _apply(form, exc)
        else:
            messages.success(request, _("Saved /%(command)s.") % {"command": prompt.command})
            return redirect("prompts:list")
    return render(request, "prompts/form.html", {"form": form, "prompt": prompt, "body_max": BODY_MAX})


@login_required
def prompt_remove(request, prompt_id):
    """GET: confirm; POST: delete."""
    prompt = prompt_get_for_user(user=request.user, prompt_id=prompt_id)
    if not prompt_can_edit(user=request.user, prompt=prompt):
        raise PermissionDenied(_("You may use this prompt but not delete it: its author and the workspace's "
                                 "admins can."))
    if request.method == "POST":
        prompt_delete(prompt=prompt, by=request.user)
        messages.success(request, _("Deleted /%(command)s.") % {"command": prompt.command})
        return redirect("prompts:list")
    return render(request, "prompts/delete.html", {"prompt": prompt})
