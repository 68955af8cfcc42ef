"""Per-user rate limits on a fixed window, kept in Django's cache (Redis in production, so
every web process shares the count; local memory in embedded mode).

Spec strings are ``"N/S"``: at most N hits in S seconds.

While the cache cannot be reached (Redis restarting), nothing is counted and every hit is
allowed, with a warning: a limit guards against a flood, and refusing everyone's sends and
Stops for the length of an outage would be the outage spreading (a Stop sent then used to
close the socket and be lost).
"""

from __future__ import annotations

import logging
import time

from django.core.cache import cache
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


def parse_rate(spec: str) -> tuple[int, int]:
    """``"30/60"`` → ``(30, 60)``. Raises ValueError for anything else."""
    count, _, seconds = spec.partition("/")
    return int(count), int(seconds)


def rate_limit_hit(*, key: str, spec: str) -> float:
    """Count one hit for ``key``; return 0 when allowed, else seconds until the window resets.
    0 (allowed, not counted) while the cache is unreachable."""
    limit, window = parse_rate(spec)
    now = time.time()
    window_start = int(now // window) * window
    bucket = f"ratelimit:{key}:{window_start}"
    try:
        cache.add(bucket, 0, timeout=window + 1)
        try:
            count = cache.incr(bucket)
        except ValueError:  # evicted between add and incr
            cache.set(bucket, 1, timeout=window + 1)
            count = 1
    except (RedisError, OSError) as exc:
        logger.warning("rate limit %s not counted: the cache is unreachable (%s)", key.split(":")[0], exc)
        return 0.0
    if count > limit:
        return max(0.001, window_start + window - now)
    return 0.0
