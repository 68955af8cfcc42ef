"""The assistants as the ``agents.presets`` source: what a chat's assistant adds to a run,
decided at run time by the *caller's* roles (DESIGN §6, *Workspace assistants*)."""

from __future__ import annotations

from django.http import Http404
from django.utils.translation import gettext as _

from agents.presets import Pick, Preset, PresetRefused
from agents.provider_keys import key_status
from agents.selectors import model_allowed, role_names_for_user
from chat.selectors import role_name_in
from chatplatform.errors import ServiceError

from .models import Assistant
from .selectors import assistant_get_for_user, assistants_for_user, tools_for_role

MODEL_ID_PREFIX = "assistant:"  # an assistant's model id on /v1: "assistant:<uuid>"


def model_id(assistant: Assistant) -> str:
    return f"{MODEL_ID_PREFIX}{assistant.pk}"


def _usable_model(assistant: Assistant, role_names) -> bool:
    provider = assistant.provider
    return (provider is not None and provider.enabled and key_status(provider) is None
            and model_allowed(provider=provider, model=assistant.model, role_names=role_names))


def _model_refusal(assistant: Assistant) -> ServiceError:
    name = assistant.model or (assistant.provider.default_model if assistant.provider else "")
    return ServiceError("model_not_allowed", _(
        "The assistant %(assistant)s runs on the model %(model)s, which is not enabled for your role here; "
        "pick another model or assistant, or ask an administrator.") % {
            "assistant": repr(assistant.name), "model": repr(name or _("(none)"))}, 403)


def _disabled(assistant: Assistant) -> PresetRefused:
    return PresetRefused("assistant_disabled", _(
        "The assistant %(assistant)s was disabled by a workspace admin; pick a model or another assistant "
        "for this chat (its messages stay).") % {"assistant": repr(assistant.name)}, 403)


class AssistantPresets:
    """``agents.presets.PresetSource`` over :class:`Assistant` rows."""

    def pick(self, *, user, preset_id: str, workspace_id: int | None = None) -> Pick:
        assistant = assistant_get_for_user(user=user, assistant_id=preset_id)
        if workspace_id is not None and assistant.workspace_id != workspace_id:
            raise Http404("No such assistant.")  # another workspace's: as if unknown
        if assistant.disabled:
            raise _disabled(assistant)
        if not _usable_model(assistant, role_names_for_user(user=user, workspace_id=assistant.workspace_id)):
            raise _model_refusal(assistant)
        return Pick(preset_id=str(assistant.pk), provider=assistant.provider, model=assistant.model,
                    workspace_id=assistant.workspace_id)

    def for_thread(self, *, thread, user) -> Preset | None:
        assistant = (Assistant.objects.select_related("provider").filter(pk=thread.assistant_id).first()
                     if thread.assistant_id else None)
        if assistant is None:
            return None
        visible = assistant.workspace_id == thread.workspace_id and (
            assistant.visibility == Assistant.Visibility.WORKSPACE or assistant.owner_id == getattr(user, "pk", user))
        if not visible or not role_name_in(user=user, workspace_id=assistant.workspace_id):
            raise PresetRefused("assistant_not_found", _(
                "This chat's assistant is no longer available to you; pick a model or another assistant."), 404)
        if assistant.disabled:
            raise _disabled(assistant)
        # The tools it may offer now: its own list ∩ what its creator's role may use now (a tool
        # whose role the creator lost is gone); the caller's role is applied by the pipeline.
        creator_role = role_name_in(user=assistant.owner_id, workspace_id=assistant.workspace_id) \
            if assistant.owner_id else ""
        tools = frozenset(assistant.tools) & frozenset(tools_for_role(role_name=creator_role))
        return Preset(id=str(assistant.pk), name=assistant.name, instructions=assistant.instructions,
                      tools=tools, knowledge=assistant.knowledge_scope)

    def choices(self, *, user, workspace_id: int | None) -> list[dict]:
        if workspace_id is None:
            return []
        roles = role_names_for_user(user=user, workspace_id=workspace_id)
        out = []
        for a in assistants_for_user(user=user, workspace_id=workspace_id, usable=True):
            out.append({
                "id": model_id(a), "assistant_id": str(a.pk), "name": a.name, "description": a.description,
                "featured": a.featured, "shared": a.visibility == Assistant.Visibility.WORKSPACE,
                "provider": a.provider.slug if a.provider else "", "model": a.model,
                "starter_prompts": list(a.starter_prompts), "usable": _usable_model(a, roles),
            })
        return out

    def model_ids(self, *, user) -> list[dict]:
        out = []
        for a in assistants_for_user(user=user, usable=True):
            if _usable_model(a, role_names_for_user(user=user, workspace_id=a.workspace_id)):
                out.append({"id": model_id(a), "object": "model", "created": int(a.created_at.timestamp()),
                            "owned_by": a.workspace.slug, "name": a.name})
        return out
