"""Reads for share links: who may manage a link, and what a viewer may see of one.

Opening a link (:func:`share_open`) decides everything at use time, never only when the link
was made: the link's state (revoked, expired), the workspace's setting (public links allowed),
the owner's access to the thread (still a member, the thread still there) and the viewer's
(a workspace link: a member of the thread's workspace). The answers, in this order:

* unknown token → :class:`ShareNotFound` (404);
* a workspace link to someone signed out → :class:`ShareSignIn` (404, the page offers to sign
  in), to someone signed in who is not a member of the workspace → :class:`ShareNotFound`
  (404: an outsider learns nothing, not even that the link was revoked);
* revoked, expired, a public link of a workspace that no longer allows them, a thread its
  owner may no longer see (left the workspace, deactivated) or a temporary one →
  :class:`ShareGone` (410).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from chat.models import Message
from chat.rendering import render_markdown
from chat.selectors import (
    attachments_for_messages,
    membership_get,
    message_branch_for_thread,
    thread_get_for_user,
)
from knowledge.selectors import knowledge_item_list_for_user

from .models import ShareLink, WorkspaceSharing


class ShareNotFound(Exception):
    """No link the viewer may know of (404)."""


class ShareSignIn(ShareNotFound):
    """A workspace link opened signed out: 404, with a way to sign in and come back."""


class ShareGone(Exception):
    """The link existed and the viewer may know of it, but it no longer shows anything (410)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason  # revoked | expired | public_disabled | unavailable


def public_links_allowed(*, workspace_id) -> bool:
    """Whether ``workspace_id``'s members may make (and open) public links: its
    :class:`WorkspaceSharing` row says so; no row: off."""
    return WorkspaceSharing.objects.filter(workspace_id=workspace_id, public_links=True).exists()


def may_change_sharing(*, user, workspace_id) -> bool:
    """Whether ``user`` may change ``workspace_id``'s sharing setting: an admin of it, or staff
    who belong to it."""
    membership = membership_get(user=user, workspace_id=workspace_id)
    return membership is not None and (membership.role.is_admin or user.is_staff)


def shares_for_thread(*, thread) -> QuerySet[ShareLink]:
    """``thread``'s links that are not revoked (expired ones included), newest first."""
    return (ShareLink.objects.filter(thread=thread, revoked_at__isnull=True)
            .select_related("created_by").order_by("-created_at"))


def share_may_manage(*, share: ShareLink, user) -> bool:
    """Whether ``user`` may read a link's details and revoke it: the person who made it while
    still a member of the thread's workspace, or an admin of that workspace."""
    if not getattr(user, "is_authenticated", False):
        return False
    membership = membership_get(user=user, workspace_id=share.thread.workspace_id)
    if membership is None:
        return False
    return share.created_by_id == user.pk or membership.role.is_admin


def share_get_for_user(*, user, share_id) -> ShareLink:
    """A link ``user`` may manage (:func:`share_may_manage`), not revoked. Http404 for anything
    else — another person's link, another workspace's, a revoked one, a malformed id."""
    try:
        share = ShareLink.objects.select_related("thread", "created_by").get(pk=share_id, revoked_at__isnull=True)
    except Exception as exc:  # DoesNotExist, a malformed UUID (ValidationError)
        raise Http404("No such share link.") from exc
    if not share_may_manage(share=share, user=user):
        raise Http404("No such share link.")
    return share


def share_open(*, token: str, viewer) -> ShareLink:
    """The link ``token`` names, if ``viewer`` (a user, possibly anonymous) may see it now.
    Raises :class:`ShareNotFound`, :class:`ShareSignIn` or :class:`ShareGone` (module doc)."""
    share = (ShareLink.objects.select_related("thread__workspace", "created_by", "leaf")
             .filter(token=str(token)[:64]).first())
    if share is None:
        raise ShareNotFound()
    thread = share.thread
    if share.visibility == ShareLink.Visibility.WORKSPACE:
        if not getattr(viewer, "is_authenticated", False):
            raise ShareSignIn()
        if membership_get(user=viewer, workspace_id=thread.workspace_id) is None:
            raise ShareNotFound()
    if share.revoked_at is not None:
        raise ShareGone("revoked")
    if share.is_expired():
        raise ShareGone("expired")
    if share.visibility == ShareLink.Visibility.PUBLIC and not public_links_allowed(workspace_id=thread.workspace_id):
        raise ShareGone("public_disabled")
    owner = share.created_by
    try:
        if not owner.is_active or thread.temporary:
            raise Http404
        thread_get_for_user(user=owner, thread_id=thread.pk)
    except Http404 as exc:
        raise ShareGone("unavailable") from exc
    return share


