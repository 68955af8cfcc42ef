"""Making, revoking and continuing share links (DESIGN §6 *Share links*).

A link is a snapshot by reference: it stores the thread and the last message of the branch
shown (``leaf``) when it was made. Messages are a tree that is never overwritten, so the
root → ``leaf`` path cannot change afterwards, and a link needs no copy of the conversation:
deleting the thread ends its links with it, and what a viewer may see is decided when the
link is opened (``selectors.share_open``). "Continue this chat" copies the snapshot — only
what the share page shows — into a new thread of the viewer's (:func:`share_continue`).
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Run
from agents.presets import preset_pick
from agents.selectors import default_model_for, model_allowed
from agents.temporary_chats import temporary_chats_close
from chat.models import Message, Thread
from chat.selectors import membership_get, memberships_for_user
from chatplatform.errors import ServiceError

from .models import ShareLink, WorkspaceSharing
from .selectors import (
    citations_for_viewer,
    may_change_sharing,
    public_links_allowed,
    snapshot_branch,
    visible_item_ids,
)

TOKEN_BYTES = 24  # secrets.token_urlsafe(24): 32 URL-safe characters, 192 random bits


def max_public_days() -> int:
    """``SHARE_PUBLIC_MAX_DAYS``: the longest a public link may live (days)."""
    return int(getattr(settings, "SHARE_PUBLIC_MAX_DAYS", 30))


def max_links_per_thread() -> int:
    """``SHARE_LINKS_MAX_PER_THREAD``: active (neither revoked nor expired) links of one thread."""
    return int(getattr(settings, "SHARE_LINKS_MAX_PER_THREAD", 20))


def share_create(*, thread: Thread, user, visibility: str, expires_at=None) -> ShareLink:
    """A new link to the branch ``thread`` shows now, made by its owner ``user`` (``thread``
    comes from ``thread_get_for_user(..., write=True)``).

    ``visibility``: ``"workspace"`` (members of the thread's workspace; ``expires_at``
    optional) or ``"public"`` (anyone with the link; ``expires_at`` required, at most
    ``SHARE_PUBLIC_MAX_DAYS`` ahead; only while the workspace allows public links).
    ServiceError: 400 ``temporary_chat`` (temporary chats are not kept, so not shared),
    400 ``empty_chat``, 400 ``invalid_expiry`` (missing for a public link, past, too far),
    400 ``too_many_links`` (``SHARE_LINKS_MAX_PER_THREAD`` active), 403 ``public_links_disabled``,
    409 ``run_in_progress`` (the answer being written would be cut mid-way).
    """
    if thread.owner_id != user.pk:
        raise ServiceError("not_allowed", _("Only the chat's owner can share it."), 403)
    if thread.temporary:
        raise ServiceError("temporary_chat", _("A temporary chat cannot be shared: it is not kept."), 400)
    if visibility not in ShareLink.Visibility.values:
        raise ServiceError("invalid", _("Choose who can open the link: workspace or public."), 400)
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise ServiceError("invalid_expiry", _("The expiry must be in the future."), 400)
    if visibility == ShareLink.Visibility.PUBLIC:
        if not public_links_allowed(workspace_id=thread.workspace_id):
            raise ServiceError("public_links_disabled", _("Public links are turned off for this workspace; "
                                                          "an administrator can turn them on."), 403)
        days = max_public_days()
        if expires_at is None:
            raise ServiceError("invalid_expiry", _("A public link needs an expiry."), 400)
        if expires_at > now + timedelta(days=days, minutes=5):  # a few minutes' slack for the clock of the page
            raise ServiceError("invalid_expiry", _("A public link lives at most %(days)d days.") % {"days": days}, 400)
    with transaction.atomic():
        # One creation at a time per thread, so two at once cannot pass the limit together.
        locked = Thread.objects.select_for_update().get(pk=thread.pk)
        if Run.objects.filter(thread_id=thread.pk, status__in=[
                Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.AWAITING_APPROVAL]).exists():
            raise ServiceError("run_in_progress", _("Wait for the answer to finish, then share the chat."), 409)
        leaf_id = locked.leaf_id or Message.objects.filter(thread_id=thread.pk).order_by("-position").values_list(
            "pk", flat=True).first()
        if leaf_id is None:
            raise ServiceError("empty_chat", _("There is nothing to share yet: the chat has no messages."), 400)
        limit = max_links_per_thread()
        active = ShareLink.objects.filter(thread_id=thread.pk, revoked_at__isnull=True).exclude(expires_at__lte=now)
        if active.count() >= limit:
            raise ServiceError("too_many_links", _("This chat has %(n)d active links, the most allowed; revoke one "
                                                   "to make another.") % {"n": limit}, 400)
        return ShareLink.objects.create(
            token=secrets.token_urlsafe(TOKEN_BYTES), thread_id=thread.pk, leaf_id=leaf_id,
            title=locked.title, visibility=visibility, created_by=user, expires_at=expires_at)


def share_revoke(*, share: ShareLink, by) -> ShareLink:
    """Revoke ``share`` (its maker or an admin of the workspace: ``by``; the caller checked
    that with ``share_get_for_user``): it answers 410 from now on. Revoking twice changes
    nothing."""
    ShareLink.objects.filter(pk=share.pk, revoked_at__isnull=True).update(revoked_at=timezone.now(), revoked_by=by)
    share.refresh_from_db()
    return share


def _target_workspace_id(*, share: ShareLink, viewer) -> int:
    """Where the copy goes: the link's workspace when the viewer belongs to it, else (a public
    link) the viewer's first workspace. ServiceError 403 ``no_workspace`` when they have none."""
    if membership_get(user=viewer, workspace_id=share.thread.workspace_id) is not None:
        return share.thread.workspace_id
    first = memberships_for_user(user=viewer).first()
    if first is None:
        raise ServiceError("no_workspace", _("You are not a member of any workspace to continue the chat in."), 403)
    return first.workspace_id


