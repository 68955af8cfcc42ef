"""Test settings: fast hashing, no provider retries, no artificial streaming delay."""

import os

from .base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
PROVIDER_MAX_RETRIES = 0
OFFLINE_DELTA_DELAY_S = 0.0
# Title requests after a first answer would take answers scripted for the fake models; the
# title tests turn it on (tests/chat/test_titles.py).
CHAT_TITLE_GENERATION = False
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# A file-backed test database: worker threads (the embedded executor, tool threads) share it
# through WAL with a busy timeout, which the shared-cache in-memory database cannot do.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    (BASE_DIR / "var").mkdir(exist_ok=True)  # noqa: F405
    # One file per test process, so parallel test runs never share (and drop) a database.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "var" / f"test-{os.getpid()}.sqlite3")}  # noqa: F405
# Worker and tool threads close their connections after each turn, so test databases can be dropped.
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
# Tests call agents.runs.reaper.reap_expired_runs() themselves; no background thread.
RUN_REAPER_ENABLED = False
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    # Per process too: two test runs on one PostgreSQL never drop each other's database.
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{os.getpid()}"}  # noqa: F405
LOGIN_RATE_LIMIT = LOGIN_USERNAME_RATE_LIMIT = "1000/min"
# pytest-django allows queries on "default" only: the heartbeat uses it in tests (the e2e tests
# run real processes with the heartbeat's own "leases" alias).
DATABASES.pop("leases", None)  # noqa: F405
