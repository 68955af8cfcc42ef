from django.apps import AppConfig


class ApiKeysConfig(AppConfig):
    name = "apikeys"
    verbose_name = "API keys"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The plumbing library imports no app: the key kind is handed to it here.
        from chatplatform.credentials import register_key_kind

        from .services import KEY_PREFIX, api_key_still_valid, user_for_api_key
        from .signals import connect_signals

        register_key_kind(KEY_PREFIX, user_for_key=user_for_api_key, still_valid=api_key_still_valid)
        connect_signals()
