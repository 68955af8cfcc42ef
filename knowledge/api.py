"""Knowledge REST endpoints (DESIGN §6).

``GET, POST /api/v1/knowledge/items/``, ``GET, PATCH, DELETE /api/v1/knowledge/items/{id}/``,
``GET /api/v1/knowledge/search/`` and ``POST /api/v1/messages/{id}/save-to-knowledge/``.
Everything is scoped to the caller's workspaces and visibility through the selectors;
another workspace's item or another user's private item is a 404. Writes follow the write
policy of ``knowledge/selectors.py`` (viewers: 403). Views are thin: selectors and services
do the work; errors use the ``{"error": {"code", "message"}}`` shape.
"""

from __future__ import annotations

from uuid import UUID

from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.rendering import render_markdown
from chat.selectors import memberships_for_user, message_get_for_user, workspace_get_for_user
from chatplatform.api import ApiError

from .models import KnowledgeItem
from .selectors import (
    MAX_TOP_K,
    knowledge_item_can_edit,
    knowledge_item_get_for_user,
    knowledge_item_list_for_user,
    knowledge_search_for_user,
)
from .services import (
    knowledge_item_create_for_user,
    knowledge_item_delete_for_user,
    knowledge_item_save_from_message,
    knowledge_item_update_for_user,
)
from .snippets import markup_of, snippet_html

SEARCH_SNIPPET_CHARS = 400


def _multi(params, name: str) -> list[str]:
    """``?tag=a&tag=b`` or ``?tag=a,b`` → ``["a", "b"]``."""
    out: list[str] = []
    for value in params.getlist(name):
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def _flag(params, name: str, default: bool) -> bool:
    value = params.get(name)
    if value is None or value == "":
        return default
    return value.lower() in ("1", "true", "yes", "on")


class KnowledgeItemSerializer(serializers.ModelSerializer):
    workspace = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    source_message = serializers.UUIDField(source="source_message_id", read_only=True, allow_null=True)
    url = serializers.CharField(read_only=True, help_text="http(s) URL of the source, or empty.")
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    can_edit = serializers.SerializerMethodField()

    class Meta:
        model = KnowledgeItem
        fields = [
            "id", "workspace", "owner", "type", "title", "content", "tags", "url", "source_message",
            "is_hidden", "is_private", "can_edit", "created_at", "updated_at",
        ]
        read_only_fields = fields

    def get_can_edit(self, obj) -> bool:
        request = self.context.get("request")
        return bool(request) and knowledge_item_can_edit(user=request.user, item=obj)


class KnowledgeItemDetailSerializer(KnowledgeItemSerializer):
    content_html = serializers.SerializerMethodField()

    class Meta(KnowledgeItemSerializer.Meta):
        fields = [*KnowledgeItemSerializer.Meta.fields, "content_html"]
        read_only_fields = fields

    def get_content_html(self, obj) -> str:
        return render_markdown(obj.content)


class KnowledgeItemCreateSerializer(serializers.Serializer):
    workspace = serializers.CharField(required=False, help_text="Workspace slug or id (default: your only workspace).")
    title = serializers.CharField(required=False, allow_blank=True, max_length=300, default="")
    content = serializers.CharField(trim_whitespace=False)
    type = serializers.CharField(required=False, max_length=40, default="note")
    tags = serializers.ListField(child=serializers.CharField(max_length=100), required=False, default=list, max_length=50)
    url = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    is_hidden = serializers.BooleanField(required=False, default=False)
    is_private = serializers.BooleanField(required=False, default=False)


class KnowledgeItemUpdateSerializer(serializers.Serializer):
    title = serializers.CharField(required=False, allow_blank=True, max_length=300)
    content = serializers.CharField(required=False, trim_whitespace=False)
    type = serializers.CharField(required=False, max_length=40)
    tags = serializers.ListField(child=serializers.CharField(max_length=100), required=False, max_length=50)
    url = serializers.CharField(required=False, allow_blank=True, max_length=200)
    is_hidden = serializers.BooleanField(required=False)
    is_private = serializers.BooleanField(required=False)


class SearchHitSerializer(serializers.Serializer):
    item_id = serializers.UUIDField()
    chunk_id = serializers.IntegerField()
    title = serializers.CharField()
    type = serializers.CharField()
    snippet = serializers.CharField(help_text="The chunk's source text (Markdown/reST), ≤ 400 chars.")
    snippet_html = serializers.CharField(help_text="Rendered text around the first match, HTML-escaped, "
                                         "query words in <mark>.")
    score = serializers.FloatField()
    workspace_id = serializers.IntegerField()


class SearchResultSerializer(serializers.Serializer):
    query = serializers.CharField()
    results = SearchHitSerializer(many=True)


class SaveToKnowledgeSerializer(serializers.Serializer):
    type = serializers.CharField(max_length=40)
    title = serializers.CharField(required=False, allow_blank=True, max_length=300, default="")
    tags = serializers.ListField(child=serializers.CharField(max_length=100), required=False, default=list, max_length=50)
    is_private = serializers.BooleanField(required=False, default=False)


def default_workspace(user, value):
    """The workspace named by ``value`` (slug or id), or the caller's only one. Http404 for
    a workspace the caller does not belong to; 400 when several fit."""
    if value:
        return workspace_get_for_user(user=user, workspace=value)
    memberships = list(memberships_for_user(user=user)[:2])
    if len(memberships) != 1:
        raise ApiError("invalid", _("workspace: say which workspace (slug or id)."), 400)
    return memberships[0].workspace


