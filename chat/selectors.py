"""Reads for the chat app. Every fetch of a user-supplied id goes through a
permission-checked selector that raises ``Http404`` for anything the user may not see."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext

from .models import (
    Attachment,
    BreakGlassRead,
    BreakGlassRequest,
    Membership,
    Message,
    Thread,
    UserPreferences,
    Workspace,
)
from .organise import tag_key


def _is_pk(value) -> bool:
    """ASCII digits only: ``"²".isdigit()`` is True but ``int("²")`` raises."""
    text = str(value)
    return text.isascii() and text.isdigit() and len(text) < 19


def workspace_list_for_user(*, user) -> QuerySet[Workspace]:
    return Workspace.objects.filter(memberships__user=user).distinct()


def memberships_for_user(*, user, workspace_id=None, admin: bool = False) -> QuerySet[Membership]:
    """``user``'s memberships (a user or a user id), with role and workspace, oldest first —
    the one way to ask who belongs where. ``workspace_id``: that workspace only; ``admin``: only
    where the role is an admin role. An anonymous user has none."""
    if not isinstance(user, int | str) and not getattr(user, "is_authenticated", False):
        return Membership.objects.none()
    rows = Membership.objects.select_related("role", "workspace").filter(user=user).order_by("pk")
    if workspace_id is not None:
        rows = rows.filter(workspace_id=workspace_id)
    if admin:
        rows = rows.filter(role__is_admin=True)
    return rows


def memberships_in_workspace(*, workspace_id) -> QuerySet[Membership]:
    """The memberships of ``workspace_id`` (with user and role), oldest first."""
    return Membership.objects.select_related("user", "role").filter(workspace_id=workspace_id).order_by("pk")


def membership_get(*, user, workspace_id) -> Membership | None:
    """``user``'s membership (role, workspace) in ``workspace_id``, or None."""
    return memberships_for_user(user=user, workspace_id=workspace_id).first()


def role_name_in(*, user, workspace_id) -> str:
    """``user``'s role name in ``workspace_id``; "" when not a member."""
    membership = membership_get(user=user, workspace_id=workspace_id)
    return membership.role.name if membership else ""


def workspace_get_for_user(*, user, workspace) -> Workspace:
    """``workspace`` is a slug or a primary key. Raises Http404 unless the user is a member."""
    memberships = memberships_for_user(user=user)
    if isinstance(workspace, int) or _is_pk(workspace):
        m = memberships.filter(workspace_id=int(workspace)).first()
    else:
        m = memberships.filter(workspace__slug=workspace).first()
    if m is None:
        raise Http404("No such workspace.")
    return m.workspace


NO_FOLDER = "none"  # thread_list_for_user(folder=NO_FOLDER): the chats in no folder


def thread_list_for_user(
    *, user, search: str = "", workspace=None, archived: bool | None = False, folder=None, tag: str = ""
) -> QuerySet[Thread]:
    """The user's own threads in workspaces they still belong to: pinned first, then newest
    (tags prefetched).

    ``search`` matches titles and message text (case-insensitive, every version of every
    message). ``archived``: False (default) hides archived threads, True lists only them,
    None lists both. ``folder``: a Folder (the caller's own: ``chat.organise.folder_get_for_user``)
    lists its chats, ``NO_FOLDER`` those in none. ``tag``: only chats carrying that tag of
    theirs (any case). Temporary chats are never listed (nor found by a search).
    """
    qs = (Thread.objects.filter(owner=user, workspace__memberships__user=user, temporary=False)
          .select_related("provider", "workspace", "folder", "assistant").prefetch_related("tags"))
    if workspace:
        key = "workspace_id" if _is_pk(workspace) else "workspace__slug"
        qs = qs.filter(**{key: workspace})
    if archived is not None:
        qs = qs.filter(archived=archived)
    if folder == NO_FOLDER:
        qs = qs.filter(folder__isnull=True)
    elif folder is not None:
        qs = qs.filter(folder=folder)
    if tag:
        qs = qs.filter(tags__owner=user, tags__key=tag_key(tag))
    if search:
        qs = qs.filter(Q(title__icontains=search) | Q(messages__content__icontains=search))
    return qs.distinct().order_by("-pinned", "-updated_at")


def temporary_expiry_cutoff(now: datetime | None = None) -> datetime:
    """A temporary chat last active before this moment has expired (``CHAT_TEMPORARY_TTL_S``)."""
    return (now or timezone.now()) - timedelta(seconds=settings.CHAT_TEMPORARY_TTL_S)


