"""Reads for the prompt library: the caller's prompts and the permission rules.

Visibility: a personal prompt (``workspace`` null) only to its owner; a workspace prompt to
the members of its workspace. Anything else — another user's personal prompt, another
workspace's prompt, a malformed id — is a 404 (:func:`prompt_get_for_user`).

Edit policy (:func:`prompt_can_edit`, checked again by every service at use time): a personal
prompt by its owner; a workspace prompt by a workspace admin, or by its author while they are
still a member who may share (:func:`prompt_can_share`: not a viewer). Viewers use the
workspace's prompts and keep personal ones.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.http import Http404

from chat.models import Workspace
from chat.selectors import membership_get, memberships_for_user

from .models import Prompt

# The seeded ``member`` role's rank (agents' default roles): below it (viewers) a role reads only.
MEMBER_RANK = 20

SCOPES = ("personal", "workspace")


def prompt_list_for_user(*, user, workspace: Workspace | None = None, scope: str = "", q: str = "") -> QuerySet[Prompt]:
    """The prompts ``user`` may use, by command: their personal ones and those shared with
    their workspaces (only ``workspace``'s when given — already permission-checked). ``scope``:
    ``personal`` or ``workspace`` only; ``q``: words each found in the command, title or body
    (case-insensitive)."""
    if not getattr(user, "is_authenticated", False):
        return Prompt.objects.none()
    member_of = memberships_for_user(user=user).values("workspace_id")
    shared = Q(workspace__in=member_of) if workspace is None else Q(workspace=workspace, workspace__in=member_of)
    personal = Q(owner=user, workspace__isnull=True)
    if scope == "personal":
        rows = Prompt.objects.filter(personal)
    elif scope == "workspace":
        rows = Prompt.objects.filter(shared)
    else:
        rows = Prompt.objects.filter(personal | shared)
    for word in (q or "").split()[:8]:
        word = word.lstrip("/") or word
        rows = rows.filter(Q(command__icontains=word) | Q(title__icontains=word) | Q(body__icontains=word))
    return rows.select_related("workspace", "owner").order_by("command", "workspace_id", "-updated_at")


def prompt_get_for_user(*, user, prompt_id) -> Prompt:
    """One prompt ``user`` may see; ``Http404`` for anything else (never says it exists)."""
    try:
        return prompt_list_for_user(user=user).get(pk=prompt_id)
    except (Prompt.DoesNotExist, ValidationError, ValueError, TypeError) as exc:
        raise Http404("No such prompt.") from exc


def prompt_can_share(*, user, workspace: Workspace | int) -> bool:
    """May ``user`` share prompts with ``workspace``? Its admins and members; not viewers,
    not outsiders."""
    workspace_id = workspace.pk if isinstance(workspace, Workspace) else workspace
    membership = membership_get(user=user, workspace_id=workspace_id) if user.is_authenticated else None
    return membership is not None and (membership.role.is_admin or membership.role.rank >= MEMBER_RANK)


def _may_edit(user, prompt: Prompt, membership) -> bool:
    if not prompt.is_shared:
        return prompt.owner_id == user.pk
    if membership is None:
        return False
    if membership.role.is_admin:
        return True
    return prompt.owner_id == user.pk and membership.role.rank >= MEMBER_RANK


def prompt_can_edit(*, user, prompt: Prompt) -> bool:
    """Edit or delete ``prompt`` (from :func:`prompt_get_for_user`): see the module docstring."""
    membership = membership_get(user=user, workspace_id=prompt.workspace_id) if prompt.is_shared else None
    return _may_edit(user, prompt, membership)


def prompt_edit_checker(*, user) -> Callable[[Prompt], bool]:
    """:func:`prompt_can_edit` for many prompts of one list: the caller's memberships are read
    once (one query), not once per prompt."""
    memberships = {m.workspace_id: m for m in memberships_for_user(user=user)}
    return lambda prompt: _may_edit(user, prompt, memberships.get(prompt.workspace_id))


def prompt_workspaces_for_sharing(*, user) -> list[Workspace]:
    """The workspaces ``user`` may share prompts with (the form's choices)."""
    return [m.workspace for m in memberships_for_user(user=user)
            if m.role.is_admin or m.role.rank >= MEMBER_RANK]
