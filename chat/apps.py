from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat"

    def ready(self) -> None:
        # Membership removals, deactivations, token deletions and logouts reach open sockets.
        from . import language
        from .access import connect_signals

        connect_signals()
        # The language preference is copied into the session at sign-in (chat.language).
        language.connect_signals()
