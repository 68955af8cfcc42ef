"""Per-user rate limits on a fixed window, kept in Django's cache (Redis in production, so
every web process shares the count; local memory in embedded mode).

Spec strings are ``"N/S"``: at most N hits in S seconds.
"""

from __future__ import annotations

import time

from django.core.cache import cache


def parse_rate(spec: str) -> tuple[int, int]:
    """``"30/60"`` → ``(30, 60)``. Raises ValueError for anything else."""
    count, _, seconds = spec.partition("/")
    return int(count), int(seconds)


def rate_limit_hit(*, key: str, spec: str) -> float:
    """Count one hit for ``key``; return 0 when allowed, else seconds until the window resets."""
    limit, window = parse_rate(spec)
    now = time.time()
    window_start = int(now // window) * window
    bucket = f"ratelimit:{key}:{window_start}"
    cache.add(bucket, 0, timeout=window + 1)
    try:
        count = cache.incr(bucket)
    except ValueError:  # evicted between add and incr
        cache.set(bucket, 1, timeout=window + 1)
        count = 1
    if count > limit:
        return max(0.001, window_start + window - now)
    return 0.0
