"""Writes of workspace assistants: make, change, delete, and a workspace admin's feature /
disable. Every refusal is a ``ServiceError`` (400 with the field named in its message, 403
``not_allowed``); nothing is written when one is raised."""

from __future__ import annotations

from django.db import transaction
from django.http import Http404
from django.utils.translation import gettext as _

from agents.selectors import model_allowed
from agents.tools import tool_sources
from chat.models import Workspace
from chat.selectors import membership_get
from chatplatform.errors import ServiceError
from chatplatform.safe_input import hidden_control
from knowledge.selectors import knowledge_item_get_for_user

from .models import Assistant
from .selectors import assistant_can_edit, tools_for_role, workspace_admin

NAME_MAX = 80
DESCRIPTION_MAX = 300
INSTRUCTIONS_MAX = 8000
STARTERS_MAX = 4
STARTER_CHARS = 200
TAGS_MAX = 20
ITEMS_MAX = 50

FIELDS = ("name", "description", "provider", "model", "instructions", "tools", "knowledge_tags",
          "knowledge_items", "starter_prompts", "visibility")


class AssistantRejected(ServiceError):
    """An assistant change the server refuses (``chatplatform.errors.ServiceError``)."""


def _invalid(field: str, message: str, code: str = "invalid") -> AssistantRejected:
    return AssistantRejected(code, f"{field}: {message}", 400, field=field)


def _refuse_hidden_controls(values: dict) -> None:
    """The texts other members read (name, description, starter prompts, knowledge tags) may
    not hold control characters or bidirectional overrides, which disguise what they say."""
    for field in ("name", "description", "starter_prompts", "knowledge_tags"):
        value = values.get(field)
        for text in (value if isinstance(value, list | tuple) else [value]):
            char = hidden_control(str(text or ""), newlines=field == "description")
            if char:
                raise _invalid(field, _("Remove the invisible control character %(char)s.") % {"char": char})


def _clean(*, owner, workspace: Workspace, values: dict) -> dict:
    """``values`` checked and normalised against the owner's role in ``workspace`` now."""
    out = dict(values)
    _refuse_hidden_controls(out)
    if "name" in out:
        out["name"] = " ".join(str(out["name"] or "").split())
        if not out["name"]:
            raise _invalid("name", _("Give the assistant a name."))
        if len(out["name"]) > NAME_MAX:
            raise _invalid("name", _("An assistant's name is at most %(n)d characters.") % {"n": NAME_MAX})
    if len(out.get("description") or "") > DESCRIPTION_MAX:
        raise _invalid("description", _("At most %(n)d characters.") % {"n": DESCRIPTION_MAX})
    if len(out.get("instructions") or "") > INSTRUCTIONS_MAX:
        raise _invalid("instructions", _("At most %(n)d characters.") % {"n": INSTRUCTIONS_MAX})
    membership = membership_get(user=owner, workspace_id=workspace.pk) if owner is not None else None
    role = membership.role.name if membership else ""
    if "provider" in out or "model" in out:
        provider, model = out.get("provider"), (out.get("model") or "").strip()
        if provider is None:
            raise _invalid("provider", _("Pick the model the assistant runs on."))
        if not model_allowed(provider=provider, model=model, role_names={role} if role else set()):
            raise _invalid("model", _("The model %(model)s of %(provider)s is not enabled for your role in this "
                                      "workspace; pick another.") % {"model": repr(model or provider.default_model),
                                                                   "provider": provider.name},
                           code="model_not_allowed")
        out["model"] = model
    if "tools" in out:
        names = list(dict.fromkeys(str(t) for t in out["tools"] or ()))
        allowed = set(tools_for_role(role_name=role))
        for name in names:
            if tool_sources.get(name) is None:
                raise _invalid("tools", _("There is no tool %(tool)s.") % {"tool": repr(name)}, code="unknown_tool")
            if name not in allowed:
                raise _invalid("tools", _("Your role %(role)s may not use the tool %(tool)s, so an assistant of yours "
                                          "cannot offer it.") % {"role": repr(role), "tool": repr(name)},
                               code="tool_not_allowed")
        out["tools"] = names
    if "knowledge_tags" in out:
        tags = list(dict.fromkeys(str(t).strip().lower() for t in out["knowledge_tags"] or () if str(t).strip()))
        if len(tags) > TAGS_MAX or any(len(t) > 50 for t in tags):
            raise _invalid("knowledge_tags", _("At most %(n)d tags of 50 characters.") % {"n": TAGS_MAX})
        out["knowledge_tags"] = tags
    if "knowledge_items" in out:
        ids = list(dict.fromkeys(str(i) for i in out["knowledge_items"] or ()))
        if len(ids) > ITEMS_MAX:
            raise _invalid("knowledge_items", _("At most %(n)d items.") % {"n": ITEMS_MAX})
        for item_id in ids:
            try:
                item = knowledge_item_get_for_user(user=owner, item_id=item_id)
            except Http404:
                item = None
            if item is None or item.workspace_id != workspace.pk:
                raise _invalid("knowledge_items", _("No knowledge item %(id)s of yours in this workspace.")
                               % {"id": repr(item_id)})
        out["knowledge_items"] = [str(i) for i in ids]
    if "starter_prompts" in out:
        prompts = [" ".join(str(p).split()) for p in out["starter_prompts"] or ()]
        prompts = [p for p in prompts if p]
        if len(prompts) > STARTERS_MAX or any(len(p) > STARTER_CHARS for p in prompts):
            raise _invalid("starter_prompts", _("At most %(n)d starter prompts of %(chars)d characters.")
                           % {"n": STARTERS_MAX, "chars": STARTER_CHARS})
        out["starter_prompts"] = prompts
    if "visibility" in out and out["visibility"] not in Assistant.Visibility.values:
        raise _invalid("visibility", _("Either private or workspace."))
    return out


