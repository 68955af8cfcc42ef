"""Fixtures of the security tests."""

from __future__ import annotations

import pytest
from django.core.cache import cache


@pytest.fixture
def budgets(settings):
    """Sign-in budgets small enough to reach: 3 attempts an hour per address, 1000 per username
    (tests change them through the returned settings); a clean cache before and after."""
    settings.LOGIN_RATE_LIMIT = "3/hour"
    settings.LOGIN_USERNAME_RATE_LIMIT = "1000/hour"
    settings.NUM_PROXIES = 0
    cache.clear()
    yield settings
    cache.clear()
