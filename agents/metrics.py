"""Prometheus series the run path records (process-local; see ``usage/metrics.py`` for how
they reach ``/metrics``): time to first token and tokens per second per provider, provider
errors by code, events a subscriber's cursor filled from the event log, open websockets."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

TTFT = Histogram("chatplatform_time_to_first_token_seconds", "From the model request to its first text",
                 ["provider"], buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32))
TOKENS_PER_S = Histogram("chatplatform_tokens_per_second", "Output tokens per second of one model response",
                         ["provider"], buckets=(1, 5, 10, 20, 40, 80, 160, 320))
PROVIDER_ERRORS = Counter("chatplatform_provider_errors", "Provider failures by ProviderError code", ["code"])
EVENTS_FILLED = Counter(
    "chatplatform_events_filled",
    "Events a subscriber's cursor took from the event log instead of the channel layer (how: gap = the "
    "layer dropped them, replay = a run seen mid-way or resumed, missing = no longer in the log)",
    ["how"],
)
WEBSOCKETS = Gauge("chatplatform_websocket_connections", "Open websocket connections")


def record_round(*, provider: str, first_token_s: float | None, duration_s: float, output_tokens: int | None) -> None:
    """One model response: seconds to its first text, and output tokens per second."""
    if first_token_s is not None:
        TTFT.labels(provider or "-").observe(first_token_s)
    if output_tokens and duration_s > 0:
        TOKENS_PER_S.labels(provider or "-").observe(output_tokens / duration_s)
