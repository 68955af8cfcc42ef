"""Losing access reaches open sockets at once.

Every websocket joins its user's channel group (:func:`user_group`) besides its thread's.
When something that decides access changes — a membership removed or its role changed, the
user deactivated, a token deleted, a logout — :func:`access_changed_notify` sends
``access.changed`` to that group after the transaction commits, and each of the user's
sockets re-checks (``ws_actions.socket_still_allowed``) and closes with 4403 when it may no
longer see its thread — mid-run, not only at a run's first event. A logout names the ended
session (:func:`session_digest`): Django sends ``user_logged_out`` before it deletes the
session, so a re-check that ran first would still find it; the sockets of that session close
without one.
"""

from __future__ import annotations

import hashlib
import logging

from django.db import transaction

logger = logging.getLogger(__name__)

ACCESS_CHANGED = "access.changed"


def user_group(user_id) -> str:
    return f"user.{user_id}"


def session_digest(session_key: str | None) -> str | None:
    """A session's name in ``access.changed`` messages: its key's SHA-256, never the key."""
    return hashlib.sha256(session_key.encode()).hexdigest() if session_key else None


def access_changed_notify(user_id, *, ended_session: str | None = None) -> None:
    """Ask every open socket of ``user_id`` to re-check its access (after commit);
    ``ended_session``: the key of a session that just ended (a logout) — its sockets close."""
    if user_id is None:
        return
    message = {"type": ACCESS_CHANGED}
    if ended_session:
        message["session"] = session_digest(ended_session)

    def send() -> None:
        from channels.layers import get_channel_layer

        from chatplatform.loops import run_coroutine

        layer = get_channel_layer()
        if layer is None:
            return
        try:
            run_coroutine(layer.group_send(user_group(user_id), message), timeout=5)
        except Exception:  # a broken layer must not fail the admin's change; sockets re-check per run too
            logger.exception("could not notify user %s's sockets of an access change", user_id)

    transaction.on_commit(send)


def connect_signals() -> None:
    """Wire the model and auth signals that change access (``ChatConfig.ready``)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.signals import user_logged_out
    from django.db.models.signals import post_delete, post_save
    from rest_framework.authtoken.models import Token

    from .models import Membership

    def membership_changed(sender, instance, **kwargs) -> None:
        access_changed_notify(instance.user_id)

    def user_saved(sender, instance, created, **kwargs) -> None:
        if not created and not instance.is_active:
            access_changed_notify(instance.pk)

    def token_deleted(sender, instance, **kwargs) -> None:
        access_changed_notify(instance.user_id)

    def logged_out(sender, request, user, **kwargs) -> None:
        if user is not None:
            session = getattr(request, "session", None)
            access_changed_notify(user.pk, ended_session=getattr(session, "session_key", None))

    post_delete.connect(membership_changed, sender=Membership, weak=False, dispatch_uid="access-membership-del")
    post_save.connect(membership_changed, sender=Membership, weak=False, dispatch_uid="access-membership-save")
    post_save.connect(user_saved, sender=get_user_model(), weak=False, dispatch_uid="access-user-save")
    post_delete.connect(token_deleted, sender=Token, weak=False, dispatch_uid="access-token-del")
    user_logged_out.connect(logged_out, weak=False, dispatch_uid="access-logout")
