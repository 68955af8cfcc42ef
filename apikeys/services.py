"""Making, checking and revoking API keys.

A key is ``cp_`` + 43 URL-safe characters (32 random bytes). Only its SHA-256 and its first
characters (``prefix``) are stored; the key itself is returned once, by :func:`api_key_create`.
The doors reach :func:`user_for_api_key` and :func:`api_key_still_valid` through
``chatplatform.credentials`` (registered in ``ApiKeysConfig.ready``).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from chat.access import access_changed_notify
from chatplatform.credentials import KeyRefused
from chatplatform.errors import ServiceError

from .models import ApiKey

KEY_PREFIX = "cp_"
PREFIX_CHARS = len(KEY_PREFIX) + 6  # what lists show: "cp_ab12cd…"
NAME_MAX = 100
# last_used_at is written at most once per this interval per key, not on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def max_keys_per_user() -> int:
    return int(getattr(settings, "API_KEYS_MAX_PER_USER", 25))


def _active(now) -> Q:
    return Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))


@dataclass(frozen=True)
class Created:
    api_key: ApiKey
    key: str  # the secret: shown once, never stored


def api_key_create(*, user, name: str, expires_at=None) -> Created:
    """A new key for ``user``. ServiceError 400: ``invalid`` (a name empty or over
    ``NAME_MAX`` characters, an expiry not in the future), ``too_many_keys`` (the user holds
    ``API_KEYS_MAX_PER_USER`` keys that are neither revoked nor expired)."""
    name = (name or "").strip()
    if not name:
        raise ServiceError("invalid", _("Give the key a name."), 400)
    if len(name) > NAME_MAX:
        raise ServiceError("invalid", _("A key's name is at most %(n)d characters.") % {"n": NAME_MAX}, 400)
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise ServiceError("invalid", _("The expiry must be in the future."), 400)
    limit = max_keys_per_user()
    with transaction.atomic():
        # One creation at a time per user, so two at once cannot pass the limit together.
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        if ApiKey.objects.filter(_active(now), user=user).count() >= limit:
            raise ServiceError("too_many_keys", ngettext(
                "You have %(n)d active API key, the most allowed; revoke it to make another.",
                "You have %(n)d active API keys, the most allowed; revoke one to make another.", limit) % {"n": limit},
                400)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        api_key = ApiKey.objects.create(user=user, name=name, prefix=key[:PREFIX_CHARS], key_hash=key_hash(key),
                                        expires_at=expires_at)
    return Created(api_key, key)


def api_key_revoke(*, api_key: ApiKey, by) -> ApiKey:
    """Revoke ``api_key`` (its owner or an administrator: ``by``); its open websockets, SSE and
    ``/v1`` streams close at once (``access.changed``, ``chat.access``). Revoking a revoked key
    changes nothing."""
    with transaction.atomic():
        changed = ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_by=by)
        if changed:
            access_changed_notify(api_key.user_id)
    api_key.refresh_from_db()
    return api_key


def user_for_api_key(key: str):
    """The active owner of ``key``; None for an unknown key or an inactive owner;
    ``KeyRefused`` for a revoked or expired one. Notes the use (at most once a minute)."""
    api_key = ApiKey.objects.select_related("user").filter(key_hash=key_hash(key)).first()
    if api_key is None or not api_key.user.is_active:
        return None
    now = timezone.now()
    if api_key.revoked_at is not None:
        raise KeyRefused("api_key_revoked", "This API key has been revoked.")
    if api_key.is_expired(now):
        raise KeyRefused("api_key_expired", f"This API key expired at {api_key.expires_at:%Y-%m-%d %H:%M} UTC; "
                                            "make a new one on the settings page.")
    if api_key.last_used_at is None or now - api_key.last_used_at >= LAST_USED_RESOLUTION:
        # Conditional: of many requests in the same minute (several processes), one writes.
        ApiKey.objects.filter(pk=api_key.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_RESOLUTION)).update(last_used_at=now)
    return api_key.user


def api_key_still_valid(*, user, key: str) -> bool:
    """``key`` is still an unrevoked, unexpired key of ``user``, who is still active (the
    re-check of an open socket or stream). One query."""
    return ApiKey.objects.filter(_active(timezone.now()), key_hash=key_hash(key), user=user,
                                 user__is_active=True).exists()
