"""REST endpoints for workspaces, threads, messages and runs (DESIGN §6).

Every queryset comes from a selector for ``request.user``; an object of another workspace or
another user's thread is a 404. Views validate input with their serializers and call one
service; a service's ``ServiceError`` becomes the JSON error shape in the exception handler.
"""

from __future__ import annotations

import copy

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.presentation import sees_error_details
from agents.presets import preset_pick
from agents.selectors import default_model_for, model_choice_parse, run_get_for_user
from agents.services import (
    message_edit,
    message_regenerate,
    model_check,
    run_cancel,
    run_create,
    thread_branch_select,
    thread_changes_check,
    thread_duplicate,
    thread_update,
)
from agents.temporary_chats import temporary_chats_close
from chat.export import thread_export_json, thread_export_markdown
from chat.language import language_remember, language_set
from chat.models import Thread, UserPreferences
from chat.organise import folder_get_for_user, thread_organise, thread_organise_check
from chat.selectors import (
    NO_FOLDER,
    attachments_for_messages,
    custom_instructions_for_user,
    memberships_for_user,
    message_branch_for_thread,
    message_get_for_user,
    message_list_for_thread,
    message_versions_for_thread,
    thread_get_for_user,
    thread_list_for_user,
    workspace_get_for_user,
    workspace_list_for_user,
)
from chat.services import (
    custom_instructions_set,
    default_model_set,
    thread_create,
    thread_delete,
    workspace_artifacts_set,
)
from chatplatform.api import ApiError

from .serializers import (
    BranchSelectedSerializer,
    BranchSelectSerializer,
    MessageEditSerializer,
    MessageSerializer,
    PreferencesSerializer,
    RunCreatedSerializer,
    RunCreateSerializer,
    RunOptionsSerializer,
    RunSerializer,
    ThreadCreateSerializer,
    ThreadSerializer,
    ThreadUpdateSerializer,
    WorkspaceSerializer,
    WorkspaceUpdateSerializer,
    ledger_by_call,
    passages_for,
)


class WorkspaceListApi(generics.ListAPIView):
    serializer_class = WorkspaceSerializer

    def get_queryset(self):
        return workspace_list_for_user(user=self.request.user)

    def get_serializer_context(self):
        context = super().get_serializer_context()
        context["roles"] = dict(
            memberships_for_user(user=self.request.user).values_list("workspace_id", "role__name")
        )
        return context


class WorkspaceDetailApi(APIView):
    """One of the caller's workspaces (id or slug; another's: 404) as in the list, with their
    role. PATCH ``{"artifacts_enabled": bool}`` — staff or an admin of the workspace (403
    ``not_allowed`` for other members; 400 for anything but a JSON boolean) — turns artifact
    previews on or off for every member at once (``chat.artifacts``)."""

    @staticmethod
    def _body(request, workspace) -> dict:
        roles = dict(memberships_for_user(user=request.user, workspace_id=workspace.pk)
                     .values_list("workspace_id", "role__name"))
        return WorkspaceSerializer(workspace, context={"roles": roles}).data

    @extend_schema(responses=WorkspaceSerializer)
    def get(self, request, workspace_id):
        return Response(self._body(request, workspace_get_for_user(user=request.user, workspace=workspace_id)))

    @extend_schema(request=WorkspaceUpdateSerializer, responses=WorkspaceSerializer)
    def patch(self, request, workspace_id):
        workspace = workspace_get_for_user(user=request.user, workspace=workspace_id)
        data = WorkspaceUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        workspace = workspace_artifacts_set(user=request.user, workspace_id=workspace.pk,
                                            enabled=data.validated_data["artifacts_enabled"])
        return Response(self._body(request, workspace))


