"""Password sign-in that a burst of logins cannot turn into a database outage."""

from __future__ import annotations

import threading

from django.conf import settings
from django.contrib.auth.backends import ModelBackend

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
    request would answer 503. Waiting here holds no connection."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        with password_check_slots():
            return super().authenticate(request, username=username, password=password, **kwargs)
