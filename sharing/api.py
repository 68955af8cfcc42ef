"""``/api/v1/threads/{id}/shares/`` and ``/api/v1/shares/{id}/`` (DESIGN §6 *Share links*).

A link's JSON carries its ``url`` (with the secret token) for the people who may manage it —
the thread's owner who made it and the workspace's admins; anyone else gets 404.
"""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.selectors import thread_get_for_user, workspace_get_for_user

from .models import ShareLink
from .selectors import (
    may_change_sharing,
    public_links_allowed,
    share_get_for_user,
    shares_for_thread,
)
from .services import max_public_days, share_create, share_revoke, workspace_sharing_set


class ShareLinkSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    thread_id = serializers.UUIDField(read_only=True)
    title = serializers.CharField(read_only=True, help_text="The chat's title when the link was made.")
    visibility = serializers.ChoiceField(choices=ShareLink.Visibility.choices, read_only=True)
    url = serializers.SerializerMethodField(help_text="The link to hand out (it holds the secret token).")
    leaf_id = serializers.UUIDField(read_only=True, help_text="The last message of the shared branch.")
    created_by = serializers.CharField(source="created_by.get_username", read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    expires_at = serializers.DateTimeField(read_only=True, allow_null=True)
    expired = serializers.SerializerMethodField()

    def get_url(self, obj) -> str:
        path = reverse("sharing:page", args=[obj.token])
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path

    def get_expired(self, obj) -> bool:
        return obj.is_expired(timezone.now())


class ShareListSerializer(serializers.Serializer):
    shares = ShareLinkSerializer(many=True)
    public_links_allowed = serializers.BooleanField(help_text="Whether the workspace allows public links now.")
    public_max_days = serializers.IntegerField(help_text="SHARE_PUBLIC_MAX_DAYS: a public link's longest life.")
    may_allow_public = serializers.BooleanField(help_text="The caller may change the workspace's setting "
                                                          "(PATCH /api/v1/workspaces/{id}/sharing/).")
    workspace_id = serializers.IntegerField()
    may_create = serializers.BooleanField(help_text="The caller owns the chat and it is not temporary.")


class WorkspaceSharingSerializer(serializers.Serializer):
    public_links = serializers.BooleanField(help_text="Members may make public links (anyone with the link, until "
                                                      "it expires). Off: every public link of the workspace ends.")
    may_change = serializers.BooleanField(read_only=True, help_text="The caller may change it (a workspace admin).")


class ShareCreateSerializer(serializers.Serializer):
    visibility = serializers.ChoiceField(choices=ShareLink.Visibility.choices, default=ShareLink.Visibility.WORKSPACE,
                                         error_messages={"invalid_choice": _('"workspace" or "public".')})
    expires_at = serializers.DateTimeField(required=False, allow_null=True, error_messages={
        "invalid": _("The expiry must be a date and time, e.g. 2027-01-31T00:00:00Z."),
        "make_aware": _("The expiry must be a date and time, e.g. 2027-01-31T00:00:00Z.")},
        help_text="When the link stops working (future). Required for a public link (at most "
                  "SHARE_PUBLIC_MAX_DAYS ahead); none: a workspace link works until revoked.")


class ThreadSharesApi(APIView):
    """GET: the thread's links (not revoked; expired ones with ``expired: true``) for its
    owner and the workspace's admins, with the workspace's setting. POST ``{visibility,
    expires_at?}``: a new link to the branch shown now (the owner only); **201**."""

    @extend_schema(responses=ShareListSerializer, operation_id="thread_shares_list")
    def get(self, request, thread_id):
        # Metadata: an admin blind to the chat still manages (revokes) its links.
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, metadata=True)
        # Who sees the thread here is its owner or a workspace admin: both may manage its links.
        shares = shares_for_thread(thread=thread)
        owner = thread.owner_id == request.user.pk
        return Response({
            "shares": ShareLinkSerializer(shares, many=True, context={"request": request}).data,
            "public_links_allowed": public_links_allowed(workspace_id=thread.workspace_id),
            "public_max_days": max_public_days(),
            "may_create": owner and not thread.temporary,
            "may_allow_public": may_change_sharing(user=request.user, workspace_id=thread.workspace_id),
            "workspace_id": thread.workspace_id,
        })

    @extend_schema(request=ShareCreateSerializer, responses={201: ShareLinkSerializer},
                   operation_id="thread_shares_create")
    def post(self, request, thread_id):
        thread = thread_get_for_user(user=request.user, thread_id=thread_id, write=True)
        data = ShareCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        share = share_create(thread=thread, user=request.user, visibility=data.validated_data["visibility"],
                             expires_at=data.validated_data.get("expires_at"))
        return Response(ShareLinkSerializer(share, context={"request": request}).data,
                        status=status.HTTP_201_CREATED)


class ShareDetailApi(APIView):
    """GET: one link (its maker, or an admin of its workspace). DELETE: revoke it (**204**):
    from then on it answers 410."""

    @extend_schema(responses=ShareLinkSerializer, operation_id="shares_retrieve")
    def get(self, request, share_id):
        share = share_get_for_user(user=request.user, share_id=share_id)
        return Response(ShareLinkSerializer(share, context={"request": request}).data)

    @extend_schema(responses={204: None}, operation_id="shares_revoke")
    def delete(self, request, share_id):
        share_revoke(share=share_get_for_user(user=request.user, share_id=share_id), by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WorkspaceSharingApi(APIView):
    """GET: the workspace's sharing setting (its members). PATCH ``{public_links}``: change it
    (its admins and staff; another member: 403 ``not_allowed``). Not a member: 404."""

    @extend_schema(responses=WorkspaceSharingSerializer, operation_id="workspace_sharing_retrieve")
    def get(self, request, workspace_id):
        workspace = workspace_get_for_user(user=request.user, workspace=workspace_id)
        return Response(self._body(request.user, workspace.pk))

    @extend_schema(request=WorkspaceSharingSerializer, responses=WorkspaceSharingSerializer,
                   operation_id="workspace_sharing_update")
    def patch(self, request, workspace_id):
        workspace = workspace_get_for_user(user=request.user, workspace=workspace_id)
        data = WorkspaceSharingSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        workspace_sharing_set(workspace_id=workspace.pk, user=request.user,
                              public_links=data.validated_data["public_links"])
        return Response(self._body(request.user, workspace.pk))

    @staticmethod
    def _body(user, workspace_id) -> dict:
        return {"public_links": public_links_allowed(workspace_id=workspace_id),
                "may_change": may_change_sharing(user=user, workspace_id=workspace_id)}