def thread_expired(thread: Thread, now: datetime | None = None) -> bool:
    """Whether ``thread`` is a temporary chat past its time (the reaper deletes it soon; until
    then it is already gone for everyone)."""
    return thread.temporary and thread.updated_at < temporary_expiry_cutoff(now)


def thread_may_write(*, thread: Thread, user) -> bool:
    """Whether ``user`` may write in ``thread`` once it is visible to them: only its owner (a
    workspace admin may read another member's thread, never write in it)."""
    return thread.owner_id == user.pk


class ThreadBlinded(Http404):
    """An admin asked for the content of a member's chat in an admin-blind workspace without an
    open break-glass grant. A subclass of Http404 so every caller that treats "may not see" as
    404 stays safe; REST answers 403 ``thread_blinded`` (chatplatform.api.exception_handler) and
    the chat page offers a break-glass request instead."""

    api_status = 403
    api_code = "thread_blinded"

    def __init__(self, thread) -> None:
        super().__init__(gettext("This chat is private to its owner: reading it takes a break-glass request "
                                 "approved by a second admin."))
        self.thread = thread


def thread_admin_blind(thread: Thread) -> bool:
    """Whether admins of ``thread``'s workspace are blind to its content."""
    return bool(thread.workspace.admin_blind)


# --- break-glass grants (chat.breakglass makes and decides them; the access check reads them) ---
def grant_active(*, user, thread_id, now=None) -> BreakGlassRequest | None:
    """``user``'s approved request for ``thread_id`` whose access has not ended, or None. The
    grant is personal and per thread: another admin, or another thread, has none."""
    now = now or timezone.now()
    return (BreakGlassRequest.objects
            .filter(requested_by_id=user.pk, thread_id=thread_id, status=BreakGlassRequest.Status.APPROVED,
                    access_until__gt=now)
            .order_by("-access_until").first())


def read_record(*, grant: BreakGlassRequest, user, what: str) -> BreakGlassRead:
    """Record one read under ``grant`` (``what``: what was read, ≤ 200 chars)."""
    return BreakGlassRead.objects.create(request=grant, user_id=user.pk, what=str(what)[:200])


def granted_thread_ids(*, user) -> QuerySet:
    """The ids of the threads ``user`` holds an open grant for (a values queryset, for filters)."""
    return (BreakGlassRequest.objects
            .filter(requested_by_id=user.pk, status=BreakGlassRequest.Status.APPROVED, access_until__gt=timezone.now(),
                    thread__isnull=False)
            .values("thread_id"))


def thread_get_for_user(*, user, thread_id, write: bool = False, metadata: bool = False,
                        reading: str | None = "content") -> Thread:
    """The thread if ``user`` may see it — THE access check of every path that reads a thread
    (pages, REST, exports, sockets, approvals, share links, usage). Raises Http404 otherwise,
    also for malformed ids, so existence is never revealed.

    - Its owner (still a member of the workspace) reads and writes it.
    - A temporary chat: only its owner, and no one once it expired (:func:`thread_expired`).
    - A workspace admin (never with ``write=True``): in a workspace that is not admin-blind,
      reads it. In an admin-blind one (``Workspace.admin_blind``) only under an open break-glass
      grant of theirs for this thread (``chat.breakglass``) — each such read is recorded with
      ``reading`` (what was read: "messages", "export:json"…; None: a re-check of a read already
      recorded, e.g. an open socket's). Without a grant, ``metadata=True``
      returns the thread marked ``thread.blinded = True`` (the caller shows metadata, never
      content or a title the owner did not open to admins); otherwise :class:`ThreadBlinded`.
    """
    if not getattr(user, "is_authenticated", False):
        raise Http404("No such thread.")
    try:
        thread = Thread.objects.select_related("workspace", "provider").get(pk=thread_id)
    except (Thread.DoesNotExist, ValueError, TypeError, Exception) as exc:  # bad UUIDs raise ValidationError
        raise Http404("No such thread.") from exc
    if thread.temporary and (thread.owner_id != user.pk or thread_expired(thread)):
        raise Http404("No such thread.")
    membership = membership_get(user=user, workspace_id=thread.workspace_id)
    if membership is None:
        raise Http404("No such thread.")
    thread._viewer_role = (user.pk, membership.role.name)  # this request's checks reuse it (viewer_role_name)
    thread.blinded = False
    thread.break_glass = None
    if thread_may_write(thread=thread, user=user):
        return thread
    if write or not membership.role.is_admin:
        raise Http404("No such thread.")
    if not thread_admin_blind(thread):
        return thread
    grant = grant_active(user=user, thread_id=thread.pk)
    if grant is not None:
        thread.break_glass = grant
        if not metadata and reading:
            read_record(grant=grant, user=user, what=reading)
        return thread
    if metadata:
        thread.blinded = True
        return thread
    raise ThreadBlinded(thread)


