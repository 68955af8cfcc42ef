"""Fixtures for the end-to-end tests: the platform as real processes (see ``harness.py``).

* ``embedded_platform`` — SQLite + in-memory channel layer, one daphne process.
* ``services_platform`` — PostgreSQL + Redis + daphne + a Celery worker. Skipped when
  PostgreSQL or Redis is unreachable, unless ``CI=true``: then it fails loudly.
* ``private_postgres`` — a PostgreSQL cluster of the module's own (``initdb`` + ``pg_ctl`` on a
  free port), for tests that stop and start the database; the shared one is never stopped.

When a test that uses a platform fails, the end of every process log is attached to the
report.
"""

from __future__ import annotations

import os

import pytest

from tests.fakes.openai_server import FakeOpenAI

from .harness import Platform, require_services, services_unreachable_reason, started
from .private_services import PrivatePostgres, PrivateRedis, missing_reason


@pytest.fixture(scope="module")
def embedded_platform():
    platform = Platform("embedded")
    yield from started(platform)


@pytest.fixture(scope="module")
def services_platform():
    require_services(services_unreachable_reason())
    platform = Platform("services")
    yield from started(platform)


@pytest.fixture(scope="module")
def redis_server():
    """A private ``redis-server`` for one module, without persistence: a restart starts empty
    (a module that wants the README's append-only file defines its own)."""
    require_services(services_unreachable_reason() or missing_reason(redis=True))
    server = PrivateRedis().start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def private_postgres():
    require_services(services_unreachable_reason() or missing_reason(postgres=True))
    pg = PrivatePostgres().start()
    yield pg
    pg.close()


@pytest.fixture(scope="module")
def upstream():
    """A fake OpenAI-compatible model on loopback (``tests.fakes.openai_server``) for one
    module: point a platform at it with ``OPENAI_BASE_URL=upstream.base_url`` and
    ``OPENAI_API_KEY=upstream.api_key``, then script its answers."""
    fake = FakeOpenAI(api_key="sk-upstream").start()
    yield fake
    fake.stop()


CHROMIUM = os.environ.get("E2E_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """The system Chromium driven by Playwright (sync API). Skipped when Chromium or
    Playwright is missing, unless ``CI=true``: then it fails."""
    problem = None
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        problem = f"no Chromium at {CHROMIUM}"
    else:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as exc:
            problem = f"playwright not installed: {exc}"
    require_services(problem)  # the browser counts as one: CI must run these tests
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=15_000)
        yield b
        b.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, Platform):
                report.sections.append((f"{value.mode} platform logs", value.log_tail(60)))