class KnowledgeItemListCreateApi(generics.ListAPIView):
    """Items the caller may see in lists (hidden left out unless ``include_hidden``)."""

    serializer_class = KnowledgeItemSerializer

    @extend_schema(parameters=[
        OpenApiParameter("workspace", str, description="Workspace slug or id."),
        OpenApiParameter("type", str, many=True, description="Item type(s); repeat or comma-separate."),
        OpenApiParameter("tag", str, many=True, description="Tag(s); items carrying any of them."),
        OpenApiParameter("include_hidden", bool, description="Also list hidden items (default false)."),
    ])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        workspace = params.get("workspace")
        return knowledge_item_list_for_user(
            user=self.request.user,
            workspace=workspace_get_for_user(user=self.request.user, workspace=workspace) if workspace else None,
            types=_multi(params, "type"),
            tags=_multi(params, "tag"),
            include_hidden=_flag(params, "include_hidden", False),
        )

    @extend_schema(request=KnowledgeItemCreateSerializer, responses={201: KnowledgeItemDetailSerializer})
    def post(self, request):
        data = KnowledgeItemCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        workspace = default_workspace(request.user, values.pop("workspace", None))
        item = knowledge_item_create_for_user(user=request.user, workspace=workspace, **values)
        body = KnowledgeItemDetailSerializer(item, context={"request": request}).data
        return Response(body, status=status.HTTP_201_CREATED)


class KnowledgeItemDetailApi(APIView):
    @extend_schema(responses=KnowledgeItemDetailSerializer)
    def get(self, request, item_id):
        item = knowledge_item_get_for_user(user=request.user, item_id=item_id)
        return Response(KnowledgeItemDetailSerializer(item, context={"request": request}).data)

    @extend_schema(request=KnowledgeItemUpdateSerializer, responses=KnowledgeItemDetailSerializer)
    def patch(self, request, item_id):
        item = knowledge_item_get_for_user(user=request.user, item_id=item_id)
        data = KnowledgeItemUpdateSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        item = knowledge_item_update_for_user(user=request.user, item=item, **data.validated_data)
        return Response(KnowledgeItemDetailSerializer(item, context={"request": request}).data)

    @extend_schema(responses={204: None})
    def delete(self, request, item_id):
        item = knowledge_item_get_for_user(user=request.user, item_id=item_id)
        knowledge_item_delete_for_user(user=request.user, item=item)
        return Response(status=status.HTTP_204_NO_CONTENT)


class KnowledgeSearchApi(APIView):
    """Ranked retrieval with the caller's visibility (web-search syntax: ``"phrase"``,
    ``or``, ``-word``; AND otherwise). One hit per item; the caller's own private items are
    included unless ``include_private=false``; hidden items only with ``include_hidden``."""

    @extend_schema(
        parameters=[
            OpenApiParameter("q", str, required=True, description="The query."),
            OpenApiParameter("top_k", int, description=f"How many hits (1..{MAX_TOP_K}, default 8)."),
            OpenApiParameter("type", str, many=True, description="Item type(s)."),
            OpenApiParameter("tag", str, many=True, description="Tag(s); items carrying any of them."),
            OpenApiParameter("workspace", str, description="Workspace slug or id (default: all of yours)."),
            OpenApiParameter("include_private", bool, description="Your own private items (default true)."),
            OpenApiParameter("include_hidden", bool, description="Hidden items (default false)."),
        ],
        responses=SearchResultSerializer,
    )
    def get(self, request):
        params = request.query_params
        query = params.get("q", "")
        try:
            top_k = int(params.get("top_k") or 8)
        except ValueError as exc:
            raise ApiError("invalid", _("top_k must be an integer."), 400) from exc
        if not 1 <= top_k <= MAX_TOP_K:
            raise ApiError("invalid", _("top_k must be between 1 and %(n)d.") % {"n": MAX_TOP_K}, 400)
        workspace = params.get("workspace")
        hits = knowledge_search_for_user(
            user=request.user,
            query=query,
            workspace=workspace_get_for_user(user=request.user, workspace=workspace) if workspace else None,
            top_k=top_k,
            types=_multi(params, "type"),
            tags=_multi(params, "tag"),
            include_private=_flag(params, "include_private", True),
            include_hidden=_flag(params, "include_hidden", False),
        )
        sources = dict(KnowledgeItem.objects.filter(pk__in=[h.item_id for h in hits]).values_list("pk", "source_path"))
        results = [
            {"item_id": h.item_id, "chunk_id": h.chunk_id, "title": h.title, "type": h.type,
             "snippet": h.snippet[:SEARCH_SNIPPET_CHARS],
             "snippet_html": snippet_html(h.snippet, query=query, markup=markup_of(sources.get(UUID(h.item_id), ""))),
             "score": h.score, "workspace_id": h.workspace_id}
            for h in hits
        ]
        return Response(SearchResultSerializer({"query": query, "results": results}).data)


class MessageSaveToKnowledgeApi(APIView):
    """Save a message the caller can see as a knowledge item of the thread's workspace."""

    @extend_schema(request=SaveToKnowledgeSerializer, responses={201: KnowledgeItemDetailSerializer})
    def post(self, request, message_id):
        # Saving copies the conversation into shared knowledge: the thread's owner only (a
        # workspace admin may read a member's thread, not publish it).
        message = message_get_for_user(user=request.user, message_id=message_id, write=True)
        data = SaveToKnowledgeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        item = knowledge_item_save_from_message(user=request.user, message=message, **data.validated_data)
        body = KnowledgeItemDetailSerializer(item, context={"request": request}).data
        return Response(body, status=status.HTTP_201_CREATED)
