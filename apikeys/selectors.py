from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import Http404

from .models import ApiKey


def api_keys_for_user(*, user):
    """The caller's keys that are not revoked (expired ones included), newest first."""
    return ApiKey.objects.filter(user=user, revoked_at__isnull=True).order_by("-created_at")


def api_key_get_for_user(*, user, key_id) -> ApiKey:
    """One of the caller's unrevoked keys; Http404 for anything else (another user's, a
    revoked one, a malformed id)."""
    try:
        return api_keys_for_user(user=user).get(pk=key_id)
    except (ApiKey.DoesNotExist, ValidationError, ValueError) as exc:
        raise Http404("No such API key.") from exc
