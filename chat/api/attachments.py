"""Attachment endpoints (``chat.attachments``; DESIGN §6):

* ``POST /api/v1/threads/{id}/attachments/`` — multipart ``file`` (one file) and optional
  ``keep_in_knowledge``: **201** with the attachment, pending until a send names it
  (``attachments`` of ``POST /threads/{id}/runs/`` or the websocket's ``message.send``).
  413 too large / an image over the pixel limit, 415 unsupported type or content that does
  not match it, 422 empty or unreadable, 400 bad file name / too many files / images the
  model cannot read. Only the thread's owner.
* ``GET /api/v1/threads/{id}/attachments/`` — the caller's pending attachments there.
* ``GET|DELETE /api/v1/attachments/{id}/`` — one attachment (visible like its thread;
  pending: only its owner); DELETE only while pending (409 once sent).
* ``GET /api/v1/attachments/{id}/content/`` — the file, always as a download
  (``Content-Disposition: attachment``, ``X-Content-Type-Options: nosniff``, a sandboxing
  CSP): an HTML or SVG file is never rendered by the browser.
* ``GET /api/v1/attachments/{id}/thumbnail/`` — an image's WebP thumbnail (made by the server).
* ``POST /api/v1/attachments/{id}/keep/`` — also import a document into the workspace's
  knowledge base: **202** with the knowledge upload (poll ``/knowledge/uploads/{id}/``).
"""

from __future__ import annotations

import html

from django.conf import settings as django_settings
from django.http import HttpResponse
from django.http.multipartparser import MultiPartParser as DjangoMultiPartParser
from django.http.multipartparser import MultiPartParserError
from django.utils.http import content_disposition_header
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.parsers import DataAndFiles, FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.attachments import (
    attachment_bytes,
    attachment_create,
    attachment_delete,
    filename_check,
    keep_in_knowledge_base,
    limits,
    upload_check,
)
from chat.models import Attachment
from chat.selectors import attachment_get_for_user, attachments_pending, thread_get_for_user
from chatplatform.api import ApiError
from chatplatform.errors import ServiceError
from chatplatform.locale import file_size

from .serializers import AttachmentSerializer

# Multipart framing around the file: boundaries, headers and the small form fields.
_ENVELOPE_BYTES = 64 * 1024


class _FileNameRefused(MultiPartParserError):
    def __init__(self, error: ServiceError) -> None:
        super().__init__(error.message)
        self.error = error


class _StrictNameParser(DjangoMultiPartParser):
    """Django's multipart parser, except that a file name it would silently cut down (a path,
    control characters) is refused with ``bad_filename``: the person learns which name was
    wrong instead of finding a different one stored."""

    def sanitize_file_name(self, file_name):
        raw = html.unescape(file_name)
        try:
            filename_check(raw)
        except ServiceError as exc:
            raise _FileNameRefused(exc) from None
        return super().sanitize_file_name(file_name)