@transaction.atomic
def assistant_create(*, user, workspace: Workspace, **values) -> Assistant:
    """A new assistant of ``user`` in ``workspace`` (already checked: ``workspace_get_for_user``).
    ``values``: :data:`FIELDS` (``name`` and ``provider`` required). Refusals (400): ``invalid``
    (a field), ``model_not_allowed`` (the model is not enabled for the user's role there),
    ``unknown_tool``, ``tool_not_allowed`` (a tool the user's role may not use: the message
    names it)."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"not assistant fields: {sorted(unknown)}")
    values.setdefault("name", "")
    values.setdefault("provider", None)
    return Assistant.objects.create(workspace=workspace, owner=user,
                                    **_clean(owner=user, workspace=workspace, values=values))


@transaction.atomic
def assistant_update(*, user, assistant: Assistant, **changes) -> Assistant:
    """Change ``assistant`` (from ``assistant_get_for_user``): its owner or a workspace admin
    (else 403 ``not_allowed``). Tools and the model are checked against the owner's role (a
    tool outside it is refused: the owner's role is what the assistant may ever offer)."""
    if not assistant_can_edit(user=user, assistant=assistant):
        raise AssistantRejected("not_allowed", _("Only its owner or a workspace admin may change this assistant."), 403)
    unknown = set(changes) - set(FIELDS)
    if unknown:
        raise ValueError(f"not assistant fields: {sorted(unknown)}")
    if ("provider" in changes) != ("model" in changes):  # the pair is checked together
        changes.setdefault("provider", assistant.provider)
        changes.setdefault("model", assistant.model)
    owner = assistant.owner or user
    for key, value in _clean(owner=owner, workspace=assistant.workspace, values=changes).items():
        setattr(assistant, key, value)
    assistant.save()
    return assistant


def assistant_delete(*, user, assistant: Assistant) -> None:
    """Delete ``assistant`` (its owner or a workspace admin; else 403 ``not_allowed``). Its
    chats stay, with their history, on the model they had (their ``assistant`` becomes null)."""
    if not assistant_can_edit(user=user, assistant=assistant):
        raise AssistantRejected("not_allowed", _("Only its owner or a workspace admin may delete this assistant."), 403)
    assistant.delete()


def assistant_moderate(*, user, assistant: Assistant, featured: bool | None = None,
                       disabled: bool | None = None) -> Assistant:
    """A workspace admin features (listed first, marked) or disables (refused at every send
    and pick; its chats keep their history and may switch model) ``assistant``; anyone else:
    403 ``not_allowed``."""
    if not workspace_admin(user=user, workspace_id=assistant.workspace_id):
        raise AssistantRejected("not_allowed", _("Only a workspace admin may feature or disable assistants."), 403)
    fields = []
    if featured is not None:
        assistant.featured = featured
        fields.append("featured")
    if disabled is not None:
        assistant.disabled = disabled
        fields.append("disabled")
    if fields:
        assistant.save(update_fields=[*fields, "updated_at"])
    return assistant
