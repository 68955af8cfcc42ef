"""Approval endpoints: ``GET /api/v1/tool-calls/`` and ``POST /api/v1/tool-calls/{id}/decision/``."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from .models import ToolCall
from .presentation import tool_call_presentation
from .selectors import tool_call_get_for_user, tool_call_list_for_user
from .services import tool_call_decide


class ToolCallSerializer(serializers.ModelSerializer):
    run_id = serializers.UUIDField(source="run.pk", read_only=True)
    thread_id = serializers.UUIDField(source="run.thread_id", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    arguments_summary = serializers.SerializerMethodField()
    countdown_s = serializers.SerializerMethodField()

    class Meta:
        model = ToolCall
        fields = [
            "id", "run_id", "thread_id", "call_id", "tool_name", "arguments_summary", "risk", "risk_level",
            "env_context", "status", "summary", "is_error", "attempts", "duration_ms", "requested_at",
            "decision", "decided_by", "decided_at", "countdown_s", "created_at",
        ]

    def get_arguments_summary(self, obj) -> str:
        return tool_call_presentation(obj)["arguments_summary"]

    def get_countdown_s(self, obj) -> int:
        return tool_call_presentation(obj)["countdown_s"]

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["env_context"] = data["env_context"] or None  # prod | staging | dev | null, as in events
        return data


class ToolCallListApi(generics.ListAPIView):
    """Tool calls the caller may see; ``?status=awaiting_approval`` lists pending approvals."""

    serializer_class = ToolCallSerializer

    @extend_schema(parameters=[OpenApiParameter("status", str, description="e.g. awaiting_approval")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return tool_call_list_for_user(user=self.request.user, status=self.request.query_params.get("status", ""))


class DecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["approve", "deny"])


class ToolCallDecisionApi(APIView):
    """Approve or deny: 403 not allowed, 409 already decided or countdown not over."""

    @extend_schema(request=DecisionSerializer, responses=ToolCallSerializer)
    def post(self, request, tool_call_id):
        tool_call = tool_call_get_for_user(user=request.user, tool_call_id=tool_call_id)
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        decided = tool_call_decide(tool_call=tool_call, user=request.user, decision=data.validated_data["decision"])
        return Response(ToolCallSerializer(decided).data)
