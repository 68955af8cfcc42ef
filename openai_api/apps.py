from django.apps import AppConfig


class OpenaiApiConfig(AppConfig):
    name = "openai_api"
    verbose_name = "OpenAI-compatible API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents.client_tools import register_client_tools

        from .services import client_tools_of_run

        register_client_tools(client_tools_of_run)
