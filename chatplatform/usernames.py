"""One reading of a username everywhere: sign-in budgets, new accounts, single sign-on.

Django's sign-in forms normalise the typed name with NFKC, so ``𝐛ob`` (mathematical bold b)
or ``ｂｏｂ`` (full width) sign in as ``bob``. Everything that keys on a username therefore
uses the same form:

* :func:`username_key` — NFKC, then case-folded: the sign-in throttle's key;
* :func:`normalize_new_username` — a new or renamed account is stored in NFKC form and is
  refused (:class:`UsernameLookalike`) when another account has the same key, e.g. ``ａｄｍｉｎ``
  or ``Admin`` beside ``admin``. Enforced by a ``pre_save`` signal on the user model, so every
  way of creating users (admin, ``createsuperuser``, single sign-on, scripts) gets it.
"""

from __future__ import annotations

import logging
import unicodedata

from django.core.exceptions import ValidationError

logger = logging.getLogger(__name__)


class UsernameLookalike(ValidationError):
    """A new username that reads the same as an existing account's (NFKC, case-folded)."""

    def __init__(self, wanted: str, existing: str):
        self.wanted, self.existing = wanted, existing
        super().__init__(f"the username {wanted!r} reads the same as the existing account {existing!r}",
                         code="username_lookalike")


def nfkc(name: str) -> str:
    return unicodedata.normalize("NFKC", name)


def username_key(name: str) -> str:
    """``name`` as compared for sameness: stripped, NFKC, case-folded (``"𝐁ob " → "bob"``)."""
    return nfkc(name.strip()).casefold()


def lookalike_of(name: str, *, exclude_pk=None) -> str | None:
    """The username of another account whose :func:`username_key` equals ``name``'s, else None."""
    from django.contrib.auth import get_user_model

    User = get_user_model()
    key = username_key(name)
    # iexact narrows in SQL (SQLite's LOWER is ASCII-only, so compare in Python as well);
    # the exact key check below is the rule.
    candidates = User.objects.filter(username__iexact=nfkc(name.strip()))
    if exclude_pk is not None:
        candidates = candidates.exclude(pk=exclude_pk)
    for other in candidates.values_list("username", flat=True):
        if username_key(other) == key:
            return other
    if not key.isascii():  # e.g. "ß" vs "SS": iexact may not have found it
        for other in User.objects.exclude(pk=exclude_pk).values_list("username", flat=True).iterator():
            if username_key(other) == key:
                return other
    return None


def normalize_new_username(user) -> None:
    """Store ``user.username`` in NFKC form; raise :class:`UsernameLookalike` when another
    account already has a name that reads the same."""
    name = user.get_username()
    if not isinstance(name, str):
        return
    normal = nfkc(name)
    if normal != name:
        setattr(user, user.USERNAME_FIELD, normal)
    other = lookalike_of(normal, exclude_pk=user.pk)
    if other is not None:
        logger.warning("users: refused the username %r: it reads the same as the existing account %r", name, other)
        raise UsernameLookalike(name, other)


def _on_user_pre_save(sender, instance, raw=False, update_fields=None, **kwargs):
    if raw:  # fixtures load as they are
        return
    if update_fields is not None and instance.USERNAME_FIELD not in update_fields:
        return  # e.g. last_login, e-mail refresh: the name is not being written
    if instance.pk is not None and not instance._state.adding:
        stored = type(instance).objects.filter(pk=instance.pk).values_list(instance.USERNAME_FIELD, flat=True).first()
        if stored == instance.get_username():
            return  # unchanged name: names from before this rule stay as they are
    normalize_new_username(instance)


def connect() -> None:
    """Attach the rule to the user model (called from an app's ``ready``)."""
    from django.contrib.auth import get_user_model
    from django.db.models.signals import pre_save

    pre_save.connect(_on_user_pre_save, sender=get_user_model(), dispatch_uid="chatplatform.usernames")