class ThreadListCreateApi(generics.ListAPIView):
    serializer_class = ThreadSerializer

    @extend_schema(parameters=[
        OpenApiParameter("search", str, description="Match titles and message text."),
        OpenApiParameter("workspace", str, description="Workspace slug or id."),
        OpenApiParameter("archived", str, description="true: only archived chats; all: both; default: not archived."),
        OpenApiParameter("folder", str, description="One of your folders' id: its chats; none: the chats in no "
                                                    "folder. Any other id: 404."),
        OpenApiParameter("tag", str, description="Only chats with this tag of yours (any case)."),
    ])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        archived = {"true": True, "1": True, "all": None}.get(params.get("archived", "").lower(), False)
        folder = params.get("folder") or None
        if folder is not None and folder != NO_FOLDER:
            folder = folder_get_for_user(user=self.request.user, folder_id=folder)
        return thread_list_for_user(user=self.request.user, search=params.get("search", "").strip(),
                                    workspace=params.get("workspace") or None, archived=archived,
                                    folder=folder, tag=params.get("tag", ""))

    @extend_schema(request=ThreadCreateSerializer, responses={201: ThreadSerializer})
    def post(self, request):
        data = ThreadCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        workspace = workspace_get_for_user(user=request.user, workspace=values.pop("workspace"))
        assistant = values.pop("assistant", None)
        if assistant is not None:  # a workspace assistant: its model (404 / 403 when it may not be used)
            pick = preset_pick(user=request.user, preset_id=str(assistant), workspace_id=workspace.pk)
            values.update(provider=pick.provider, model=pick.model, assistant_id=pick.preset_id)
        elif "provider" not in request.data:  # none named: the default (the user's, the workspace's, the platform's)
            values["provider"], default_model, _ = default_model_for(user=request.user, workspace_id=workspace.pk)
            values["model"] = values.get("model") or default_model
        if values.get("model"):  # no model: the provider's default, always usable
            model_check(thread=Thread(workspace=workspace, owner=request.user, provider=values.get("provider"),
                                      model=values["model"]), user=request.user)
        temporary_chats_close(owner=request.user)  # starting another chat closes a temporary one
        thread = thread_create(workspace=workspace, owner=request.user, **values)
        return Response(ThreadSerializer(thread).data, status=status.HTTP_201_CREATED)


