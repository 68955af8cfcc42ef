"""Provider catalogue endpoints (no secrets): ``/api/v1/providers/`` and their models.

``GET /api/v1/providers/`` answers from the rows only (cached health, no network call).
``GET /api/v1/providers/{slug}/models/`` re-probes a configured provider whose cached status
is older than ``PROVIDER_HEALTH_TTL_S`` (one short listing request), then answers
``{"provider": {...}, "models": [...]}`` — only the models the caller may use (enabled, and
allowed for their role; ``?workspace=`` narrows to their role there).
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
from agents.selectors import (
    model_list_for_provider,
    provider_get,
    provider_list,
    role_names_for_user,
)
from chat.selectors import workspace_get_for_user
from llm.capabilities import takes_images

__all__ = ["ProviderListApi", "ProviderModelsApi", "provider_health"]


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
