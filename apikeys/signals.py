"""A key deleted outright (the admin's delete, a user's deletion) ends its open sockets and
streams like a revocation: ``access.changed`` to its owner (``chat.access``)."""

from __future__ import annotations

from chat.access import access_changed_notify


def connect_signals() -> None:
    from django.db.models.signals import post_delete

    from .models import ApiKey

    def key_deleted(sender, instance, **kwargs) -> None:
        access_changed_notify(instance.user_id)

    post_delete.connect(key_deleted, sender=ApiKey, weak=False, dispatch_uid="apikeys-key-del")
