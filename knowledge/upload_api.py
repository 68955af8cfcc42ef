"""Knowledge uploads over REST (the knowledge page's drop zone uses the same endpoints).

* ``POST /api/v1/knowledge/uploads/`` — multipart: ``file`` (one file), ``workspace`` (slug
  or id; default: the caller's only workspace), optional ``type``, ``tags`` (comma
  separated), ``is_private``. **202** with the upload (``status: "queued"``); the import
  runs in the executor. 415 unsupported type, 413 too large, 422 empty, 403 viewer, 429 too
  many unfinished uploads.
* ``GET /api/v1/knowledge/uploads/`` — the caller's uploads, newest first (paginated).
* ``GET /api/v1/knowledge/uploads/{id}/`` — one upload: poll until ``status`` is one of
  ``created``, ``updated``, ``unchanged``, ``failed`` (``error`` says why), then
  ``item_id`` names the item.
"""

from __future__ import annotations

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from chatplatform.api import ApiError
from chatplatform.locale import file_size

from .api import default_workspace
from .models import KnowledgeUpload
from .services import KnowledgeRejected
from .uploads import (
    knowledge_upload_check,
    knowledge_upload_create,
    knowledge_upload_get_for_user,
    knowledge_upload_list_for_user,
    upload_max_bytes,
)

# Multipart framing around the file: boundaries, headers and the small form fields.
_ENVELOPE_BYTES = 64 * 1024


class UploadSerializer(serializers.ModelSerializer):
    workspace = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    item_id = serializers.UUIDField(read_only=True, allow_null=True)
    done = serializers.SerializerMethodField()

    class Meta:
        model = KnowledgeUpload
        fields = ["id", "workspace", "filename", "size", "type", "tags", "is_private", "status", "error", "item_id",
                  "done", "created_at", "finished_at"]
        read_only_fields = fields

    def get_done(self, obj) -> bool:
        return obj.status in KnowledgeUpload.DONE


class UploadCreateSerializer(serializers.Serializer):
    file = serializers.FileField(allow_empty_file=True)
    workspace = serializers.CharField(required=False, allow_blank=True, default="")
    type = serializers.CharField(required=False, max_length=40, default="document")
    tags = serializers.CharField(required=False, allow_blank=True, max_length=1000, default="",
                                 help_text="Comma-separated tags.")
    is_private = serializers.BooleanField(required=False, default=False)


class KnowledgeUploadListCreateApi(generics.ListAPIView):
    serializer_class = UploadSerializer
    parser_classes = [MultiPartParser, FormParser]

    def get_queryset(self):
        return knowledge_upload_list_for_user(user=self.request.user)

    @extend_schema(request={"multipart/form-data": UploadCreateSerializer}, responses={202: UploadSerializer})
    def post(self, request):
        # Refuse an oversized body before Django reads it to a temporary file.
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > upload_max_bytes() + _ENVELOPE_BYTES:
            raise ApiError("too_large", _("The file is larger than the %(limit)s limit.") % {
                "limit": file_size(upload_max_bytes())}, 413)
        data = UploadCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        workspace = default_workspace(request.user, values["workspace"])
        upload_file = values["file"]
        try:
            knowledge_upload_check(filename=upload_file.name, size=upload_file.size)  # before reading the bytes
            upload = knowledge_upload_create(
                user=request.user, workspace=workspace, filename=upload_file.name, data=upload_file.read(),
                type=values["type"], tags=[t for t in values["tags"].split(",") if t.strip()],
                is_private=values["is_private"],
            )
        except KnowledgeRejected as exc:
            raise ApiError(exc.code, exc.message, exc.status) from exc
        return Response(UploadSerializer(upload).data, status=status.HTTP_202_ACCEPTED)


class KnowledgeUploadDetailApi(APIView):
    @extend_schema(responses=UploadSerializer)
    def get(self, request, upload_id):
        return Response(UploadSerializer(knowledge_upload_get_for_user(user=request.user, upload_id=upload_id)).data)
