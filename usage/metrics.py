"""Prometheus series of usage, and the series read from the database at scrape time.

With django-prometheus's request metrics and the run path's own series
(:mod:`agents.metrics`: time to first token, tokens per second, provider errors, events
filled by the cursor, websocket connections) they make up ``/metrics``.

In-process series are recorded where the work happens: the web process in embedded mode, a
Celery worker in production (its own port, ``WORKER_METRICS_PORT``). Series read from the
database are computed at scrape time by :class:`DatabaseCollector` (every web process agrees):
``chatplatform_runs{status}``, ``chatplatform_approvals_pending``,
``chatplatform_approval_oldest_age_seconds``, ``chatplatform_tool_calls_stored{tool,status}``.
Here: ``chatplatform_tokens_total{provider,model,kind}`` (kind: input, output, cached, reasoning).
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily

TOKENS = Counter("chatplatform_tokens", "Tokens reported by providers", ["provider", "model", "kind"])


def record_tokens(*, provider: str, model: str, usage: dict | None) -> None:
    for kind in ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"):
        value = (usage or {}).get(kind)
        if value:
            TOKENS.labels(provider or "-", model or "-", kind.removesuffix("_tokens")).inc(value)


class DatabaseCollector:
    """Gauges read from the database at scrape time (all web processes agree)."""

    def collect(self):
        from django.db.models import Count, Min
        from django.utils import timezone

        from agents.models import Run, ToolCall

        runs = GaugeMetricFamily("chatplatform_runs", "Runs by status", labels=["status"])
        counts = dict(Run.objects.values_list("status").annotate(n=Count("pk")))
        for status in Run.Status.values:
            runs.add_metric([status], counts.get(status, 0))
        yield runs
        pending = ToolCall.objects.filter(status=ToolCall.Status.AWAITING_APPROVAL)
        agg = pending.aggregate(n=Count("pk"), oldest=Min("requested_at"))
        yield GaugeMetricFamily("chatplatform_approvals_pending", "Tool calls waiting for a decision",
                                value=agg["n"] or 0)
        age = (timezone.now() - agg["oldest"]).total_seconds() if agg["oldest"] else 0.0
        yield GaugeMetricFamily("chatplatform_approval_oldest_age_seconds",
                                "Age of the oldest pending approval", value=age)
        calls = GaugeMetricFamily("chatplatform_tool_calls_stored", "Tool calls in the ledger by tool and status",
                                  labels=["tool", "status"])
        for tool, status, n in ToolCall.objects.values_list("tool_name", "status").annotate(n=Count("pk")):
            calls.add_metric([tool, status], n)
        yield calls


_registered = False
_lock = threading.Lock()


def register_database_collector() -> None:
    global _registered
    with _lock:
        if not _registered:
            REGISTRY.register(DatabaseCollector())
            _registered = True


def start_worker_exporter(*, port: int, addr: str = "127.0.0.1"):
    """Serve this process's series on ``http://<addr>:<port>/metrics`` (a Celery worker's
    run-path series; started at ``worker_ready`` when ``WORKER_METRICS_PORT`` is set). Binds
    to loopback unless told otherwise. Returns the server (``shutdown()`` stops it)."""
    from prometheus_client import start_http_server

    import agents.metrics  # noqa: F401 (registers the run-path series before the first turn)

    server, _thread = start_http_server(port, addr=addr)
    return server
