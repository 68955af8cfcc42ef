"""Password-guessing limits for every door that takes a password: the HTML form at
``/accounts/login/``, the admin's ``/admin/login/``, ``POST /api/v1/auth/token/`` and any
other view that calls ``django.contrib.auth.authenticate`` with a username and password.

The budgets are enforced in one place, the password backend
(``chatplatform.auth_backends.PasswordBackend``), before the password is checked — so a
door cannot be added without them. Two budgets, each a DRF ``SimpleRateThrottle`` on the
shared cache:

* per client address — ``LOGIN_RATE_LIMIT`` (default ``10/min``). The address is the socket
  peer unless ``NUM_PROXIES`` (default 0) trusted proxies sit in front: then the entry that
  many hops from the right of ``X-Forwarded-For``. A client can therefore never pick its
  own address by sending the header;
* per username — ``LOGIN_USERNAME_RATE_LIMIT`` (default ``10/min``), so rotating addresses
  does not buy more guesses at one account. The key is the username's NFKC form, case-folded
  (``chatplatform.usernames.username_key``): ``Bob``, ``BOB`` and ``𝐛ob`` (mathematical
  bold b) share one budget, as the sign-in form maps them to the same account.

Every password attempt counts once per request; so does changing one's password
(``/accounts/password_change/``, which checks the old password: :class:`PasswordChangeThrottleMixin`). Beyond either budget ``authenticate`` raises
:class:`LoginThrottled` (a DRF ``Throttled``): REST answers 429 ``{"error": {"code":
"throttled", ...}}`` with ``Retry-After``; the sign-in page shows itself again with a
message (429); any other HTML door (the admin login) gets a 429 page from
:class:`LoginThrottledMiddleware`.
"""

from __future__ import annotations

import math

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.utils.html import escape
from django.utils.translation import gettext
from rest_framework.exceptions import Throttled
from rest_framework.throttling import SimpleRateThrottle

from .usernames import username_key

_COUNTED = "_chatplatform_login_wait"


class LoginThrottled(Throttled):
    """A sign-in attempt beyond a budget; ``wait`` is the seconds until the next is allowed."""

    default_code = "throttled"

    def __init__(self, wait: float):
        super().__init__(wait=math.ceil(wait),
                         detail=gettext("Too many sign-in attempts. Try again in %(s)d s.") % {"s": math.ceil(wait)})


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
    """At most ``LOGIN_USERNAME_RATE_LIMIT`` sign-in attempts per username (its
    ``username_key``: NFKC, case-folded)."""

    scope = "login-username"
    rate_setting = "LOGIN_USERNAME_RATE_LIMIT"

    def __init__(self, username: str | None = None):
        super().__init__()
        self.username = username

    def get_cache_key(self, request, view) -> str | None:
        key = username_key(self.username) if isinstance(self.username, str) else ""
        if not key:
            return None  # nothing to guess at: the address budget still applies
        ident = key[:150].encode("utf-8", "replace").hex()
        return self.cache_format % {"scope": self.scope, "ident": ident}


def _http_request(request):
    """The Django ``HttpRequest`` under a DRF ``Request`` (the mark of "already counted" must
    be on the object every layer shares)."""
    return getattr(request, "_request", request)


def login_wait(request, username: str | None) -> float | None:
    """Count one attempt of ``request`` (an HttpRequest or DRF Request; None: no address)
    for ``username`` against every budget; seconds to wait when one is spent, else None.
    A request is counted once however many backends or checks ask."""
    http = _http_request(request) if request is not None else None
    if http is not None and hasattr(http, _COUNTED):
        return getattr(http, _COUNTED)
    throttles = [LoginUsernameThrottle(username)]
    if http is not None:
        throttles.insert(0, LoginAddressThrottle())
    waits = []
    for throttle in throttles:
        # With no request only the username budget applies; its key needs no request.
        if not throttle.allow_request(http, None):
            waits.append(throttle.wait() or 1)
    wait = max(waits) if waits else None
    if http is not None:
        setattr(http, _COUNTED, wait)
    return wait


def check_login_budget(request, username: str | None) -> None:
    """Raise :class:`LoginThrottled` when this attempt is beyond a budget (counts it)."""
    wait = login_wait(request, username)
    if wait is not None:
        raise LoginThrottled(wait)


class LoginThrottleMixin:
    """For the sign-in ``LoginView``: a throttled attempt (raised by the backend before the
    password check) shows the page again with the message and 429."""

    def post(self, request, *args, **kwargs):
        try:
            return super().post(request, *args, **kwargs)
        except LoginThrottled as exc:
            # An unbound form: a throttled attempt never reaches the password check.
            form = self.get_form_class()(request, initial={"username": request.POST.get("username", "")[:150]})
            context = self.get_context_data(form=form, throttled=str(exc.detail))
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(exc.wait)
            return response


class PasswordChangeThrottleMixin:
    """For ``PasswordChangeView``: the old password is a password check too (a stolen session
    could otherwise guess it, then change it), so every attempt spends the same budgets as a
    sign-in of that account; beyond them ``LoginThrottled`` (a 429 page, the middleware)."""

    def post(self, request, *args, **kwargs):
        check_login_budget(request, request.user.get_username())
        return super().post(request, *args, **kwargs)


class LoginThrottledMiddleware:
    """Any other door (the admin's login, a future form): a :class:`LoginThrottled` raised
    from ``authenticate`` becomes a 429 with ``Retry-After`` — JSON ``{"error": {"code":
    "throttled", "message"}}`` for API paths, else a short HTML page linking back."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, LoginThrottled):
            return None
        message = str(exception.detail)
        if request.path.startswith(("/api/", "/v1/")):
            response = JsonResponse({"error": {"code": "throttled", "message": message}}, status=429)
        else:
            title, back = gettext("Too many sign-in attempts"), gettext("Back")
            response = HttpResponse(
                f"<!doctype html><title>{escape(title)}</title>"
                f"<p>{escape(message)}</p><p><a href=\"{escape(request.get_full_path())}\">{escape(back)}</a></p>",
                status=429, content_type="text/html; charset=utf-8")
        response["Retry-After"] = str(exception.wait)
        return response
