"""Provider catalogue endpoints (no secrets): ``/api/v1/providers/`` and their models."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from .models import LLMModel, Provider
from .providers.keys import key_status
from .selectors import model_list_for_provider, provider_get, provider_list


def provider_health(provider: Provider) -> str:
    """``"ok"`` or ``"not configured: set OPENAI_API_KEY"`` (no network call)."""
    missing = key_status(provider)
    return f"not configured: {missing}" if missing else "ok"


class ProviderSerializer(serializers.ModelSerializer):
    status = serializers.SerializerMethodField()

    class Meta:
        model = Provider
        # Never add key fields here: keys do not leave the server.
        fields = ["slug", "name", "kind", "default_model", "status"]

    def get_status(self, obj) -> str:
        return provider_health(obj)


class LLMModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = LLMModel
        fields = ["name", "label", "context_window", "supports_tools", "parameter_size", "prompt_tier"]


class ProviderListApi(APIView):
    @extend_schema(responses=ProviderSerializer(many=True))
    def get(self, request):
        return Response(ProviderSerializer(provider_list(), many=True).data)


class ProviderModelsApi(APIView):
    @extend_schema(responses=LLMModelSerializer(many=True))
    def get(self, request, slug):
        provider = provider_get(slug=slug)
        return Response(LLMModelSerializer(model_list_for_provider(provider=provider), many=True).data)
