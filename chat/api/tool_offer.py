"""``GET /api/v1/threads/{id}/tools/``: the tools the chat offers the caller in one thread —
built-ins and external MCP servers' — computed by the same pipeline that builds each model
request (policy, role, thread settings, the chat's assistant), with the reason for each tool left out."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.pipeline import policy_defaults, policy_views, tool_pipeline
from agents.presets import PresetRefused, preset_for_thread
from agents.tools import ToolContext
from chat.selectors import role_name_in, thread_get_for_user


def thread_tools_for_user(*, user, thread) -> dict:
    """``{"role", "tools": [{"name", "description", "risk", "needs_approval", "source", "connect"}],
    "unavailable": [{"name", "reason"}]}`` for ``user`` in ``thread`` (already
    permission-checked). The role is the user's in the thread's workspace. ``connect``: null,
    or ``{server, name, url}`` for a tool of an OAuth MCP server the user has not connected
    ("connect to use": a call parks on a connect card)."""
    role = role_name_in(user=user, workspace_id=thread.workspace_id)
    policies = policy_views()
    try:
        preset = preset_for_thread(thread=thread, user=user)
        only = preset.tools if preset is not None else None
    except PresetRefused:  # the chat's assistant may not be used now: nothing would be offered
        only = frozenset()
    offer = tool_pipeline(role_name=role, object_type=None, allow_model_save=thread.allow_model_save,
                          policies=policies, only=only)
    tools = []
    ctx = ToolContext(workspace_id=thread.workspace_id, thread_id=str(thread.pk), user_id=user.pk, run_id="",
                      role=role)
    for spec in offer.tools:
        policy = policies.get(spec.name) or policy_defaults(spec)
        needed = spec.connect_check(ctx=ctx, refresh=False) if spec.connect_check is not None else None
        tools.append({"name": spec.name, "description": spec.description[:300], "risk": policy.risk,
                      "needs_approval": policy.risk == "dangerous" or policy.approval_mode == "always",
                      "source": spec.source,
                      # "connect to use": the caller must connect their own account to its server first
                      "connect": {"server": needed.server, "name": needed.server_name, "url": needed.url}
                      if needed is not None else None})
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
