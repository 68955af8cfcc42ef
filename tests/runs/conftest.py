"""Fixtures shared by the run tests."""

import pytest

from tests.conftest import make_thread


@pytest.fixture
def alice_thread(users, workspaces, openai_provider):
    """alice's thread in the demo workspace on the fake OpenAI-compatible provider."""
    return make_thread(users["alice"], workspaces["demo"], openai_provider)


@pytest.fixture
def short_leases(settings):
    """Leases of 1 s renewed every 0.1 s (the fence at 0.8 s), a suspended one held 30 s."""
    settings.RUN_LEASE_S = 1.0
    settings.RUN_HEARTBEAT_S = 0.1
    settings.STREAM_PERSIST_INTERVAL_S = 0.1
    settings.RUN_LEASE_HOLD_S = 30.0


@pytest.fixture
def fresh_cache():
    """The default cache empty before and after (rate limits, the reaper's liveness keys)."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def thread(users, workspaces, openai_provider):
    """alice's ungrounded thread in the demo workspace on the fake OpenAI-compatible provider."""
    return make_thread(users["alice"], workspaces["demo"], openai_provider, grounded=False)