class StrictNameMultiPartParser(MultiPartParser):
    """DRF's multipart parser on :class:`_StrictNameParser`."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        request = parser_context["request"]
        encoding = parser_context.get("encoding", django_settings.DEFAULT_CHARSET)
        meta = request.META.copy()
        meta["CONTENT_TYPE"] = media_type
        try:
            data, files = _StrictNameParser(meta, stream, request.upload_handlers, encoding).parse()
        except _FileNameRefused as exc:
            raise exc.error from None
        except MultiPartParserError as exc:
            raise ParseError(f"Multipart form parse error - {exc}") from exc
        return DataAndFiles(data, files)


class AttachmentUploadSerializer(serializers.Serializer):
    file = serializers.FileField(allow_empty_file=True)
    keep_in_knowledge = serializers.BooleanField(
        required=False, default=False,
        help_text="Documents: also import the file into the workspace's knowledge base.")


class KeptSerializer(serializers.Serializer):
    upload_id = serializers.UUIDField(help_text="The knowledge upload: poll GET /api/v1/knowledge/uploads/{id}/.")
    status = serializers.CharField()


class ThreadAttachmentsApi(APIView):
    parser_classes = [StrictNameMultiPartParser, FormParser]

    @extend_schema(responses=AttachmentSerializer(many=True))
    def get(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        return Response(AttachmentSerializer(attachments_pending(user=request.user, thread_id=thread.pk),
                                             many=True).data)

    @extend_schema(request={"multipart/form-data": AttachmentUploadSerializer},
                   responses={201: AttachmentSerializer})
    def post(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        # Refuse an oversized body before Django reads it to a temporary file.
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        max_bytes = limits()["max_bytes"]
        if length > max_bytes + _ENVELOPE_BYTES:
            raise ApiError("too_large", _("The file is larger than the %(limit)s limit.") % {
                "limit": file_size(max_bytes)}, 413)
        data = AttachmentUploadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        upload = data.validated_data["file"]
        upload_check(filename=upload.name, size=upload.size)  # before reading the bytes
        attachment = attachment_create(user=request.user, thread=thread, filename=upload.name, data=upload.read(),
                                       keep_in_knowledge=data.validated_data["keep_in_knowledge"])
        attachment.text_chars = len(attachment.text)
        return Response(AttachmentSerializer(attachment).data, status=status.HTTP_201_CREATED)


class AttachmentDetailApi(APIView):
    @extend_schema(responses=AttachmentSerializer)
    def get(self, request, attachment_id):
        attachment = attachment_get_for_user(user=request.user, attachment_id=attachment_id,
                                             fields=["kind", "filename", "content_type", "size", "width", "height",
                                                     "text", "created_at"])
        return Response(AttachmentSerializer(attachment).data)

    @extend_schema(responses={204: None})
    def delete(self, request, attachment_id):
        attachment = attachment_get_for_user(user=request.user, attachment_id=attachment_id, write=True,
                                             fields=["kind"])
        attachment_delete(attachment=attachment)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _file_response(body: bytes, *, content_type: str, filename: str, as_attachment: bool) -> HttpResponse:
    response = HttpResponse(bytes(body), content_type=content_type)
    response["Content-Disposition"] = content_disposition_header(as_attachment, filename)
    response["X-Content-Type-Options"] = "nosniff"
    # Even opened directly, the bytes get no script, no plugin, no same-origin rights.
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, max-age=3600"
    return response


class AttachmentContentApi(APIView):
    @extend_schema(responses={
        (200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY, description="A document."),
        (200, "image/*"): OpenApiResponse(OpenApiTypes.BINARY, description="An image, as its verified type."),
    })
    def get(self, request, attachment_id):
        attachment = attachment_get_for_user(user=request.user, attachment_id=attachment_id,
                                             fields=["kind", "filename", "content_type"])
        # Images keep their (verified) type so an <img> shows them; everything else is an
        # opaque download whatever it is (an .html attachment is never text/html here).
        content_type = (attachment.content_type if attachment.kind == Attachment.Kind.IMAGE
                        else "application/octet-stream")
        return _file_response(attachment_bytes(attachment_id=attachment.pk), content_type=content_type,
                              filename=attachment.filename,
                              as_attachment=True)


class AttachmentThumbnailApi(APIView):
    @extend_schema(responses={(200, "image/webp"): OpenApiResponse(OpenApiTypes.BINARY)})
    def get(self, request, attachment_id):
        attachment = attachment_get_for_user(user=request.user, attachment_id=attachment_id,
                                             fields=["kind", "filename"])
        thumbnail = attachment_bytes(attachment_id=attachment.pk, field="thumbnail")
        if attachment.kind != Attachment.Kind.IMAGE or not thumbnail:
            raise ApiError("not_found", _("This attachment has no thumbnail."), 404)
        return _file_response(thumbnail, content_type="image/webp",
                              filename=attachment.filename.rsplit(".", 1)[0] + ".webp", as_attachment=False)


class AttachmentKeepApi(APIView):
    @extend_schema(request=None, responses={202: KeptSerializer})
    def post(self, request, attachment_id):
        attachment = attachment_get_for_user(user=request.user, attachment_id=attachment_id, write=True,
                                             fields=["kind", "filename"])
        upload = keep_in_knowledge_base(user=request.user, attachment=attachment)
        return Response({"upload_id": str(upload.pk), "status": upload.status}, status=status.HTTP_202_ACCEPTED)
