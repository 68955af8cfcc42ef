"""Production settings: secrets from the environment, HTTPS everywhere.

``SECRET_KEY`` has no default here: a missing key fails at start-up.
"""

from .base import *  # noqa: F403
from .base import env

SECRET_KEY = env("SECRET_KEY")
DEBUG = False
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 30)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
# HSTS preload is a commitment for the whole domain; the operator opts in explicitly.
SILENCED_SYSTEM_CHECKS = [] if env.bool("SECURE_HSTS_PRELOAD", default=False) else ["security.W021"]
