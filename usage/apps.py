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

        from django.db.models.signals import post_save

        from .models import Budget

        post_save.connect(_budget_saved, sender=Budget, dispatch_uid="usage-budget-recount")


def _budget_saved(sender, instance, created: bool, raw: bool = False, **kwargs) -> None:
    """An edited budget (scope, metric, enabled) recounts its windows from the usage records."""
    if not created and not raw:
        from .services import budget_windows_recount

        budget_windows_recount(instance)


def _worker_metrics(**kwargs) -> None:
    """A Celery worker runs turns, so the run-path series live in its process: serve them on
    ``WORKER_METRICS_PORT`` (unset: not served) at ``WORKER_METRICS_ADDR`` (loopback)."""
    from django.conf import settings

    if settings.WORKER_METRICS_PORT:
        from .metrics import start_worker_exporter

        start_worker_exporter(port=settings.WORKER_METRICS_PORT, addr=settings.WORKER_METRICS_ADDR)