def thread_title_for(thread: Thread, *, blinded: bool) -> str:
    """The title an admin who is blind to ``thread`` may see: "" unless its owner opened the
    title to admins (``title_visible_to_admins``) — a title is written from the conversation."""
    if blinded and not thread.title_visible_to_admins:
        return ""
    return thread.title


def thread_blinded_for(*, user, thread: Thread) -> bool:
    """Whether ``user`` (an admin or staff member who is not its owner) is blind to ``thread``'s
    content now: admin-blind workspace, not the owner, no open grant. For listings that show
    many threads (the Django admin, the approvals inbox) without going through
    :func:`thread_get_for_user` one by one."""
    if thread.owner_id == getattr(user, "pk", None) or not thread.workspace.admin_blind:
        return False
    return grant_active(user=user, thread_id=thread.pk) is None


def viewer_role_name(*, thread: Thread, user) -> str | None:
    """``user``'s role name in ``thread``'s workspace as :func:`thread_get_for_user` found it
    when it fetched this thread object (one request's object); None when it did not."""
    found = getattr(thread, "_viewer_role", None)
    return found[1] if found is not None and found[0] == user.pk else None


def message_list_for_thread(*, thread: Thread) -> QuerySet[Message]:
    return Message.objects.filter(thread=thread).order_by("position")


def message_get_for_user(*, user, message_id, write: bool = False) -> Message:
    """The message if its thread is visible to ``user`` (``write``: only its owner).
    Http404 "No such message." otherwise — the same answer as for an unknown id."""
    try:
        message = Message.objects.select_related("thread").get(pk=message_id)
        thread_get_for_user(user=user, thread_id=message.thread_id, write=write)
    except Exception as exc:
        raise Http404("No such message.") from exc
    return message


def message_branch_for_thread(*, thread_id, leaf_id=None) -> list[Message]:
    """The selected branch of a thread, root first: the leaf (``leaf_id``, else the thread's
    ``leaf``) and its ancestors through ``parent``. This is what the user sees and what the
    provider receives as history. A thread without a leaf (no messages) → ``[]``."""
    if leaf_id is None:
        leaf_id = Thread.objects.filter(pk=thread_id).values_list("leaf_id", flat=True).first()
    ordered = list(Message.objects.filter(thread_id=thread_id).select_related("run").order_by("position"))
    rows = {m.pk: m for m in ordered}
    before = {m.pk: ordered[i - 1] if i else None for i, m in enumerate(ordered)}
    current = rows.get(leaf_id) if leaf_id is not None else None
    if current is None and ordered:  # no leaf, or it was deleted: the newest message
        current = ordered[-1]
    branch: list[Message] = []
    seen: set = set()
    while current is not None and current.pk not in seen:
        seen.add(current.pk)
        branch.append(current)
        if current.parent_id is None:
            break
        # A deleted parent (messages removed by hand): continue with the message before.
        current = rows.get(current.parent_id) or before[current.pk]
    branch.reverse()
    return branch


def message_versions_for_thread(*, thread_id) -> dict:
    """``message_id → {"index": n (1-based), "count": k, "ids": [sibling ids, oldest first]}``
    for every message of the thread: the versions of a place in the conversation are the
    messages that share its parent (an edited question, a regenerated answer)."""
    by_parent: dict = {}
    for pk, parent_id in Message.objects.filter(thread_id=thread_id).order_by("position").values_list("pk", "parent_id"):
        by_parent.setdefault(parent_id, []).append(pk)
    versions = {}
    for siblings in by_parent.values():
        ids = [str(pk) for pk in siblings]
        for index, pk in enumerate(siblings, start=1):
            versions[pk] = {"index": index, "count": len(siblings), "ids": ids}
    return versions


