"""Provider catalogue endpoints (no secrets): ``/api/v1/providers/`` and their models.

``GET /api/v1/providers/`` answers from the rows only (cached health, no network call).
``GET /api/v1/providers/{slug}/models/`` re-probes a configured provider whose cached status
is older than ``PROVIDER_HEALTH_TTL_S`` (one short listing request), then answers
``{"provider": {...}, "models": [...]}`` — only the models the caller may use (enabled, and
allowed for their role; ``?workspace=`` narrows to their role there).
``GET /api/v1/models/`` is the chat's model picker: every model the caller may use, grouped by
provider, with the default a new chat of theirs starts with (no network call).
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.catalogue import lists_models, provider_health, refresh_if_stale, setup_hint
from agents.loop.tiers import resolve_tier
from agents.models import LLMModel, Provider
from agents.presentation import provider_status_for_viewer, sees_error_details
from agents.presets import preset_choices
from agents.selectors import (
    default_model_for,
    model_choices_for,
    model_list_for_provider,
    provider_get,
    provider_list,
    role_names_for_user,
)
from chat.selectors import memberships_for_user, workspace_get_for_user
from llm.capabilities import capabilities, takes_images

__all__ = ["ModelChoicesApi", "ProviderListApi", "ProviderModelsApi", "model_choice_payload", "provider_health"]


class ProviderSerializer(serializers.ModelSerializer):
    status = serializers.SerializerMethodField()
    configured = serializers.SerializerMethodField()
    setup_hint = serializers.SerializerMethodField()
    lists_models = serializers.SerializerMethodField()
    status_checked_at = serializers.DateTimeField(source="health_checked_at", read_only=True, allow_null=True)

    class Meta:
        model = Provider
        # Never add key fields here: keys do not leave the server.
        fields = ["slug", "name", "kind", "default_model", "status", "configured", "setup_hint", "lists_models",
                  "status_checked_at", "models_refreshed_at"]

    def get_status(self, obj) -> str:
        """The health line; a probe's upstream text only for staff and admins (``detailed``)."""
        return provider_status_for_viewer(provider_health(obj), detailed=self.context.get("detailed", False))

    def get_configured(self, obj) -> bool:
        return not setup_hint(obj)

    def get_setup_hint(self, obj) -> str:
        return setup_hint(obj)

    def get_lists_models(self, obj) -> bool:
        return lists_models(obj)


class LLMModelSerializer(serializers.ModelSerializer):
    listed = serializers.SerializerMethodField()
    auto_tier = serializers.SerializerMethodField(help_text="The tier 'auto' resolves to for this model.")

    class Meta:
        model = LLMModel
        fields = ["name", "label", "context_window", "supports_tools", "supports_images", "parameter_size",
                  "prompt_tier", "listed", "auto_tier"]

    supports_images = serializers.SerializerMethodField(
        help_text="The model reads images (vision): the admin's setting, else the provider's listing or the "
                  "model's name. Images attached for a model without it are refused with a clear message.")

    def get_supports_images(self, obj) -> bool:
        return takes_images(obj.provider, obj.name, obj.supports_images)

    def get_listed(self, obj) -> bool:
        return obj.listed_at is not None

    def get_auto_tier(self, obj) -> str:
        tier, _ = resolve_tier(thread_tier="auto", provider=obj.provider, model_name=obj.name, model_row=obj)
        return tier.name


class ProviderModelsSerializer(serializers.Serializer):
    provider = ProviderSerializer()
    models = LLMModelSerializer(many=True)


class ProviderListApi(APIView):
    @extend_schema(responses=ProviderSerializer(many=True))
    def get(self, request):
        return Response(ProviderSerializer(provider_list(), many=True,
                                           context={"detailed": sees_error_details(user=request.user)}).data)


class ProviderModelsApi(APIView):
    """The provider's models the caller may use: enabled, and allowed for the caller's role in
    ``?workspace=`` (id or slug; not a member → 404), or for any of their roles without it."""

    @extend_schema(parameters=[OpenApiParameter("workspace", str, required=False)], responses=ProviderModelsSerializer)
    def get(self, request, slug):
        provider = provider_get(slug=slug)
        workspace = request.query_params.get("workspace")
        workspace_id = workspace_get_for_user(user=request.user, workspace=workspace).pk if workspace else None
        refresh_if_stale(provider)
        roles = role_names_for_user(user=request.user, workspace_id=workspace_id)
        models = model_list_for_provider(provider=provider, role_names=roles).select_related("provider")
        return Response({
            "provider": ProviderSerializer(provider, context={"detailed": sees_error_details(user=request.user)}).data,
            "models": LLMModelSerializer(models, many=True).data,
        })


