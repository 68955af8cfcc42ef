"""``/api/v1/prompts/``: the prompt library (DESIGN §6 Prompt library).

Lists and reads return what the caller may use — their personal prompts and their
workspaces' shared ones — with ``variables`` parsed from the body (``prompts.variables``) and
``can_edit`` for the caller now. Another user's personal prompt or another workspace's prompt
is a 404. Field refusals are 400 ``invalid`` with ``"<field>: <message>"``.
"""

from __future__ import annotations

from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.selectors import workspace_get_for_user

from .selectors import (
    SCOPES,
    prompt_can_edit,
    prompt_edit_checker,
    prompt_get_for_user,
    prompt_list_for_user,
)
from .services import PromptRejected, prompt_create, prompt_delete, prompt_update
from .variables import prompt_variables


class VariableSerializer(serializers.Serializer):
    name = serializers.CharField()
    default = serializers.CharField(allow_null=True, help_text="null: no default; the value must be filled.")


class PromptSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    command = serializers.CharField(read_only=True, help_text="Typed as /command in the composer.")
    title = serializers.CharField(read_only=True)
    body = serializers.CharField(read_only=True)
    variables = serializers.SerializerMethodField()
    scope = serializers.SerializerMethodField()
    workspace = serializers.SerializerMethodField()
    workspace_name = serializers.SerializerMethodField()
    author = serializers.SerializerMethodField()
    can_edit = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)

    @extend_schema_field(VariableSerializer(many=True))
    def get_variables(self, obj) -> list[dict]:
        return [{"name": v.name, "default": v.default} for v in prompt_variables(obj.body)]

    @extend_schema_field(serializers.ChoiceField(choices=SCOPES))
    def get_scope(self, obj) -> str:
        return "workspace" if obj.is_shared else "personal"

    def get_workspace(self, obj) -> str | None:
        return obj.workspace.slug if obj.workspace_id else None

    def get_workspace_name(self, obj) -> str | None:
        return obj.workspace.name if obj.workspace_id else None

    def get_author(self, obj) -> str:
        return obj.owner.get_username()

    def get_can_edit(self, obj) -> bool:
        may_edit = self.context.get("may_edit")  # a list's one-query checker
        return may_edit(obj) if may_edit else prompt_can_edit(user=self.context["request"].user, prompt=obj)


class PromptWriteSerializer(serializers.Serializer):
    """Lengths and shapes are checked by the service (one set of rules for the API and the
    page); here only types."""

    command = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    title = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    body = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    workspace = serializers.CharField(required=False, allow_null=True, allow_blank=True,
                                      help_text="A workspace's slug or id to share with; null or empty: personal.")


def _workspace(request, value):
    if value in (None, ""):
        return None
    try:
        return workspace_get_for_user(user=request.user, workspace=value)
    except Http404 as exc:
        raise ValidationError({"workspace": [_("You are not a member of a workspace %(w)s.") % {"w": value}]}) from exc


def _field_error(exc: PromptRejected):
    """A service's field refusal in DRF's shape, so the message names the field."""
    if exc.field and exc.status == 400:
        return ValidationError({exc.field: [exc.message]})
    return exc


class PromptListCreateApi(APIView):
    """GET: the prompts the caller may use, by command. POST: a new prompt, **201**."""

    @extend_schema(
        operation_id="prompts_list", responses=PromptSerializer(many=True),
        parameters=[
            OpenApiParameter("workspace", OpenApiTypes.STR, description="Only this workspace's shared prompts "
                             "(slug or id) besides the caller's personal ones; 404 if not a member."),
            OpenApiParameter("scope", OpenApiTypes.STR, enum=list(SCOPES), description="Only personal or only "
                             "workspace prompts."),
            OpenApiParameter("q", OpenApiTypes.STR, description="Words each found in the command, title or body."),
        ])
    def get(self, request):
        params = request.query_params
        workspace = None
        if params.get("workspace"):
            workspace = workspace_get_for_user(user=request.user, workspace=params["workspace"])
        scope = params.get("scope", "")
        if scope and scope not in SCOPES:
            raise ValidationError({"scope": [_("scope is personal or workspace.")]})
        rows = prompt_list_for_user(user=request.user, workspace=workspace, scope=scope, q=params.get("q", "")[:200])
        context = {"request": request, "may_edit": prompt_edit_checker(user=request.user)}
        return Response(PromptSerializer(rows, many=True, context=context).data)

    @extend_schema(operation_id="prompts_create", request=PromptWriteSerializer, responses={201: PromptSerializer})
    def post(self, request):
        data = PromptWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        try:
            prompt = prompt_create(user=request.user, command=values.get("command", ""), title=values.get("title", ""),
                                   body=values.get("body", ""), workspace=_workspace(request, values.get("workspace")))
        except PromptRejected as exc:
            raise _field_error(exc) from exc
        return Response(PromptSerializer(prompt, context={"request": request}).data, status=status.HTTP_201_CREATED)


class PromptDetailApi(APIView):
    """GET one prompt; PATCH the given fields (``workspace``: share, move, or null to make it
    personal again); DELETE it (**204**)."""

    @extend_schema(operation_id="prompts_retrieve", responses=PromptSerializer)
    def get(self, request, prompt_id):
        prompt = prompt_get_for_user(user=request.user, prompt_id=prompt_id)
        return Response(PromptSerializer(prompt, context={"request": request}).data)

    @extend_schema(operation_id="prompts_update", request=PromptWriteSerializer, responses=PromptSerializer)
    def patch(self, request, prompt_id):
        prompt = prompt_get_for_user(user=request.user, prompt_id=prompt_id)
        data = PromptWriteSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        if "workspace" in values:
            values["workspace"] = _workspace(request, values["workspace"])
        try:
            prompt = prompt_update(prompt=prompt, by=request.user, **values)
        except PromptRejected as exc:
            raise _field_error(exc) from exc
        return Response(PromptSerializer(prompt, context={"request": request}).data)

    @extend_schema(operation_id="prompts_destroy", responses={204: None})
    def delete(self, request, prompt_id):
        prompt_delete(prompt=prompt_get_for_user(user=request.user, prompt_id=prompt_id), by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
