"""Sign-in with the identity provider: ``GET /oidc/authenticate/`` (redirects to the
provider, with state, nonce and PKCE) and ``GET /oidc/callback/`` (the provider sends the
person back here). Any failure ends on the login page with a sentence saying why; a
signed-in session is only created for a verified token."""

from __future__ import annotations

from django.conf import settings
from django.contrib import auth
from django.contrib.auth import views as auth_views
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from .discovery import DiscoveryFailed, oidc_setting

SESSION_ERROR_KEY = "sso_error"


# settings.OIDC_BUTTON_LABEL's default, for the catalogue: shown translated unless an admin set another.
DEFAULT_BUTTON_LABEL = gettext_noop("Sign in with single sign-on")


def _fail(request, reason: str) -> HttpResponseRedirect:
    request.session[SESSION_ERROR_KEY] = reason
    return HttpResponseRedirect(reverse("login"))


def _require_enabled() -> None:
    if not settings.OIDC_ENABLED:
        raise Http404("Single sign-on is not configured.")


class SSOStartView(OIDCAuthenticationRequestView):
    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):  # endpoints are resolved per request (discovery may fail)
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get(self, request):
        _require_enabled()
        try:
            self.OIDC_OP_AUTH_ENDPOINT = self.get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except DiscoveryFailed as exc:
            return _fail(request, _("Single sign-on is unavailable: %(error)s") % {"error": exc})
        self.OIDC_RP_CLIENT_ID = self.get_settings("OIDC_RP_CLIENT_ID")
        return super().get(request)


class SSOCallbackView(OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)

    def get(self, request):
        _require_enabled()
        if request.GET.get("error"):
            description = request.GET.get("error_description") or request.GET["error"]
            super().get(request)  # drops the state, logs out
            return _fail(request, _("The identity provider refused the sign-in: %(reason)s") % {"reason": description[:200]})
        try:
            return super().get(request)
        except SuspiciousOperation:
            return _fail(request, _("The sign-in could not be verified (unknown or reused state). Please try again."))

    def login_failure(self):
        reason = getattr(self.request, "sso_error", "") or _("the sign-in could not be completed")
        if self.request.user.is_authenticated:
            auth.logout(self.request)
        return _fail(self.request, _("Single sign-on failed: %(reason)s.") % {"reason": reason.rstrip(".")})


class PlatformLoginView(auth_views.LoginView):
    """``/accounts/login/``: the password form (unless ``PASSWORD_LOGIN_ENABLED`` is off)
    and the single sign-on button (when configured), with the last SSO failure's reason."""

    template_name = "registration/login.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context.update({
            "sso_enabled": settings.OIDC_ENABLED,
            "sso_label": _(settings.OIDC_BUTTON_LABEL),  # the default label is translated (DEFAULT_BUTTON_LABEL)
            "sso_error": self.request.session.pop(SESSION_ERROR_KEY, ""),
            "password_login": settings.PASSWORD_LOGIN_ENABLED,
        })
        return context

    def post(self, request, *args, **kwargs):
        if not settings.PASSWORD_LOGIN_ENABLED:
            return _fail(request, _("Password sign-in is turned off; use single sign-on."))
        return super().post(request, *args, **kwargs)
