"""REST endpoints for workspaces, threads, messages and runs (DESIGN §6).

Every queryset comes from a selector for ``request.user``; an object of another workspace or
another user's thread is a 404. Views validate input with their serializers and call one
service; a service's ``ServiceError`` becomes the JSON error shape in the exception handler.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.selectors import run_get_for_user
from agents.services import run_cancel, run_create
from chat.models import Membership
from chat.selectors import (
    message_list_for_thread,
    thread_get_for_user,
    thread_list_for_user,
    workspace_get_for_user,
    workspace_list_for_user,
)
from chat.services import thread_create, thread_delete, thread_duplicate, thread_update

from .serializers import (
    MessageSerializer,
    RunCreatedSerializer,
    RunCreateSerializer,
    RunSerializer,
    ThreadCreateSerializer,
    ThreadSerializer,
    ThreadUpdateSerializer,
    WorkspaceSerializer,
    ledger_by_call,
)


class WorkspaceListApi(generics.ListAPIView):
    serializer_class = WorkspaceSerializer

    def get_queryset(self):
        return workspace_list_for_user(user=self.request.user)

    def get_serializer_context(self):
        context = super().get_serializer_context()
        context["roles"] = dict(
            Membership.objects.filter(user=self.request.user).values_list("workspace_id", "role__name")
        )
        return context


class ThreadListCreateApi(generics.ListAPIView):
    serializer_class = ThreadSerializer

    @extend_schema(parameters=[
        OpenApiParameter("search", str, description="Match titles and message text."),
        OpenApiParameter("workspace", str, description="Workspace slug or id."),
    ])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        return thread_list_for_user(user=self.request.user, search=params.get("search", "").strip(),
                                    workspace=params.get("workspace") or None)

    @extend_schema(request=ThreadCreateSerializer, responses={201: ThreadSerializer})
    def post(self, request):
        data = ThreadCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        workspace = workspace_get_for_user(user=request.user, workspace=values.pop("workspace"))
        thread = thread_create(workspace=workspace, owner=request.user, **values)
        return Response(ThreadSerializer(thread).data, status=status.HTTP_201_CREATED)


class ThreadDetailApi(APIView):
    @extend_schema(responses=ThreadSerializer)
    def get(self, request, thread_id):
        return Response(ThreadSerializer(thread_get_for_user(user=request.user, thread_id=thread_id)).data)

    @extend_schema(request=ThreadUpdateSerializer, responses=ThreadSerializer)
    def patch(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        data = ThreadUpdateSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        thread = thread_update(thread=thread, user=request.user, **data.validated_data)
        return Response(ThreadSerializer(thread).data)

    @extend_schema(responses={204: None})
    def delete(self, request, thread_id):
        thread_delete(thread=thread_get_for_user(user=request.user, thread_id=thread_id, write=True))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ThreadDuplicateApi(APIView):
    @extend_schema(request=None, responses={201: ThreadSerializer})
    def post(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        copy = thread_duplicate(thread=thread, owner=request.user)
        return Response(ThreadSerializer(copy).data, status=status.HTTP_201_CREATED)


class ThreadMessagesApi(generics.ListAPIView):
    serializer_class = MessageSerializer
    pagination_class = None

    def get_queryset(self):
        thread = thread_get_for_user(user=self.request.user, thread_id=self.kwargs["thread_id"])
        return message_list_for_thread(thread=thread).select_related("run")

    def list(self, request, *args, **kwargs):
        messages = list(self.get_queryset())
        context = {**self.get_serializer_context(), "ledger": ledger_by_call(messages)}
        return Response(MessageSerializer(messages, many=True, context=context).data)


class RunCreateApi(APIView):
    @extend_schema(request=RunCreateSerializer, responses={202: RunCreatedSerializer})
    def post(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        data = RunCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = run_create(thread=thread, user=request.user, **data.validated_data)
        body = {"run_id": str(created.run.pk), "user_message_id": str(created.user_message.pk)}
        return Response(body, status=status.HTTP_202_ACCEPTED)


class RunDetailApi(APIView):
    @extend_schema(responses=RunSerializer)
    def get(self, request, run_id):
        return Response(RunSerializer(run_get_for_user(user=request.user, run_id=run_id)).data)


class RunCancelApi(APIView):
    @extend_schema(request=None, responses=RunSerializer)
    def post(self, request, run_id):
        run = run_cancel(run=run_get_for_user(user=request.user, run_id=run_id), user=request.user)
        run.refresh_from_db()
        return Response(RunSerializer(run).data)
