"""``/api/v1/policy-simulations/``, ``/api/v1/policy-drafts/``, ``/api/v1/policy-versions/``
(DESIGN §6). Only a workspace admin holding the tool-policy and approval-rule permissions may
use them; another workspace's simulation or draft is a 404. Errors: ``{"error": {"code",
"message", "field"?}}`` (``policies.services``)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from chatplatform.errors import ServiceError

from .models import PolicyDraft, PolicySimulation, PolicyVersion
from .selectors import (
    drafts_for_user,
    simulation_calls_page,
    simulation_get_for_user,
    simulation_summary,
    versions_for_user,
)
from .services import (
    DAYS_MAX,
    draft_apply,
    draft_approve,
    draft_create,
    draft_discard,
    draft_get_for_user,
    four_eyes_required,
    policy_admin_workspace,
    simulation_run,
    version_rollback,
)


def _user_name(user) -> str | None:
    return user.get_username() if user else None


def simulation_data(sim: PolicySimulation) -> dict:
    return {
        "id": sim.pk, "workspace": sim.workspace_id, "draft": sim.draft_id, "days": sim.days,
        "since": sim.since, "until": sim.until, "covered_from": sim.covered_from, "truncated": sim.truncated,
        "truncated_reason": sim.truncated_reason, "rows_scanned": sim.rows_scanned, "duration_ms": sim.duration_ms,
        "changes": sim.changes, "summary": simulation_summary(sim), "groups": sim.groups,
        "calls_url": f"/api/v1/policy-simulations/{sim.pk}/calls/",
    }


def draft_data(draft: PolicyDraft) -> dict:
    return {
        "id": draft.pk, "workspace": draft.workspace_id, "title": draft.title, "reason": draft.reason,
        "changes": draft.changes, "status": draft.status, "created_by": _user_name(draft.created_by),
        "created_at": draft.created_at, "approved_by": _user_name(draft.approved_by), "approved_at": draft.approved_at,
        "last_simulation": draft.last_simulation_id, "applied_version": draft.applied_version_id,
        "four_eyes": four_eyes_required(),
    }


def version_data(version: PolicyVersion) -> dict:
    return {
        "number": version.number, "created_at": version.created_at, "reason": version.reason,
        "changes": version.changes, "created_by": _user_name(version.created_by),
        "approved_by": _user_name(version.approved_by), "applied_by": _user_name(version.applied_by),
        "draft": version.draft_id, "fingerprint": version.fingerprint,
    }


class SimulationCreateSerializer(serializers.Serializer):
    workspace = serializers.IntegerField(required=False, help_text=_("Whose recorded calls to replay (with changes)."))
    draft = serializers.IntegerField(required=False, help_text=_("An existing draft to simulate."))
    changes = serializers.JSONField(required=False, help_text=_("A new draft's changes (policies.drafts)."))
    title = serializers.CharField(required=False, allow_blank=True, max_length=200)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    days = serializers.IntegerField(required=False, default=30, min_value=1, max_value=DAYS_MAX)

    def validate(self, attrs):
        if ("draft" in attrs) == ("changes" in attrs):
            raise serializers.ValidationError({"draft": _("Give either a draft or changes.")})
        if "changes" in attrs and "workspace" not in attrs:
            raise serializers.ValidationError({"workspace": _("Name the workspace whose calls to replay.")})
        return attrs


class PolicySimulationCreateApi(APIView):
    """POST: simulate a draft (``draft``) or new changes (``changes`` + ``workspace``: a
    draft is made of them) over the last ``days`` days. 201 with the result: ``summary``
    (counts by change kind, tool, role, environment), ``groups`` and ``calls_url``."""

    @extend_schema(request=SimulationCreateSerializer, responses={201: dict})
    def post(self, request):
        data = SimulationCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        attrs = data.validated_data
        if "draft" in attrs:
            draft = draft_get_for_user(user=request.user, draft_id=attrs["draft"])
        else:
            workspace = policy_admin_workspace(user=request.user, workspace_id=attrs["workspace"])
            draft = draft_create(user=request.user, workspace=workspace, changes=attrs["changes"],
                                 title=attrs.get("title", ""), reason=attrs.get("reason", ""))
        sim = simulation_run(user=request.user, draft=draft, days=attrs["days"])
        return Response(simulation_data(sim), status=status.HTTP_201_CREATED)


class PolicySimulationDetailApi(APIView):
    """GET: one simulation's result (as POST returned it)."""

    @extend_schema(responses={200: dict})
    def get(self, request, simulation_id: str):
        return Response(simulation_data(simulation_get_for_user(user=request.user, simulation_id=simulation_id)))


