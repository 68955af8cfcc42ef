from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat"

    def ready(self) -> None:
        # Membership removals, deactivations, token deletions and logouts reach open sockets.
        from .access import connect_signals

        connect_signals()