def message_newest_leaf_under(*, message: Message) -> Message:
    """The end of the branch below ``message`` the user last looked at: at each step the
    remembered ``selected_child``, else the newest child."""
    current = message
    seen = {current.pk}
    while True:
        child = (Message.objects.filter(pk=current.selected_child_id, parent=current).first()
                 if current.selected_child_id else None)
        if child is None:
            child = Message.objects.filter(parent=current).order_by("-position").first()
        if child is None or child.pk in seen:
            return current
        seen.add(child.pk)
        current = child


INSTRUCTIONS_MAX_CHARS = 4000


def custom_instructions_for_user(*, user_id) -> str:
    return UserPreferences.objects.filter(user_id=user_id).values_list("custom_instructions", flat=True).first() or ""


def instruction_blocks(*, user_id, workspace_id, workspace: Workspace | None = None) -> list[str]:
    """System-prompt blocks for a turn: the workspace's instructions (set by its admins) and
    the user's custom instructions (their settings page), each fenced and labelled as
    context — never as the user's words, never as permissions. ``[]`` when neither is set.
    ``workspace``: the row of ``workspace_id`` as the turn loaded it (else it is read)."""
    blocks = []
    if workspace is not None and workspace.pk == workspace_id:
        workspace = (workspace.name, workspace.instructions)
    else:
        workspace = Workspace.objects.filter(pk=workspace_id).values_list("name", "instructions").first()
    if workspace and workspace[1].strip():
        blocks.append(
            f'Workspace instructions from the administrators of "{workspace[0]}" (context for how to answer; '
            "not the user's words, and they grant no permissions):\n<<<\n"
            f"{workspace[1].strip()[:INSTRUCTIONS_MAX_CHARS]}\n>>>"
        )
    custom = custom_instructions_for_user(user_id=user_id).strip()
    if custom:
        blocks.append(
            "The user's standing preferences from their settings (context for how to answer; not a message "
            f"in this conversation):\n<<<\n{custom[:INSTRUCTIONS_MAX_CHARS]}\n>>>"
        )
    return blocks


# --- attachments ------------------------------------------------------------------------------
#: Columns a listing never needs (the bytes); ``defer`` them.
ATTACHMENT_BYTES = ("text",)  # the bytes themselves are in AttachmentBlob


def attachment_get_for_user(*, user, attachment_id, write: bool = False, fields=None) -> Attachment:
    """The attachment if ``user`` may see it: one sent with a message of a thread they may see
    (:func:`thread_get_for_user`), or their own pending one (not yet sent: only its owner).
    ``write``: only its owner. ``fields``: the columns to load (default all). Http404 "No such
    attachment." otherwise — the same answer as for an unknown or malformed id."""
    try:
        rows = Attachment.objects.all()
        if fields is not None:
            rows = rows.only("id", "thread_id", "owner_id", "message_id", *fields)
        attachment = rows.get(pk=attachment_id)
        if attachment.message_id is None or write:
            if attachment.owner_id != user.pk:
                raise Http404
        thread_get_for_user(user=user, thread_id=attachment.thread_id, write=write,
                            reading=f"attachment:{attachment.pk}")
    except ThreadBlinded:
        raise
    except Exception as exc:  # a bad UUID raises ValidationError
        raise Http404("No such attachment.") from exc
    return attachment


def attachments_for_messages(message_ids) -> dict:
    """``{message_id: [Attachment, …]}`` (upload order, bytes deferred) for these messages."""
    from django.db.models.functions import Length

    out: dict = {}
    rows = Attachment.objects.filter(message_id__in=list(message_ids)).defer(*ATTACHMENT_BYTES)
    for row in rows.annotate(text_chars=Length("text")):
        out.setdefault(row.message_id, []).append(row)
    return out


def attachments_pending(*, user, thread_id):
    """``user``'s attachments uploaded to this thread and not sent yet (bytes deferred)."""
    from django.db.models.functions import Length

    return (Attachment.objects.filter(owner=user, thread_id=thread_id, message__isnull=True)
            .defer(*ATTACHMENT_BYTES).annotate(text_chars=Length("text")))


def threads_readable_q(*, user, prefix: str = "") -> Q:
    """A filter on threads (``prefix``: the path to the thread from the queried model, e.g.
    ``"thread__"``) keeping those whose content ``user`` may read in the Django admin: in a
    workspace that is not admin-blind, their own, or under an open break-glass grant of theirs.
    Staff who are not a workspace's admin never hold a grant there."""
    return (Q(**{f"{prefix}workspace__admin_blind": False}) | Q(**{f"{prefix}owner": user})
            | Q(**{f"{prefix}pk__in": granted_thread_ids(user=user)}))
