from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AssistantsConfig(AppConfig):
    name = "assistants"
    verbose_name = _("Workspace assistants")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # agents never imports this app: the assistants are handed to its presets plug-in point.
        from agents.presets import register_presets

        from .presets import AssistantPresets

        register_presets(AssistantPresets())
