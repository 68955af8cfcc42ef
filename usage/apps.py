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
