"""Password sign-in: the one place every door that takes a password goes through (the
sign-in page, the admin login, the token endpoint), so its rules cannot be missed by a door —
the guessing budgets (``chatplatform.login_throttle``), ``PASSWORD_LOGIN_ENABLED`` and a
bound on concurrent password checks."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.contrib.auth.backends import ModelBackend

from .login_throttle import check_login_budget

logger = logging.getLogger(__name__)

_slots: threading.BoundedSemaphore | None = None
_slots_lock = threading.Lock()


def password_check_slots() -> threading.BoundedSemaphore:
    """The process's ``PASSWORD_CHECKS_AT_ONCE`` slots (default: the CPU count)."""
    global _slots
    with _slots_lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(max(1, settings.PASSWORD_CHECKS_AT_ONCE))
        return _slots


class PasswordBackend(ModelBackend):
    """Django's ``ModelBackend`` checking at most ``PASSWORD_CHECKS_AT_ONCE`` passwords at a
    time per process; the others wait their turn before they touch the database.

    A check is CPU-bound (PBKDF2-SHA256 with Django's 1,000,000 iterations; hashlib releases
    the GIL, so more checks than cores only make each slower), and a request holds its pooled
    database connection from the user lookup to the response: many people signing in at once
    would hold every connection past ``DB_POOL_TIMEOUT_S``, and the sign-ins and any other
    request would answer 503. Waiting here holds no connection.

    Before that, every attempt counts against the sign-in budgets (raises
    ``LoginThrottled`` beyond them, the password unchecked). With ``PASSWORD_LOGIN_ENABLED``
    off (single sign-on only) a password signs in superusers only — the way into the admin
    when the identity provider is down; anyone else is refused as a wrong password would be."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if password is None:
            return None  # not a password sign-in (e.g. the SSO callback): not ours
        if username is None:
            username = kwargs.get(self._username_field())
        check_login_budget(request, username)
        with password_check_slots():
            user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None and not settings.PASSWORD_LOGIN_ENABLED and not user.is_superuser:
            logger.warning("auth: password sign-in of %r refused: PASSWORD_LOGIN_ENABLED is off", user.get_username())
            return None
        return user

    @staticmethod
    def _username_field() -> str:
        from django.contrib.auth import get_user_model

        return get_user_model().USERNAME_FIELD
