"""REST endpoints for the caller's folders and tags (``chat.organise``; DESIGN §6).

Folders: ``GET, POST /api/v1/folders/``, ``GET, PATCH, DELETE /api/v1/folders/{id}/``; tags:
``GET /api/v1/tags/``. Everything is the caller's own: any other folder id is a 404.
"""

from __future__ import annotations

from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.organise import (
    folder_create,
    folder_delete,
    folder_get_for_user,
    folder_list_for_user,
    folder_update,
    tag_list_for_user,
)
from chat.selectors import memberships_for_user, workspace_get_for_user

from .serializers import (
    FolderCreateSerializer,
    FolderSerializer,
    FolderUpdateSerializer,
    TagSerializer,
)


class FolderListCreateApi(APIView):
    """The caller's folders, by name (not paginated: at most 100 per workspace) / make one."""

    @extend_schema(parameters=[OpenApiParameter("workspace", str, description="Workspace slug or id.")],
                   responses=FolderSerializer(many=True))
    def get(self, request):
        workspace = request.query_params.get("workspace")
        workspace_id = workspace_get_for_user(user=request.user, workspace=workspace).pk if workspace else None
        return Response(FolderSerializer(folder_list_for_user(user=request.user, workspace_id=workspace_id),
                                         many=True).data)

    @extend_schema(request=FolderCreateSerializer, responses={201: FolderSerializer})
    def post(self, request):
        data = FolderCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        named = data.validated_data.get("workspace")
        if named:
            workspace = workspace_get_for_user(user=request.user, workspace=named)
        else:
            first = memberships_for_user(user=request.user).first()
            if first is None:
                raise Http404(_("No such workspace."))
            workspace = first.workspace
        folder = folder_create(user=request.user, workspace=workspace, name=data.validated_data["name"])
        folder = folder_get_for_user(user=request.user, folder_id=folder.pk)  # with its count
        return Response(FolderSerializer(folder).data, status=status.HTTP_201_CREATED)


class FolderDetailApi(APIView):
    """One of the caller's folders: read, rename or fold, delete (its chats go back to the list)."""

    @extend_schema(responses=FolderSerializer)
    def get(self, request, folder_id):
        return Response(FolderSerializer(folder_get_for_user(user=request.user, folder_id=folder_id)).data)

    @extend_schema(request=FolderUpdateSerializer, responses=FolderSerializer)
    def patch(self, request, folder_id):
        folder = folder_get_for_user(user=request.user, folder_id=folder_id)
        data = FolderUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        folder = folder_update(folder=folder, **data.validated_data)
        return Response(FolderSerializer(folder).data)

    @extend_schema(responses={204: None})
    def delete(self, request, folder_id):
        folder_delete(folder=folder_get_for_user(user=request.user, folder_id=folder_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class TagListApi(APIView):
    """The caller's tags on their listed chats, by name, with how many chats carry each."""

    @extend_schema(responses=TagSerializer(many=True))
    def get(self, request):
        return Response(TagSerializer(tag_list_for_user(user=request.user), many=True).data)
