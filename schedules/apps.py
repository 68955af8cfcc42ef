from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SchedulesConfig(AppConfig):
    name = "schedules"
    verbose_name = _("Scheduled runs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every Celery worker ticks the schedules beside its reaper (the claim makes a fire
        # happen once however many workers tick); the embedded web process starts its ticker
        # from config.loop_binding, beside its reaper.
        from celery.signals import worker_ready

        from .ticker import start_ticker

        worker_ready.connect(start_ticker, weak=False)