def share_continue(*, share: ShareLink, viewer) -> Thread:
    """Copy the snapshot ``share`` shows into a new thread of ``viewer`` (``share`` comes from
    ``share_open`` for this viewer) and return it.

    Copied: the branch's questions and answers as the share page shows them — an answer's
    tool rounds joined into one assistant message (tool calls, tool results, reasoning and
    usage are not copied: the viewer never saw them), citations only of knowledge items the
    viewer may see, and only when the copy stays in the link's workspace. Not copied:
    attachments (the viewer may not open the owner's files; the file names stay in the
    text's place as a note). The model: the chat's workspace assistant (and its model) when the
    copy stays in its workspace and the viewer may pick it, else the link's model when the
    viewer may use it there, else the viewer's default. Like any new chat, it closes the viewer's temporary chats.
    """
    source = share.thread
    workspace_id = _target_workspace_id(share=share, viewer=viewer)
    same_workspace = workspace_id == source.workspace_id
    branch = snapshot_branch(share=share)
    visible = visible_item_ids(viewer=viewer, workspace_id=source.workspace_id,
                               item_ids={c.get("item_id") for m in branch for c in (m.citations or [])}) \
        if same_workspace else set()
    role = membership_get(user=viewer, workspace_id=workspace_id).role.name
    provider, model = source.provider, source.model
    assistant_id = None
    assistant = _assistant_for_viewer(source=source, viewer=viewer, workspace_id=workspace_id)
    if assistant is not None:  # the chat's workspace assistant, which the viewer may use: its model comes with it
        provider, model, assistant_id = assistant
    elif provider is None or not provider.enabled or not model_allowed(provider=provider, model=model,
                                                                      role_names=[role]):
        provider, model, _source = default_model_for(user=viewer, workspace_id=workspace_id)
    copied: list[dict] = []
    for m in branch:
        if m.role == Message.Role.USER:
            copied.append({"role": Message.Role.USER, "content": m.content, "citations": []})
        elif m.role == Message.Role.ASSISTANT and (m.content.strip() or m.citations):
            citations = citations_for_viewer(m.citations, visible)
            if copied and copied[-1]["role"] == Message.Role.ASSISTANT:  # one answer's tool rounds: one message
                last = copied[-1]
                last["content"] = "\n\n".join(t for t in (last["content"], m.content) if t.strip())
                last["citations"] += citations
            else:
                copied.append({"role": Message.Role.ASSISTANT, "content": m.content, "citations": citations,
                               "provider": m.provider, "model": m.model})
    with transaction.atomic():
        temporary_chats_close(owner=viewer)
        thread = Thread.objects.create(
            workspace_id=workspace_id, owner=viewer, title=(share.title or source.title or "")[:200],
            provider=provider, model=model or (provider.default_model if provider else ""),
            assistant_id=assistant_id, grounded=source.grounded, prompt_tier=source.prompt_tier)
        rows = [Message(thread=thread, position=i, **fields) for i, fields in enumerate(copied, start=1)]
        Message.objects.bulk_create(rows)
        for parent, child in zip(rows, rows[1:], strict=False):
            child.parent = parent
            parent.selected_child = child
        if rows:
            Message.objects.bulk_update(rows, ["parent", "selected_child"])
            Thread.objects.filter(pk=thread.pk).update(leaf=rows[-1])
            thread.leaf = rows[-1]
    return thread


def _assistant_for_viewer(*, source: Thread, viewer, workspace_id: int):
    """``(provider, model, assistant_id)`` of ``source``'s workspace assistant when the copy
    stays in its workspace and ``viewer`` may pick it now (shared with the workspace or theirs,
    not disabled, its model enabled for their role: ``agents.presets.preset_pick``), else None —
    without it a continued assistant chat lost the assistant's instructions, tools and knowledge."""
    if source.assistant_id is None or workspace_id != source.workspace_id:
        return None
    try:
        pick = preset_pick(user=viewer, preset_id=str(source.assistant_id), workspace_id=workspace_id)
    except (Http404, ServiceError):  # not theirs to see, disabled, or its model not open to their role
        return None
    return pick.provider, pick.model, pick.preset_id


def workspace_sharing_set(*, workspace_id: int, user, public_links: bool) -> bool:
    """Turn public links of ``workspace_id`` on or off (``user``: an admin of that workspace,
    or staff who belong to it: ``selectors.may_change_sharing``). Off ends every public link of the workspace at
    once (they are checked when opened). Returns the new value. ServiceError 403
    ``not_allowed`` for anyone else."""
    if not may_change_sharing(user=user, workspace_id=workspace_id):
        raise ServiceError("not_allowed", _("Only an administrator of the workspace can change this."), 403)
    WorkspaceSharing.objects.update_or_create(workspace_id=workspace_id, defaults={"public_links": bool(public_links)})
    return bool(public_links)
