"""A real OpenID Connect provider for the single sign-on tests: ``django-oidc-provider`` in a
project of its own, run as a subprocess on loopback (``tests/sso/idp.py`` starts it).

``IDP_DB`` (SQLite file) and ``IDP_SITE_URL`` (``http://127.0.0.1:<port>``) come from the
environment. Its cookies have their own names: browsers share cookies between ports of one
host, and the platform under test runs on 127.0.0.1 too.
"""

import os
from pathlib import Path

SECRET_KEY = "test-identity-provider-only"  # noqa: S105 — a throwaway provider for tests
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oidc_provider",
    "tests.oidc_idp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.oidc_idp.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [Path(__file__).parent / "templates"],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                       "django.contrib.auth.context_processors.auth"]},
}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ.get("IDP_DB", "idp.sqlite3")}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
USE_TZ = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"
LOGIN_URL = "/accounts/login/"
SITE_URL = os.environ.get("IDP_SITE_URL", "http://127.0.0.1:8765")
OIDC_USERINFO = "tests.oidc_idp.claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "tests.oidc_idp.claims.GroupsScopeClaims"
OIDC_IDTOKEN_PROCESSING_HOOK = "tests.oidc_idp.claims.token_faults"
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "handlers": {"console": {"class": "logging.StreamHandler"}},
           "root": {"handlers": ["console"], "level": "WARNING"}}
