"""OpenTelemetry traces: off by default; on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

:func:`configure_tracing` (called from ``UsageConfig.ready()`` in every process: web and
Celery worker) installs a tracer provider exporting OTLP over HTTP
(``<endpoint>/v1/traces``) and the official instrumentations: Django (one span per HTTP
request), Celery (the task span continues the trace of the request that enqueued it), psycopg
(SQL) and httpx (each provider HTTP call). The run path adds a ``run`` span around a turn, a
``model.request`` span around each model response, a ``tool.call`` span around each tool
call and, for a remote agent (``agent_runs``), an ``agent.run`` span around each advance of
its run (``usage/meter.py``, ``agents/agent_runs/backend.py``), so one trace runs from the HTTP request through the worker to
every provider and tool call. In embedded mode the executor carries the request's context
into its thread.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings

logger = logging.getLogger(__name__)

_configured = False
_lock = threading.Lock()


def configure_tracing(*, endpoint: str | None = None, exporter=None) -> bool:
    """Install tracing once per process. ``exporter``: a span exporter to use instead of
    OTLP (tests). Returns whether tracing is on."""
    global _configured
    endpoint = settings.OTEL_EXPORTER_OTLP_ENDPOINT if endpoint is None else endpoint
    if not endpoint and exporter is None:
        return False
    with _lock:
        if _configured:
            return True
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
        provider = TracerProvider(resource=Resource.create({"service.name": settings.OTEL_SERVICE_NAME}))
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
        trace.set_tracer_provider(provider)
        _instrument()
        _configured = True
        logger.info("tracing on: OTLP to %s", endpoint or type(exporter).__name__)
        return True


def _instrument() -> None:
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    DjangoInstrumentor().instrument()
    CeleryInstrumentor().instrument()
    PsycopgInstrumentor().instrument(skip_dep_check=True)
    HTTPXClientInstrumentor().instrument()


def tracer():
    from opentelemetry import trace

    return trace.get_tracer("chatplatform")


def tracing_on() -> bool:
    return _configured
