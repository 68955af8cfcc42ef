"""``GET /api/v1/threads/{id}/tools/``: the tools the chat offers the caller in one thread —
built-ins and external MCP servers' — computed by the same pipeline that builds each model
request (policy, role, thread settings), with the reason for each tool left out."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.pipeline import policy_defaults, policy_views, tool_pipeline
from chat.selectors import role_name_in, thread_get_for_user


def thread_tools_for_user(*, user, thread) -> dict:
    """``{"role", "tools": [{"name", "description", "risk", "needs_approval", "source"}],
    "unavailable": [{"name", "reason"}]}`` for ``user`` in ``thread`` (already
    permission-checked). The role is the user's in the thread's workspace."""
    role = role_name_in(user=user, workspace_id=thread.workspace_id)
    policies = policy_views()
    offer = tool_pipeline(role_name=role, object_type=None, allow_model_save=thread.allow_model_save,
                          policies=policies)
    tools = []
    for spec in offer.tools:
        policy = policies.get(spec.name) or policy_defaults(spec)
        tools.append({"name": spec.name, "description": spec.description[:300], "risk": policy.risk,
                      "needs_approval": policy.risk == "dangerous" or policy.approval_mode == "always",
                      "source": spec.source})
    unavailable = [{"name": name, "reason": reason} for name, reason in sorted(offer.excluded.items())]
    return {"role": role, "tools": tools, "unavailable": unavailable}


class ThreadToolsApi(APIView):
    @extend_schema(responses=inline_serializer("ThreadTools", {
        "role": serializers.CharField(),
        "tools": serializers.ListField(child=serializers.DictField()),
        "unavailable": serializers.ListField(child=serializers.DictField()),
    }))
    def get(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, metadata=True)
        return Response(thread_tools_for_user(user=request.user, thread=thread))