class PolicySimulationCallsApi(APIView):
    """GET ``?change=&page=``: the changed calls, newest first, ``POLICY_SIM_PAGE_SIZE`` a page."""

    @extend_schema(parameters=[OpenApiParameter("change", str), OpenApiParameter("page", int)],
                   responses={200: dict})
    def get(self, request, simulation_id: str):
        sim = simulation_get_for_user(user=request.user, simulation_id=simulation_id)
        page = request.query_params.get("page", "1")
        return Response(simulation_calls_page(sim=sim, change=request.query_params.get("change", ""),
                                              page=int(page) if page.isdigit() and len(page) <= 9 else 1))


class DraftCreateSerializer(serializers.Serializer):
    workspace = serializers.IntegerField()
    changes = serializers.JSONField()
    title = serializers.CharField(required=False, allow_blank=True, max_length=200)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class PolicyDraftListCreateApi(APIView):
    """GET: drafts of the workspaces the caller administers, newest first (50). POST: a new
    draft (400 naming a deleted tool or a bad field)."""

    @extend_schema(operation_id="v1_policy_drafts_list", responses={200: dict})
    def get(self, request):
        return Response({"results": [draft_data(d) for d in drafts_for_user(user=request.user)[:50]]})

    @extend_schema(request=DraftCreateSerializer, responses={201: dict})
    def post(self, request):
        data = DraftCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        attrs = data.validated_data
        workspace = policy_admin_workspace(user=request.user, workspace_id=attrs["workspace"])
        draft = draft_create(user=request.user, workspace=workspace, changes=attrs["changes"],
                             title=attrs.get("title", ""), reason=attrs.get("reason", ""))
        return Response(draft_data(draft), status=status.HTTP_201_CREATED)


class PolicyDraftDetailApi(APIView):
    @extend_schema(responses={200: dict})
    def get(self, request, draft_id: str):
        return Response(draft_data(draft_get_for_user(user=request.user, draft_id=draft_id)))


class PolicyDraftApproveApi(APIView):
    """POST: approve another admin's simulated draft (403 own draft; 409 stale or not open)."""

    @extend_schema(request=None, responses={200: dict})
    def post(self, request, draft_id: str):
        draft = draft_get_for_user(user=request.user, draft_id=draft_id)
        return Response(draft_data(draft_approve(user=request.user, draft=draft)))


class PolicyDraftApplyApi(APIView):
    """POST: apply the draft to the live policy; 201 with the new version (409 four eyes
    missing, stale, not simulated or not open)."""

    @extend_schema(request=None, responses={201: dict})
    def post(self, request, draft_id: str):
        draft = draft_get_for_user(user=request.user, draft_id=draft_id)
        return Response(version_data(draft_apply(user=request.user, draft=draft)), status=status.HTTP_201_CREATED)


class PolicyDraftDiscardApi(APIView):
    """POST: discard an open or approved draft (it can no longer be approved or applied)."""

    @extend_schema(request=None, responses={200: dict})
    def post(self, request, draft_id: str):
        draft = draft_get_for_user(user=request.user, draft_id=draft_id)
        draft_discard(draft=draft)
        return Response(draft_data(draft))


class PolicyVersionListApi(APIView):
    """GET: the policy versions, newest first (who, when, what changed, why)."""

    @extend_schema(operation_id="v1_policy_versions_list", responses={200: dict})
    def get(self, request):
        return Response({"results": [version_data(v) for v in versions_for_user(user=request.user)[:100]]})


class RollbackSerializer(serializers.Serializer):
    workspace = serializers.IntegerField(help_text=_("Whose calls the rollback draft's simulation replays."))
    days = serializers.IntegerField(required=False, default=30, min_value=1, max_value=DAYS_MAX)


class PolicyVersionRollbackApi(APIView):
    """POST: a draft restoring version ``number``, simulated; 201 with the draft (approve and
    apply it as any draft)."""

    @extend_schema(request=RollbackSerializer, responses={201: dict})
    def post(self, request, number: str):
        data = RollbackSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        workspace = policy_admin_workspace(user=request.user, workspace_id=data.validated_data["workspace"])
        version = versions_for_user(user=request.user).filter(number=number).first() if number.isdigit() and len(number) <= 9 else None
        if version is None:
            raise ServiceError("not_found", _("No such version."), 404)
        draft = version_rollback(user=request.user, workspace=workspace, version=version,
                                 days=data.validated_data["days"])
        return Response(draft_data(draft), status=status.HTTP_201_CREATED)
