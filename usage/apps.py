from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "usage"
    verbose_name = "Usage, budgets and limits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Plug into the run path (agents.metering): usage with cost, budgets, tool limits.
        from agents.metering import install_meter

        from .meter import UsageMeter

        install_meter(UsageMeter())

        from chatplatform.tracing import configure_tracing

        configure_tracing()  # a no-op unless OTEL_EXPORTER_OTLP_ENDPOINT is set

        from celery.signals import worker_ready

        worker_ready.connect(_worker_metrics, weak=False)


def _worker_metrics(**kwargs) -> None:
    """A Celery worker runs turns, so the run-path series live in its process: serve them on
    ``WORKER_METRICS_PORT`` (unset: not served) at ``WORKER_METRICS_ADDR`` (loopback)."""
    from django.conf import settings

    if settings.WORKER_METRICS_PORT:
        from .metrics import start_worker_exporter

        start_worker_exporter(port=settings.WORKER_METRICS_PORT, addr=settings.WORKER_METRICS_ADDR)