class ThreadDetailApi(APIView):
    @extend_schema(responses=ThreadSerializer)
    def get(self, request, thread_id):
        # Metadata: an admin blind to the chat gets it too (``blinded: true``, no title or context).
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, metadata=True)
        return Response(ThreadSerializer(thread, context={"viewer": request.user}).data)

    @extend_schema(request=ThreadUpdateSerializer, responses=ThreadSerializer)
    def patch(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        data = ThreadUpdateSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        changes = dict(data.validated_data)
        # Folder and tags are checked before anything is written: the PATCH saves all or nothing.
        organise = {k: changes.pop(k) for k in ("folder", "tags") if k in changes}
        organising = thread_organise_check(thread=thread, user=request.user, **organise)
        if changes.get("assistant") is not None:  # picked like a model: its model comes with it
            pick = preset_pick(user=request.user, preset_id=str(changes.pop("assistant")),
                               workspace_id=thread.workspace_id)
            changes.update(provider=pick.provider, model=pick.model, assistant_id=pick.preset_id)
        elif "assistant" in changes:
            changes["assistant_id"] = changes.pop("assistant")  # null: the chat leaves its assistant
        elif "model" in changes or "provider" in changes:
            changes["assistant_id"] = None  # a plain model picked: the assistant is left
        if "model" in changes or "provider" in changes:
            # A model the caller's role may not use is refused now, not at every later send.
            candidate = copy.copy(thread)
            for field in ("provider", "model"):
                if field in changes:
                    setattr(candidate, field, changes[field])
            model_check(thread=candidate, user=request.user)
        # Checked (a refused ui_context audited) before the all-or-nothing write, whose rollback
        # would take the audit row with it.
        changes = thread_changes_check(thread=thread, user=request.user, changes=changes)
        with transaction.atomic():  # all or nothing: the folder may be gone by now (thread_organise)
            if changes or not organise:  # organising alone is not activity (updated_at stays)
                thread = thread_update(thread=thread, user=request.user, checked=True, **changes)
            thread_organise(thread=thread, user=request.user, change=organising)
        return Response(ThreadSerializer(thread).data)

    @extend_schema(responses={204: None})
    def delete(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        if thread.temporary:  # closed: gone now, unless a run is unfinished (then the reaper's, after it)
            temporary_chats_close(owner=request.user, thread_id=thread.pk)
        else:
            thread_delete(thread=thread)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ThreadDuplicateApi(APIView):
    @extend_schema(request=None, responses={201: ThreadSerializer})
    def post(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        copy = thread_duplicate(thread=thread, owner=request.user)
        return Response(ThreadSerializer(copy).data, status=status.HTTP_201_CREATED)


class ThreadMessagesApi(generics.ListAPIView):
    """The selected branch of the conversation, root first (``?all=true``: every version of
    every message, in append order). Each message carries ``parent_id`` and ``versions``."""

    serializer_class = MessageSerializer
    pagination_class = None

    def get_queryset(self):
        thread = thread_get_for_user(user=self.request.user, thread_id=self.kwargs["thread_id"], metadata=True)
        return message_list_for_thread(thread=thread).select_related("run")

    @extend_schema(parameters=[OpenApiParameter("all", bool, description="Every version, not only the selected branch.")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def list(self, request, *args, **kwargs):
        thread = thread_get_for_user(user=request.user, thread_id=self.kwargs["thread_id"], reading="messages")
        if request.query_params.get("all", "").lower() in ("1", "true"):
            messages = list(message_list_for_thread(thread=thread).select_related("run"))
        else:
            messages = message_branch_for_thread(thread_id=thread.pk, leaf_id=thread.leaf_id)
        context = {**self.get_serializer_context(), "ledger": ledger_by_call(messages),
                   "detailed": sees_error_details(user=request.user, workspace_id=thread.workspace_id),
                   "versions": message_versions_for_thread(thread_id=thread.pk),
                   "passages": passages_for(messages, thread),
                   "attachments": attachments_for_messages(m.pk for m in messages)}
        return Response(MessageSerializer(messages, many=True, context=context).data)


class ThreadBranchApi(APIView):
    """Select which version of a place in the conversation is shown and continued."""

    @extend_schema(request=BranchSelectSerializer, responses=BranchSelectedSerializer)
    def post(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        data = BranchSelectSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        leaf = thread_branch_select(thread=thread, message_id=data.validated_data["message_id"])
        return Response({"leaf_id": str(leaf.pk)})


class ThreadExportApi(APIView):
    """The chat as a file: ``?as=markdown`` (the selected branch, readable) or ``?as=json``
    (default: every message with its branch structure, tool calls and citations)."""

    @extend_schema(parameters=[OpenApiParameter("as", str, enum=["json", "markdown"])], responses={200: None})
    def get(self, request, thread_id):
        from django.http import HttpResponse, JsonResponse

        kind = request.query_params.get("as", "json")
        if kind not in ("json", "markdown"):
            raise ApiError("invalid", gettext('"as" must be "json" or "markdown".'), 400)
        # A compliance export of a blinded chat is this same export under a break-glass grant.
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, reading=f"export:{kind}")
        name = f"chat-{thread.pk}"
        if kind == "markdown":
            response = HttpResponse(thread_export_markdown(thread=thread), content_type="text/markdown; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="{name}.md"'
        else:
            response = JsonResponse(thread_export_json(thread=thread, viewer=request.user), json_dumps_params={"ensure_ascii": False})
            response["Content-Disposition"] = f'attachment; filename="{name}.json"'
        return response


def _run_created(created) -> Response:
    body = {"run_id": str(created.run.pk), "user_message_id": str(created.user_message.pk)}
    return Response(body, status=status.HTTP_202_ACCEPTED)


class MessageRegenerateApi(APIView):
    """Answer the same question again (regenerate, or retry after a failure): no new user
    message; the new answer is a sibling version of the earlier one."""

    @extend_schema(request=RunOptionsSerializer, responses={202: RunCreatedSerializer})
    def post(self, request, message_id):
        message = message_get_for_user(user=request.user, message_id=message_id, write=True)
        data = RunOptionsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = message_regenerate(message=message, user=request.user, **data.validated_data)
        return _run_created(created)


class MessageEditApi(APIView):
    """Send an edited version of one of your messages; the original stays as version 1."""

    @extend_schema(request=MessageEditSerializer, responses={202: RunCreatedSerializer})
    def post(self, request, message_id):
        message = message_get_for_user(user=request.user, message_id=message_id, write=True)
        data = MessageEditSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = message_edit(message=message, user=request.user, **data.validated_data)
        return _run_created(created)


class RunCreateApi(APIView):
    @extend_schema(request=RunCreateSerializer, responses={202: RunCreatedSerializer})
    def post(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        data = RunCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return _run_created(run_create(thread=thread, user=request.user, **data.validated_data))


class RunDetailApi(APIView):
    @extend_schema(responses=RunSerializer)
    def get(self, request, run_id):
        run = run_get_for_user(user=request.user, run_id=run_id)
        return Response(RunSerializer(run, context=_run_context(request, run)).data)


class RunCancelApi(APIView):
    @extend_schema(request=None, responses=RunSerializer)
    def post(self, request, run_id):
        run = run_cancel(run=run_get_for_user(user=request.user, run_id=run_id), user=request.user)
        run.refresh_from_db()
        return Response(RunSerializer(run, context=_run_context(request, run)).data)


def _run_context(request, run) -> dict:
    """Upstream error detail for staff and the workspace's admins only (agents.presentation)."""
    return {"detailed": sees_error_details(user=request.user, workspace_id=run.thread.workspace_id)}


class PreferencesApi(APIView):
    """The caller's chat preferences: ``{"custom_instructions": str, "default_model": str,
    "language": str}``.
    ``custom_instructions`` (≤ 4000 chars; over that → 400 ``too_long``, nothing saved) are given
    to the assistant as context in every chat; ``default_model`` (``"provider/model"``, ``""``:
    none of their own) is the model their new chats start with (not one they may use → 400
    ``model_not_allowed``, nothing saved); ``language`` (a code of ``settings.LANGUAGES``, ``""``: the
    browser's) is the language of their pages and messages (another → 400 ``language_not_supported``).
    PATCH changes the fields it names."""

    @staticmethod
    def _body(user) -> dict:
        prefs = UserPreferences.objects.filter(user=user).select_related("default_provider").first()
        chosen = ""
        if prefs is not None and prefs.default_provider is not None:
            chosen = f"{prefs.default_provider.slug}/{prefs.default_model or prefs.default_provider.default_model}"
        return {"custom_instructions": custom_instructions_for_user(user_id=user.pk), "default_model": chosen,
                "language": prefs.language if prefs is not None and prefs.language in dict(settings.LANGUAGES) else ""}

    @extend_schema(responses=PreferencesSerializer)
    def get(self, request):
        return Response(self._body(request.user))

    @extend_schema(request=PreferencesSerializer, responses=PreferencesSerializer)
    def patch(self, request):
        data = PreferencesSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        with transaction.atomic():
            if "default_model" in values:
                provider, model = model_choice_parse(user=request.user, value=values["default_model"])
                default_model_set(user=request.user, provider=provider, model=model)
            if "custom_instructions" in values:
                custom_instructions_set(user=request.user, text=values["custom_instructions"])
            if "language" in values:
                language_set(user=request.user, code=values["language"])
        response = Response(self._body(request.user))
        if "language" in values and isinstance(request.successful_authenticator, SessionAuthentication):
            # A signed-in browser (not a token) speaks the new language from its next page on.
            language_remember(request._request, response, response.data["language"])
        return response
