"""``/api/v1/assistants/``: workspace assistants (DESIGN §6, *Workspace assistants*).

Every read is scoped to the caller (``selectors.assistants_for_user``): another workspace's
assistant or another user's private one is a 404. Writes call one service each."""

from __future__ import annotations

from django.utils.functional import lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import Provider
from chat.selectors import workspace_get_for_user

from .models import Assistant
from .presets import model_id
from .selectors import (
    assistant_can_edit,
    assistant_get_for_user,
    assistants_for_user,
    tool_choices_for,
    workspace_admin,
)
from .services import (
    DESCRIPTION_MAX,
    NAME_MAX,
    assistant_create,
    assistant_delete,
    assistant_moderate,
    assistant_update,
)

# Formatted when shown (a lazy string formatted at import would be fixed in the default language).
_name_too_long = lazy(lambda: gettext("An assistant's name is at most %(n)d characters.") % {"n": NAME_MAX}, str)


class AssistantSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    model_id = serializers.SerializerMethodField(help_text='The id on /v1 and in the model picker: "assistant:<id>".')
    workspace = serializers.CharField(source="workspace.slug", read_only=True)
    owner = serializers.SerializerMethodField()
    name = serializers.CharField()
    description = serializers.CharField()
    provider = serializers.CharField(source="provider.slug", read_only=True, allow_null=True, default=None)
    model = serializers.CharField()
    instructions = serializers.CharField()
    tools = serializers.ListField(child=serializers.CharField())
    knowledge_tags = serializers.ListField(child=serializers.CharField())
    knowledge_items = serializers.ListField(child=serializers.CharField())
    starter_prompts = serializers.ListField(child=serializers.CharField())
    visibility = serializers.CharField()
    featured = serializers.BooleanField()
    disabled = serializers.BooleanField()
    can_edit = serializers.SerializerMethodField()
    can_moderate = serializers.SerializerMethodField(help_text="The caller is an admin of its workspace.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_model_id(self, obj) -> str:
        return model_id(obj)

    def get_owner(self, obj) -> str:
        return obj.owner.get_username() if obj.owner else ""

    def get_can_edit(self, obj) -> bool:
        return assistant_can_edit(user=self.context["user"], assistant=obj)

    def get_can_moderate(self, obj) -> bool:
        return workspace_admin(user=self.context["user"], workspace_id=obj.workspace_id)


class AssistantWriteSerializer(serializers.Serializer):
    # The page shows these words as they are (DESIGN §6: a field message).
    name = serializers.CharField(max_length=NAME_MAX, error_messages={
        "blank": _("Give the assistant a name."), "required": _("Give the assistant a name."),
        "max_length": _name_too_long()})
    description = serializers.CharField(max_length=DESCRIPTION_MAX, required=False, allow_blank=True)
    provider = serializers.SlugRelatedField(slug_field="slug", queryset=Provider.objects.filter(enabled=True),
                                            error_messages={"does_not_exist": _("No enabled provider %(value)s."),
                                                            "required": _("Pick the model the assistant runs on.")})
    model = serializers.CharField(max_length=200, required=False, allow_blank=True)
    instructions = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    tools = serializers.ListField(child=serializers.CharField(max_length=100), required=False, max_length=200)
    knowledge_tags = serializers.ListField(child=serializers.CharField(max_length=50), required=False)
    knowledge_items = serializers.ListField(child=serializers.CharField(max_length=64), required=False)
    starter_prompts = serializers.ListField(child=serializers.CharField(max_length=200, allow_blank=True),
                                            required=False)
    visibility = serializers.ChoiceField(choices=Assistant.Visibility.choices, required=False)


class AssistantCreateSerializer(AssistantWriteSerializer):
    workspace = serializers.CharField(help_text="Workspace slug or id.")


class AssistantModerateSerializer(serializers.Serializer):
    featured = serializers.BooleanField(required=False)
    disabled = serializers.BooleanField(required=False)


class AssistantListCreateApi(APIView):
    """GET: the assistants the caller may see (``?workspace=``: one workspace), featured
    first. POST: make one (**201**)."""

    @extend_schema(parameters=[OpenApiParameter("workspace", str, required=False)],
                   responses=AssistantSerializer(many=True), operation_id="assistants_list")
    def get(self, request):
        workspace = request.query_params.get("workspace")
        workspace_id = workspace_get_for_user(user=request.user, workspace=workspace).pk if workspace else None
        rows = assistants_for_user(user=request.user, workspace_id=workspace_id)
        return Response(AssistantSerializer(rows, many=True, context={"user": request.user}).data)

    @extend_schema(request=AssistantCreateSerializer, responses={201: AssistantSerializer},
                   operation_id="assistants_create")
    def post(self, request):
        data = AssistantCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        workspace = workspace_get_for_user(user=request.user, workspace=values.pop("workspace"))
        assistant = assistant_create(user=request.user, workspace=workspace, **values)
        return Response(AssistantSerializer(assistant, context={"user": request.user}).data,
                        status=status.HTTP_201_CREATED)


class AssistantDetailApi(APIView):
    """GET one; PATCH its fields (owner or workspace admin); DELETE it (**204**)."""

    @extend_schema(responses=AssistantSerializer, operation_id="assistants_retrieve")
    def get(self, request, assistant_id):
        assistant = assistant_get_for_user(user=request.user, assistant_id=assistant_id)
        return Response(AssistantSerializer(assistant, context={"user": request.user}).data)

    @extend_schema(request=AssistantWriteSerializer, responses=AssistantSerializer, operation_id="assistants_update")
    def patch(self, request, assistant_id):
        assistant = assistant_get_for_user(user=request.user, assistant_id=assistant_id)
        data = AssistantWriteSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        assistant = assistant_update(user=request.user, assistant=assistant, **data.validated_data)
        return Response(AssistantSerializer(assistant, context={"user": request.user}).data)

    @extend_schema(responses={204: None}, operation_id="assistants_destroy")
    def delete(self, request, assistant_id):
        assistant = assistant_get_for_user(user=request.user, assistant_id=assistant_id)
        assistant_delete(user=request.user, assistant=assistant)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AssistantModerateApi(APIView):
    """POST ``{featured?, disabled?}``: a workspace admin's feature / disable (else 403)."""

    @extend_schema(request=AssistantModerateSerializer, responses=AssistantSerializer,
                   operation_id="assistants_moderate")
    def post(self, request, assistant_id):
        assistant = assistant_get_for_user(user=request.user, assistant_id=assistant_id)
        data = AssistantModerateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        assistant = assistant_moderate(user=request.user, assistant=assistant, **data.validated_data)
        return Response(AssistantSerializer(assistant, context={"user": request.user}).data)


class AssistantToolsApi(APIView):
    """GET ``?workspace=``: the tools the caller may put in an assistant there."""

    @extend_schema(parameters=[OpenApiParameter("workspace", str, required=True)],
                   responses=inline_serializer("AssistantTool", {"name": serializers.CharField(),
                                                                 "description": serializers.CharField()}, many=True),
                   operation_id="assistants_tools")
    def get(self, request):
        workspace = workspace_get_for_user(user=request.user, workspace=request.query_params.get("workspace", ""))
        return Response(tool_choices_for(user=request.user, workspace_id=workspace.pk))