# --- what the page shows ----------------------------------------------------------------------
@dataclass
class Turn:
    """One block of the shared conversation. ``role`` "user": ``text`` (plain, as typed) and
    ``files`` (names only). ``role`` "assistant": consecutive assistant messages of one answer
    (its tool rounds) as ``html`` parts (``chat.rendering``: markdown-it-py + nh3, the chat's
    rendering), ``tools`` (names of the tools it used — never their arguments or results),
    ``sources`` (``[(title, [n, …], item_id)]``: cited items the viewer may see),
    ``more_sources`` (other retrieved items the viewer may see), ``hidden_sources`` (cited
    items the viewer may not see: counted, never named), ``incomplete`` (stopped, failed or
    cut short)."""

    role: str
    text: str = ""
    files: list[str] = field(default_factory=list)
    html: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    sources: list[tuple] = field(default_factory=list)
    more_sources: int = 0
    hidden_sources: int = 0
    incomplete: bool = False
    model: str = ""


def snapshot_branch(*, share: ShareLink) -> list[Message]:
    """The shared branch, root first: the link's ``leaf`` and its ancestors (never a message
    added, edited or regenerated after the link was made)."""
    return message_branch_for_thread(thread_id=share.thread_id, leaf_id=share.leaf_id)


def visible_item_ids(*, viewer, workspace_id, item_ids) -> set[str]:
    """Of ``item_ids`` (knowledge items cited in the thread's workspace), those ``viewer`` may
    open: a member of the workspace, the item not another member's private one (hidden items
    are reachable by id, as on the Knowledge pages). Signed out: none."""
    ids = {str(i) for i in item_ids if i and _is_uuid(i)}
    if not ids or not getattr(viewer, "is_authenticated", False):
        return set()
    if membership_get(user=viewer, workspace_id=workspace_id) is None:
        return set()
    rows = knowledge_item_list_for_user(user=viewer, include_hidden=True).filter(
        workspace_id=workspace_id, pk__in=list(ids)).values_list("pk", flat=True)
    return {str(pk) for pk in rows}


def _is_uuid(value) -> bool:
    """A citation's ``item_id`` is a knowledge item's UUID; anything else (a stored citation
    edited by hand, an older shape) names nothing the viewer may see — and must not reach a
    UUID lookup, which would raise."""
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def citations_for_viewer(citations: list[dict], visible: set[str]) -> list[dict]:
    """The citation entries of items the viewer may see, without the passage text (the item
    page shows it to those who may read it)."""
    keep = ("n", "item_id", "title")
    return [{k: c.get(k) for k in keep} for c in citations or [] if str(c.get("item_id")) in visible]


def share_turns(*, share: ShareLink, viewer) -> list[Turn]:
    """What the share page shows ``viewer``: the snapshot branch as :class:`Turn` blocks. Tool
    messages, tool-call arguments, reasoning and usage are never part of it; citations only
    of knowledge items the viewer may see."""
    branch = snapshot_branch(share=share)
    cited_items = {c.get("item_id") for m in branch for c in (m.citations or [])}
    visible = visible_item_ids(viewer=viewer, workspace_id=share.thread.workspace_id, item_ids=cited_items)
    files = attachments_for_messages(m.pk for m in branch if m.role == Message.Role.USER)
    turns: list[Turn] = []
    for m in branch:
        if m.role == Message.Role.USER:
            turns.append(Turn(role="user", text=m.content, files=[a.filename for a in files.get(m.pk, [])]))
            continue
        if m.role != Message.Role.ASSISTANT:
            continue  # tool results (raw data) and system notes are never shown
        if not turns or turns[-1].role != "assistant":
            turns.append(Turn(role="assistant"))
        turn = turns[-1]
        turn.model = m.model or turn.model
        if m.content.strip():
            turn.html.append(render_markdown(m.content))
        turn.tools += [c.get("name", "") for c in m.tool_calls or [] if c.get("name") not in turn.tools]
        turn.incomplete = m.status in (Message.Status.TRUNCATED, Message.Status.ERROR, Message.Status.CANCELLED)
        if m.citations:
            cited, more = _cited(citations_for_viewer(m.citations, visible), m.content)
            turn.sources += cited
            turn.more_sources += more
            turn.hidden_sources += max(0, len(_cited(m.citations, m.content)[0]) - len(cited))
    return turns


_CITE = re.compile(r"\[(\d{1,3})\]")


def _cited(citations: list[dict], text: str) -> tuple[list[tuple], int]:
    """As ``chat.export.cited_sources`` (what the chat page draws under an answer), with each
    item's id: ``([(title, [n, …], item_id)], number of other retrieved items)``."""
    numbers = set(_CITE.findall(text or ""))
    cited: dict = {}
    for c in citations or []:
        if str(c.get("n")) in numbers:
            cited.setdefault(c.get("item_id"), (c.get("title") or "untitled", [], c.get("item_id")))[1].append(c.get("n"))
    return list(cited.values()), len({c.get("item_id") for c in citations or []} - set(cited))


def share_is_active(share: ShareLink, now=None) -> bool:
    """Not revoked and not expired (the workspace setting and access are checked on open)."""
    return share.revoked_at is None and not share.is_expired(now or timezone.now())
