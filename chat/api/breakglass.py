"""REST for break-glass into admin-blind chats (``chat.breakglass``).

``/api/v1/break-glass/`` (GET list, POST request), ``/api/v1/break-glass/<id>/`` (GET),
``…/<id>/approve/``, ``…/<id>/deny/``, ``…/<id>/revoke/`` (POST), and the owner's audit of one
thread, ``/api/v1/threads/<id>/break-glass/`` (GET).
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.breakglass import (
    audit_for_owner,
    request_create,
    request_decide,
    request_get_for_user,
    request_revoke,
    request_state,
    requests_for_user,
)
from chat.models import BreakGlassRead, BreakGlassRequest
from chat.selectors import thread_get_for_user, thread_title_for
from chatplatform.api import ApiError


def _username(user) -> str | None:
    return user.get_username() if user is not None else None


class BreakGlassReadSerializer(serializers.ModelSerializer):
    user = serializers.SerializerMethodField()

    class Meta:
        model = BreakGlassRead
        fields = ["user", "what", "at"]

    def get_user(self, obj) -> str | None:
        return _username(obj.user)


class BreakGlassRequestSerializer(serializers.ModelSerializer):
    """A request as admins (and its requester) see it. ``state``: pending | expired | approved
    (access open) | ended | denied | revoked. ``thread_title``: "" unless the owner opened the
    title to admins."""

    workspace = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    thread_id = serializers.UUIDField(source="thread_ref", read_only=True)
    thread_title = serializers.SerializerMethodField()
    thread_owner = serializers.SerializerMethodField()
    requested_by = serializers.SerializerMethodField()
    decided_by = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField()
    may_decide = serializers.SerializerMethodField()
    reads = serializers.SerializerMethodField()

    class Meta:
        model = BreakGlassRequest
        fields = ["id", "workspace", "thread_id", "thread_title", "thread_owner", "requested_by", "reason", "state",
                  "created_at", "expires_at", "decided_by", "decided_at", "decision_note", "access_until",
                  "may_decide", "reads"]
        read_only_fields = fields

    def get_thread_title(self, obj) -> str:
        return thread_title_for(obj.thread, blinded=True) if obj.thread is not None else ""

    def get_thread_owner(self, obj) -> str | None:
        return _username(obj.thread_owner)

    def get_requested_by(self, obj) -> str | None:
        return _username(obj.requested_by)

    def get_decided_by(self, obj) -> str | None:
        return _username(obj.decided_by)

    def get_state(self, obj) -> str:
        return request_state(obj)

    def get_may_decide(self, obj) -> bool:
        """Whether the caller may approve or deny it now (pending, not theirs)."""
        request = self.context.get("request")
        return (request is not None and request_state(obj) == "pending"
                and obj.requested_by_id != request.user.pk)

    def get_reads(self, obj) -> list[dict]:
        """Every read under this grant: ``[{user, what, at}]``, oldest first."""
        return BreakGlassReadSerializer(obj.reads.all(), many=True).data


class BreakGlassCreateSerializer(serializers.Serializer):
    thread = serializers.UUIDField(help_text=_("The chat to read (its id)."))
    reason = serializers.CharField(max_length=2000, help_text=_("Why: shown to the approving admin and the owner."))


class BreakGlassDecisionSerializer(serializers.Serializer):
    note = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class BreakGlassListApi(APIView):
    """The requests of the workspaces the caller is an admin of, and their own; newest first.
    ``?state=pending`` (or expired, approved, ended, denied, revoked) narrows."""

    @extend_schema(parameters=[OpenApiParameter("state", str)], responses=BreakGlassRequestSerializer(many=True))
    def get(self, request):
        rows = list(requests_for_user(user=request.user).prefetch_related("reads__user")[:200])
        wanted = request.query_params.get("state", "")
        if wanted:
            rows = [r for r in rows if request_state(r) == wanted]
        return Response(BreakGlassRequestSerializer(rows, many=True, context={"request": request}).data)

    @extend_schema(request=BreakGlassCreateSerializer, responses={201: BreakGlassRequestSerializer})
    def post(self, request):
        data = BreakGlassCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        row = request_create(user=request.user, thread_id=data.validated_data["thread"],
                             reason=data.validated_data["reason"])
        return Response(BreakGlassRequestSerializer(row, context={"request": request}).data,
                        status=status.HTTP_201_CREATED)


class BreakGlassDetailApi(APIView):
    @extend_schema(responses=BreakGlassRequestSerializer)
    def get(self, request, request_id):
        row = request_get_for_user(user=request.user, request_id=request_id)
        return Response(BreakGlassRequestSerializer(row, context={"request": request}).data)


class BreakGlassDecideApi(APIView):
    """``approve`` / ``deny`` (a second admin of the workspace; 403 ``own_request`` for the
    requester, 409 ``expired`` / ``not_pending``) and ``revoke`` (end an open grant)."""

    action = ""

    @extend_schema(request=BreakGlassDecisionSerializer, responses=BreakGlassRequestSerializer)
    def post(self, request, request_id):
        row = request_get_for_user(user=request.user, request_id=request_id)
        if self.action == "revoke":
            row = request_revoke(request=row, user=request.user)
        else:
            data = BreakGlassDecisionSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            row = request_decide(request=row, user=request.user, approve=self.action == "approve",
                                 note=data.validated_data["note"])
        return Response(BreakGlassRequestSerializer(row, context={"request": request}).data)


class ThreadBreakGlassApi(APIView):
    """The owner's view of break-glass on their chat: every approved request (who, why, who
    approved, until when) with every read made under it. Owner only (others: 404)."""

    @extend_schema(responses=BreakGlassRequestSerializer(many=True))
    def get(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        if thread.temporary:
            raise ApiError("not_found", "No such thread.", 404)
        rows = audit_for_owner(thread=thread)
        return Response(BreakGlassRequestSerializer(rows, many=True, context={"request": request}).data)
