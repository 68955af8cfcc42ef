"""The authentication backend for OpenID Connect sign-in (code flow).

Built on ``mozilla_django_oidc.auth.OIDCAuthenticationBackend`` (token exchange, JWKS
signature check, nonce check, userinfo), with what a platform needs on top:

* endpoints from discovery, resolved lazily — a password login never contacts the provider;
* the ID token's ``aud`` must be our client id, ``iss`` the configured issuer, ``exp`` in
  the future (60 s leeway) — the library checks only the signature and nonce;
* users are matched by ``(issuer, sub)`` (``SSOIdentity``), created on first login;
* memberships follow the groups claim (``OIDC_GROUPS_CLAIM``) through ``SSOGroupRule`` rows
  at every login (``services.sso_memberships_sync``).

A failed sign-in returns ``None`` and leaves the reason on ``request.sso_error`` (the
callback view shows it on the login page); tokens and secrets never appear in it.
"""

from __future__ import annotations

import logging

import jwt
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from requests import RequestException

from chatplatform.usernames import UsernameLookalike

from .discovery import DiscoveryFailed, oidc_setting, provider_metadata
from .services import groups_from_claims, sso_memberships_sync, sso_user_for_identity

logger = logging.getLogger(__name__)

CLOCK_LEEWAY_S = 60


class SSOFailed(Exception):
    """A sign-in that must not succeed; the message is for the person signing in."""


class PlatformOIDCBackend(OIDCAuthenticationBackend):
    def __init__(self, *args, **kwargs):
        # Endpoints are resolved in authenticate(): Django instantiates every backend for
        # every login, and a password login must work while the identity provider is down.
        from django.contrib.auth import get_user_model

        self.UserModel = get_user_model()

    get_settings = staticmethod(oidc_setting)

    def _configure(self) -> None:
        super().__init__()

    # --- token checks ---------------------------------------------------------------------
    def _verify_jws(self, payload, key):
        header = jwt.get_unverified_header(payload)
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SSOFailed(f"the identity provider signed with {header.get('alg')!r}, expected {self.OIDC_RP_SIGN_ALGO}")
        try:
            return jwt.decode(
                payload, key, algorithms=[self.OIDC_RP_SIGN_ALGO], audience=self.OIDC_RP_CLIENT_ID,
                issuer=provider_metadata()["issuer"], leeway=CLOCK_LEEWAY_S,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise SSOFailed("the identity provider's token has expired") from exc
        except jwt.InvalidAudienceError as exc:
            raise SSOFailed("the identity provider's token was issued for another application (audience)") from exc
        except jwt.InvalidIssuerError as exc:
            raise SSOFailed("the identity provider's token comes from another issuer") from exc
        except jwt.PyJWTError as exc:
            raise SSOFailed(f"the identity provider's token is invalid ({type(exc).__name__})") from exc

    def verify_token(self, token, **kwargs):
        try:
            payload = super().verify_token(token, **kwargs)
        except SuspiciousOperation as exc:
            raise SSOFailed(str(exc).replace("JWT Nonce", "the sign-in's nonce")) from exc
        self._id_claims = payload
        return payload

    # --- users ------------------------------------------------------------------------------
    def verify_claims(self, claims):
        return bool(claims.get("sub"))

    def filter_users_by_claims(self, claims):  # matched by identity in get_or_create_user
        return self.UserModel.objects.none()

    def get_or_create_user(self, access_token, id_token, payload):
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT:
            userinfo = self.get_userinfo(access_token, id_token, payload)
            if str(userinfo.get("sub")) != str(payload.get("sub")):  # OIDC Core §5.3.2
                raise SSOFailed("the identity provider's userinfo is for another subject")
            claims.update(userinfo)
        try:
            user = sso_user_for_identity(issuer=provider_metadata()["issuer"], claims=claims,
                                         username_claim=settings.OIDC_USERNAME_CLAIM)
        except UsernameLookalike as exc:
            raise SSOFailed(f"the identity provider's username {exc.wanted!r} reads the same as the existing "
                            f"account {exc.existing!r}; an administrator must rename one of them") from exc
        if settings.OIDC_SYNC_MEMBERSHIPS:
            changes = sso_memberships_sync(user=user, groups=groups_from_claims(claims, claim=settings.OIDC_GROUPS_CLAIM))
            if any(changes.values()):
                logger.info("sso: memberships of %s changed: %s", user.username, changes)
        return user

    def authenticate(self, request, **kwargs):
        if request is None or "nonce" not in kwargs or "code" not in request.GET or "state" not in request.GET:
            return None  # not our callback view (e.g. a password login, whatever its URL): not ours
        try:
            self._configure()
            return super().authenticate(request, **kwargs)
        except SSOFailed as exc:
            reason = str(exc)
        except DiscoveryFailed as exc:
            reason = str(exc)
        except RequestException as exc:  # token or userinfo endpoint failed
            status = getattr(getattr(exc, "response", None), "status_code", None)
            reason = f"the identity provider refused the sign-in (HTTP {status})" if status else \
                "the identity provider could not be reached"
        logger.warning("sso: sign-in refused: %s", reason)
        request.sso_error = reason
        return None
