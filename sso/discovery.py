"""The identity provider's metadata from OpenID Connect discovery.

``OIDC_ISSUER`` names the provider; its metadata is read from
``<issuer>/.well-known/openid-configuration`` (or ``OIDC_DISCOVERY_URL`` when set), checked
(the ``issuer`` it states must be the configured one, per OpenID Connect Discovery §4.3) and
cached for ``OIDC_DISCOVERY_TTL_S`` seconds (3600). Nothing is fetched at import or start-up:
the first sign-in reads it.
"""

from __future__ import annotations

import requests
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

CACHE_KEY = "sso:oidc-metadata:"
REQUIRED = ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")


class DiscoveryFailed(Exception):
    """The metadata could not be read or is not valid; the message says why."""


def discovery_url() -> str:
    if settings.OIDC_DISCOVERY_URL:
        return settings.OIDC_DISCOVERY_URL
    if not settings.OIDC_ISSUER:
        raise ImproperlyConfigured("OIDC_ISSUER is not set")
    return settings.OIDC_ISSUER.rstrip("/") + "/.well-known/openid-configuration"


def provider_metadata() -> dict:
    """The provider's metadata (``issuer``, ``authorization_endpoint``, ``token_endpoint``,
    ``userinfo_endpoint``, ``jwks_uri``, …). Raises DiscoveryFailed."""
    url = discovery_url()
    cached = cache.get(CACHE_KEY + url)
    if cached:
        return cached
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL)
        response.raise_for_status()
        data = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise DiscoveryFailed(f"identity provider metadata unavailable ({url}): {exc}") from exc
    missing = [key for key in REQUIRED if not data.get(key)]
    if missing:
        raise DiscoveryFailed(f"identity provider metadata lacks {', '.join(missing)}")
    expected = settings.OIDC_ISSUER.rstrip("/") if settings.OIDC_ISSUER else ""
    if expected and data["issuer"].rstrip("/") != expected:
        raise DiscoveryFailed(f"identity provider says its issuer is {data['issuer']!r}, not {expected!r}")
    cache.set(CACHE_KEY + url, data, settings.OIDC_DISCOVERY_TTL_S)
    return data


_ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


def oidc_setting(attr: str, *default):
    """``mozilla_django_oidc`` settings lookup with the provider endpoints taken from
    discovery (an explicitly set ``OIDC_OP_*`` setting still wins)."""
    from mozilla_django_oidc.utils import import_from_settings

    if attr in _ENDPOINTS and not getattr(settings, attr, None):
        return provider_metadata().get(_ENDPOINTS[attr], *default)
    return import_from_settings(attr, *default)