class ModelChoiceSerializer(serializers.Serializer):
    id = serializers.CharField(help_text='"provider/model": what PATCH /threads/{id}/ and the preferences take.')
    name = serializers.CharField()
    label = serializers.CharField(help_text="The admin's label, else the name.")
    supports_tools = serializers.BooleanField()
    vision = serializers.BooleanField(help_text="Reads images: the model row's setting, else the provider's listing or the model's name.")
    parameter_size = serializers.CharField()
    auto_tier = serializers.CharField(help_text="The prompt tier 'auto' resolves to for this model.")


class ModelChoiceGroupSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.CharField()
    agent = serializers.BooleanField(help_text="A remote agent (kind agent_runs): it runs commands on servers.")
    models = ModelChoiceSerializer(many=True)


class ModelDefaultSerializer(serializers.Serializer):
    provider = serializers.CharField()
    model = serializers.CharField()
    id = serializers.CharField()
    source = serializers.ChoiceField(choices=["user", "workspace", "platform", "offline"])


class AssistantChoiceSerializer(serializers.Serializer):
    id = serializers.CharField(help_text='"assistant:<assistant id>"')
    assistant_id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    featured = serializers.BooleanField()
    shared = serializers.BooleanField()
    provider = serializers.CharField()
    model = serializers.CharField()
    starter_prompts = serializers.ListField(child=serializers.CharField())
    usable = serializers.BooleanField(help_text="Its model is enabled for the caller's role.")


class ModelChoicesSerializer(serializers.Serializer):
    default = ModelDefaultSerializer(allow_null=True)
    providers = ModelChoiceGroupSerializer(many=True)
    assistants = AssistantChoiceSerializer(many=True)


def model_choice_payload(*, user, workspace_id) -> dict:
    """``GET /api/v1/models/``'s body (also given to the chat pages): ``{"default": {provider,
    model, id, source} | null, "providers": [{slug, name, kind, agent, models: [{id, name,
    label, supports_tools, vision, parameter_size, auto_tier}]}], "assistants": [{id, assistant_id,
    name, description, featured, shared, provider, model, starter_prompts, usable}]}`` — the set-up
    providers by name, each with the models the user's role may use
    (``agents.selectors.model_choices_for``), and the workspace assistants the user may pick there
    (``agents.presets``; not the disabled ones)."""
    provider, model, source = default_model_for(user=user, workspace_id=workspace_id) if workspace_id else (None, "", "")
    groups = []
    for group in model_choices_for(user=user, workspace_id=workspace_id):
        p = group["provider"]
        models = []
        for m in group["models"]:
            tier, _ = resolve_tier(thread_tier="auto", provider=p, model_name=m.name, model_row=m if m.pk else None)
            models.append({"id": f"{p.slug}/{m.name}", "name": m.name, "label": m.label or m.name,
                           "supports_tools": m.supports_tools, "vision": takes_images(p, m.name, getattr(m, "supports_images", None)),
                           "parameter_size": m.parameter_size, "auto_tier": tier.name})
        groups.append({"slug": p.slug, "name": p.name, "kind": p.kind, "agent": not capabilities(p).adapter,
                       "models": models})
    default = ({"provider": provider.slug, "model": model, "id": f"{provider.slug}/{model}", "source": source}
               if provider is not None else None)
    return {"default": default, "providers": groups,
            "assistants": preset_choices(user=user, workspace_id=workspace_id)}


class ModelChoicesApi(APIView):
    """The models the caller may pick, grouped by provider, and their default for a new chat in
    ``?workspace=`` (id or slug; not a member → 404; without it: their first workspace)."""

    @extend_schema(parameters=[OpenApiParameter("workspace", str, required=False)], responses=ModelChoicesSerializer)
    def get(self, request):
        workspace = request.query_params.get("workspace")
        if workspace:
            workspace_id = workspace_get_for_user(user=request.user, workspace=workspace).pk
        else:
            first = memberships_for_user(user=request.user).first()
            workspace_id = first.workspace_id if first else None
        return Response(model_choice_payload(user=request.user, workspace_id=workspace_id))
