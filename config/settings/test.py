"""Test settings: fast hashing, no provider retries, no artificial streaming delay."""

import os
from urllib.parse import urlsplit, urlunsplit


def _redis_db_per_test_process() -> None:
    """Under pytest-xdist each test process gets its own Redis database (cache, channel layer,
    Celery broker), as it gets its own test database: worker ``gwN`` uses the database
    ``REDIS_URL`` names minus N. Set before ``base`` reads ``REDIS_URL``."""
    url, worker = os.environ.get("REDIS_URL", ""), os.environ.get("PYTEST_XDIST_WORKER", "")
    if not url or not worker.removeprefix("gw").isdigit():
        return
    parts = urlsplit(url)
    db = int(parts.path.lstrip("/") or 0) - int(worker.removeprefix("gw"))
    if db < 0:
        raise RuntimeError(f"REDIS_URL {url}: too few Redis databases below it for test process {worker}")
    os.environ["REDIS_URL"] = urlunsplit(parts._replace(path=f"/{db}"))


_redis_db_per_test_process()

from .base import *  # noqa: E402,F403

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
SCHEDULE_TICKER_ENABLED = False  # tests call schedules.services.schedules_tick(now=…) themselves
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    # Per process too: two test runs on one PostgreSQL never drop each other's database.
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{os.getpid()}"}  # noqa: F405
LOGIN_RATE_LIMIT = LOGIN_USERNAME_RATE_LIMIT = "1000/min"
# pytest-django allows queries on "default" only: the heartbeat uses it in tests (the e2e tests
# run real processes with the heartbeat's own "leases" alias).
DATABASES.pop("leases", None)  # noqa: F405
# No embedding model in the test processes unless a test turns it on (tests/knowledge/
# test_hybrid.py loads the real one once per process): keyword retrieval, as before.
KNOWLEDGE_EMBEDDINGS = os.environ.get("KNOWLEDGE_EMBEDDINGS", "off")
