"""Test settings: fast hashing, no provider retries, no artificial streaming delay."""

from .base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
PROVIDER_MAX_RETRIES = 0
OFFLINE_DELTA_DELAY_S = 0.0
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
