from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SharingConfig(AppConfig):
    name = "sharing"
    verbose_name = _("Share links")
    default_auto_field = "django.db.models.BigAutoField"
