"""``/api/v1/api-keys/``: the caller's API keys (DESIGN §6).

List and read show a key's name, prefix and times, never the secret; creation returns the
secret once (``key``). Another user's key, or a revoked one, is a 404. A request
authenticated with an API key may list and revoke but not make keys: a leaked key must not
be able to outlive its own revocation.
"""

from __future__ import annotations

from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from chatplatform.errors import ServiceError

from .selectors import api_key_get_for_user, api_keys_for_user
from .services import KEY_PREFIX, NAME_MAX, api_key_create, api_key_revoke


class ApiKeySerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    name = serializers.CharField(read_only=True)
    prefix = serializers.CharField(read_only=True, help_text="The key's first characters, to recognise it.")
    created_at = serializers.DateTimeField(read_only=True)
    expires_at = serializers.DateTimeField(read_only=True, allow_null=True)
    last_used_at = serializers.DateTimeField(read_only=True, allow_null=True,
                                             help_text="Updated at most once a minute.")
    expired = serializers.SerializerMethodField()

    def get_expired(self, obj) -> bool:
        return obj.is_expired(timezone.now())


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.SerializerMethodField(help_text="The secret: shown in this response only.")

    def get_key(self, obj) -> str:
        return self.context["key"]


class ApiKeyCreateSerializer(serializers.Serializer):
    # The page shows these words as they are: say what to do, not the framework's field rules.
    name = serializers.CharField(max_length=NAME_MAX, trim_whitespace=True, error_messages={
        "required": "Give the key a name.", "blank": "Give the key a name.", "null": "Give the key a name.",
        "max_length": f"A key's name is at most {NAME_MAX} characters."})
    expires_at = serializers.DateTimeField(required=False, allow_null=True, error_messages={
        "invalid": "The expiry must be a date and time, e.g. 2027-01-31T00:00:00Z.",
        "make_aware": "The expiry must be a date and time, e.g. 2027-01-31T00:00:00Z."},
        help_text="When the key stops working (future); none: never.")


def _made_with_api_key(request) -> bool:
    return isinstance(request.auth, str) and request.auth.startswith(KEY_PREFIX)


class ApiKeyListCreateApi(APIView):
    """GET: the caller's keys (not revoked; expired ones with ``expired: true``). POST
    ``{name, expires_at?}``: a new key; **201** with ``key``, the secret, shown only here."""

    @extend_schema(responses=ApiKeySerializer(many=True), operation_id="api_keys_list")
    def get(self, request):
        return Response(ApiKeySerializer(api_keys_for_user(user=request.user), many=True).data)

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: ApiKeyCreatedSerializer},
                   operation_id="api_keys_create")
    def post(self, request):
        if _made_with_api_key(request):
            raise ServiceError("not_allowed", _("An API key cannot make API keys: sign in (the settings page) "
                                                "or use a token from /api/v1/auth/token/."), 403)
        data = ApiKeyCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = api_key_create(user=request.user, name=data.validated_data["name"],
                                 expires_at=data.validated_data.get("expires_at"))
        return Response(ApiKeyCreatedSerializer(created.api_key, context={"key": created.key}).data,
                        status=status.HTTP_201_CREATED)


class ApiKeyDetailApi(APIView):
    """GET: one of the caller's keys. DELETE: revoke it (**204**); it stops working at once
    and its open websockets and streams close."""

    @extend_schema(responses=ApiKeySerializer, operation_id="api_keys_retrieve")
    def get(self, request, key_id):
        return Response(ApiKeySerializer(api_key_get_for_user(user=request.user, key_id=key_id)).data)

    @extend_schema(responses={204: None}, operation_id="api_keys_revoke")
    def delete(self, request, key_id):
        api_key_revoke(api_key=api_key_get_for_user(user=request.user, key_id=key_id), by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
