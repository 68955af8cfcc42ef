from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PromptsConfig(AppConfig):
    name = "prompts"
    verbose_name = _("Prompt library")
    default_auto_field = "django.db.models.BigAutoField"
