"""Reads of workspace assistants, always scoped to the caller: an assistant of another
workspace, or another user's private one, is a 404 (``Http404``), never its data."""

from __future__ import annotations

import uuid

from django.db.models import Q, QuerySet
from django.http import Http404

from agents.pipeline import policy_views, tool_pipeline
from chat.selectors import membership_get, memberships_for_user

from .models import Assistant


def assistants_for_user(*, user, workspace_id: int | None = None, usable: bool = False) -> QuerySet[Assistant]:
    """The assistants ``user`` may see: in their workspaces (``workspace_id``: that one only),
    shared with the workspace or their own; featured first, then by name. ``usable``: without
    the disabled ones (the model picker, ``/v1/models``)."""
    workspaces = memberships_for_user(user=user).values("workspace_id")
    rows = (Assistant.objects.select_related("provider", "workspace", "owner")
            .filter(workspace_id__in=workspaces)
            .filter(Q(visibility=Assistant.Visibility.WORKSPACE) | Q(owner=user)))
    if workspace_id is not None:
        rows = rows.filter(workspace_id=workspace_id)
    if usable:
        rows = rows.filter(disabled=False)
    return rows.order_by("-featured", "name", "pk")


def assistant_get_for_user(*, user, assistant_id) -> Assistant:
    """The assistant ``assistant_id`` if ``user`` may see it, else ``Http404`` (unknown, a
    malformed id, another workspace's, another user's private one)."""
    try:
        pk = uuid.UUID(str(assistant_id))
    except ValueError as exc:
        raise Http404("No such assistant.") from exc
    row = assistants_for_user(user=user).filter(pk=pk).first()
    if row is None:
        raise Http404("No such assistant.")
    return row


def assistant_can_edit(*, user, assistant: Assistant) -> bool:
    """Its owner, or an admin of its workspace (who may also feature or disable it)."""
    return assistant.owner_id == user.pk or workspace_admin(user=user, workspace_id=assistant.workspace_id)


def workspace_admin(*, user, workspace_id) -> bool:
    membership = membership_get(user=user, workspace_id=workspace_id)
    return membership is not None and membership.role.is_admin


def tools_for_role(*, role_name: str) -> list[str]:
    """The tool names ``role_name`` may use now (enabled, its role allowed, available), as the
    chat offers them (``agents.pipeline.tool_pipeline``, no context, model saves allowed)."""
    if not role_name:
        return []
    return tool_pipeline(role_name=role_name, object_type=None, allow_model_save=True,
                         policies=policy_views()).names


def tool_choices_for(*, user, workspace_id) -> list[dict]:
    """``[{"name", "description"}]``: the tools ``user`` may put in an assistant of
    ``workspace_id`` (those their role there may use now)."""
    from agents.tools import tool_sources

    membership = membership_get(user=user, workspace_id=workspace_id)
    names = set(tools_for_role(role_name=membership.role.name if membership else ""))
    return [{"name": s.name, "description": s.description.split(". ")[0][:160]}
            for s in sorted(tool_sources.all(), key=lambda s: s.name) if s.name in names]
