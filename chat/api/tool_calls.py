"""Approval endpoints: ``GET /api/v1/tool-calls/``, ``GET /api/v1/approvals/`` (the caller's
inbox) and ``POST /api/v1/tool-calls/{id}/decision/``."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.approvals.policy import decider_check
from agents.approvals.requests import approval_fields
from agents.approvals.selectors import inbox_for_user, tool_call_get_for_decider
from agents.models import ToolCall
from agents.presentation import shown_arguments, shown_named_arguments, tool_call_presentation
from agents.selectors import tool_call_list_for_user
from agents.services import tool_call_decide
from chat.selectors import thread_blinded_for, thread_get_for_user, thread_title_for


class ToolCallSerializer(serializers.ModelSerializer):
    run_id = serializers.UUIDField(source="run.pk", read_only=True)
    thread_id = serializers.UUIDField(source="run.thread_id", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    arguments_summary = serializers.SerializerMethodField()
    countdown_s = serializers.SerializerMethodField()
    thread_title = serializers.CharField(source="run.thread.title", read_only=True)
    workspace = serializers.CharField(source="run.thread.workspace.slug", read_only=True)
    arguments = serializers.SerializerMethodField()
    arguments_shown = serializers.SerializerMethodField()
    approval = serializers.SerializerMethodField()
    decisions = serializers.SerializerMethodField()
    may_decide = serializers.SerializerMethodField()
    thread_visible = serializers.SerializerMethodField()

    class Meta:
        model = ToolCall
        fields = [
            "id", "run_id", "thread_id", "thread_title", "workspace", "call_id", "tool_name", "arguments",
            "arguments_shown", "arguments_summary", "risk", "risk_level", "env_context", "status", "summary", "is_error", "attempts",
            "duration_ms", "requested_at", "decision", "decided_by", "decided_at", "countdown_s", "approval",
            "decisions", "may_decide", "thread_visible", "created_at",
        ]

    def get_arguments(self, obj) -> dict:
        return shown_arguments(obj)

    def get_arguments_shown(self, obj) -> dict:
        """``arguments`` as people see them: named by the tool (a knowledge item's title for
        its id, only what everyone who may see the call may see)."""
        return shown_named_arguments(obj)

    def get_approval(self, obj) -> dict | None:
        """Null for a call that never asked; else ``{rule, approvers, approver_names,
        approvals_needed, approvals_so_far, approved_by, expires_at, requester, waiting_text}``."""
        if obj.requested_at is None:
            return None
        return approval_fields(obj, obj.run, with_names=obj.status == ToolCall.Status.AWAITING_APPROVAL)

    def get_decisions(self, obj) -> list[dict]:
        """Each person's decision: ``[{username, role, as_requester, decision, decided_at}]``."""
        return [{"username": d.username, "role": d.role, "as_requester": d.as_requester, "decision": d.decision,
                 "decided_at": d.decided_at.isoformat()} for d in obj.approvals.all()]

    def get_may_decide(self, obj) -> bool:
        """Whether the caller may decide this call now."""
        request = self.context.get("request")
        if request is None or obj.status != ToolCall.Status.AWAITING_APPROVAL:
            return False
        if obj.approvals.filter(user=request.user).exists():
            return False
        return decider_check(ledger=obj, run=obj.run, user=request.user).allowed

    def get_thread_visible(self, obj) -> bool:
        """Whether the caller may open the call's thread (an approver by role may not: the
        inbox then shows the title without a link to a page that would be a 404)."""
        request = self.context.get("request")
        if request is None:
            return False
        try:
            thread = thread_get_for_user(user=request.user, thread_id=obj.run.thread_id, metadata=True)
        except Http404:
            return False
        return not thread.blinded

    def get_arguments_summary(self, obj) -> str:
        return tool_call_presentation(obj)["arguments_summary"]

    def get_countdown_s(self, obj) -> int:
        return tool_call_presentation(obj)["countdown_s"]

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["env_context"] = data["env_context"] or None  # prod | staging | dev | null, as in events
        request = self.context.get("request")
        if request is not None and thread_blinded_for(user=request.user, thread=instance.run.thread) \
                and not data.get("may_decide"):
            # Admin-blind: the ledger (name, status, times, risk, environment) without what the
            # call carried. A designated approver deciding it still sees its arguments.
            data.update({"arguments": {}, "arguments_shown": {}, "arguments_summary": "", "summary": "",
                         "thread_title": thread_title_for(instance.run.thread, blinded=True), "blinded": True})
        else:
            data["blinded"] = False
        return data


class ToolCallListApi(generics.ListAPIView):
    """Tool calls the caller may see; ``?status=awaiting_approval`` lists pending approvals."""

    serializer_class = ToolCallSerializer

    @extend_schema(parameters=[OpenApiParameter("status", str, description="e.g. awaiting_approval")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return tool_call_list_for_user(user=self.request.user, status=self.request.query_params.get("status", ""))


class ApprovalInboxApi(generics.ListAPIView):
    """The caller's approval inbox: every call waiting for approval they may decide now,
    across threads and workspaces, oldest request first (not paginated)."""

    serializer_class = ToolCallSerializer
    pagination_class = None

    def get_queryset(self):
        return inbox_for_user(user=self.request.user)


class DecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["approve", "deny"])


class ToolCallDecisionApi(APIView):
    """Approve or deny under the call's approval rule: 403 ``not_allowed`` (with the reason),
    409 ``not_pending`` / ``expired`` / ``already_decided`` / ``countdown``. The first of two
    approvals answers 200 with the call still ``awaiting_approval``."""

    @extend_schema(request=DecisionSerializer, responses=ToolCallSerializer)
    def post(self, request, tool_call_id):
        tool_call = tool_call_get_for_decider(user=request.user, tool_call_id=tool_call_id)
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        decided = tool_call_decide(tool_call=tool_call, user=request.user, decision=data.validated_data["decision"])
        return Response(ToolCallSerializer(decided, context={"request": request}).data)
