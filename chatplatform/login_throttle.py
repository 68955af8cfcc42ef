"""Password-guessing limits for both sign-in doors: ``POST /api/v1/auth/token/`` and the HTML
form at ``/accounts/login/``.

Two budgets, each a DRF ``SimpleRateThrottle`` on the shared cache:

* per client address — ``LOGIN_RATE_LIMIT`` (default ``10/min``). The address is the socket
  peer unless ``NUM_PROXIES`` (default 0) trusted proxies sit in front: then the entry that
  many hops from the right of ``X-Forwarded-For``. A client can therefore never pick its
  own address by sending the header;
* per username (case-insensitive) — ``LOGIN_USERNAME_RATE_LIMIT`` (default ``10/min``), so
  rotating addresses does not buy more guesses at one account.

Every sign-in attempt counts. Beyond either budget: 429 with ``Retry-After`` (REST:
``{"error": {"code": "throttled", ...}}``; the form: the page again with a message).
"""

from __future__ import annotations

import math

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class _LoginThrottle(SimpleRateThrottle):
    rate_setting = ""

    def get_rate(self) -> str:
        return getattr(settings, self.rate_setting)

    def get_ident(self, request) -> str:
        """The client address with ``NUM_PROXIES`` trusted proxies (never the raw header)."""
        remote = request.META.get("REMOTE_ADDR") or ""
        proxies = int(getattr(settings, "NUM_PROXIES", 0) or 0)
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
        if proxies <= 0 or not forwarded:
            return remote
        hops = [h.strip() for h in forwarded.split(",") if h.strip()]
        return hops[-min(proxies, len(hops))] if hops else remote


class LoginAddressThrottle(_LoginThrottle):
    """At most ``LOGIN_RATE_LIMIT`` sign-in attempts per client address."""

    scope = "login"
    rate_setting = "LOGIN_RATE_LIMIT"

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class LoginUsernameThrottle(_LoginThrottle):
    """At most ``LOGIN_USERNAME_RATE_LIMIT`` sign-in attempts per username."""

    scope = "login-username"
    rate_setting = "LOGIN_USERNAME_RATE_LIMIT"

    def get_cache_key(self, request, view) -> str | None:
        data = getattr(request, "data", None)
        if data is None:  # a plain Django request (the HTML form)
            data = request.POST
        username = data.get("username") if hasattr(data, "get") else None
        if not isinstance(username, str) or not username.strip():
            return None  # nothing to guess at: the address budget still applies
        ident = username.strip().lower()[:150].encode("utf-8", "replace").hex()
        return self.cache_format % {"scope": self.scope, "ident": ident}


LOGIN_THROTTLES = [LoginAddressThrottle, LoginUsernameThrottle]


def login_wait(request) -> float | None:
    """Count one attempt against every budget; seconds to wait when one is spent, else None."""
    waits = []
    for throttle in (cls() for cls in LOGIN_THROTTLES):
        if not throttle.allow_request(request, None):
            waits.append(throttle.wait() or 1)
    return max(waits) if waits else None


class LoginThrottleMixin:
    """For a ``LoginView``: the same budgets as the token endpoint, checked before the form
    (a throttled attempt never reaches the password check)."""

    def post(self, request, *args, **kwargs):
        wait = login_wait(request)
        if wait is not None:
            # An unbound form: a throttled attempt never reaches the password check.
            form = self.get_form_class()(request, initial={"username": request.POST.get("username", "")[:150]})
            context = self.get_context_data(
                form=form, throttled=f"Too many sign-in attempts. Try again in {math.ceil(wait)} s.")
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(math.ceil(wait))
            return response
        return super().post(request, *args, **kwargs)
