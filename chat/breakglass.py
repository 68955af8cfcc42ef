"""Break-glass into an admin-blind chat: request, second-admin decision, time-limited grant, audit.

In a workspace with ``admin_blind`` on, an admin reads a member's chat only under an approved
:class:`~chat.models.BreakGlassRequest`:

1. :func:`request_create` — an admin of the thread's workspace asks for ONE thread, with a reason.
2. :func:`request_decide` — a SECOND admin of the same workspace approves or denies it (the
   requester may not decide their own; an admin of another workspace does not see it: 404). A
   request nobody decided within ``BREAK_GLASS_REQUEST_TTL_S`` has expired and can no longer be
   approved.
3. Approved, it is a grant: the requester, and only them, reads that thread — read-only — until
   ``access_until`` (``BREAK_GLASS_ACCESS_S`` after approval). ``chat.selectors.thread_get_for_user``
   consults :func:`grant_active` and records every read (:func:`read_record`).
4. The owner sees every approved request with its reason and reads (:func:`audit_for_owner`).

A compliance export (legal hold) is a read like any other: the JSON/Markdown export of the thread
under an approved grant, recorded as ``export:json`` / ``export:markdown``.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext as _

from chatplatform.errors import ServiceError

from .models import BreakGlassRequest, Thread
from .selectors import grant_active, granted_thread_ids, memberships_for_user, read_record

__all__ = ["grant_active", "granted_thread_ids", "read_record"]  # the grant reads live with the access check

REASON_MAX_CHARS = 2000
NOTE_MAX_CHARS = 500


def _admin_membership(*, user, workspace_id):
    return memberships_for_user(user=user, workspace_id=workspace_id, admin=True).first()


def request_state(request: BreakGlassRequest, now=None) -> str:
    """What the request is now: ``pending``, ``expired`` (pending past ``expires_at``),
    ``approved`` (access still open), ``ended`` (approved, access over), ``denied``, ``revoked``."""
    now = now or timezone.now()
    if request.status == BreakGlassRequest.Status.PENDING:
        return "expired" if request.expires_at <= now else "pending"
    if request.status == BreakGlassRequest.Status.APPROVED:
        return "approved" if request.access_until and request.access_until > now else "ended"
    return request.status


def request_create(*, user, thread_id, reason: str) -> BreakGlassRequest:
    """Ask to read ``thread_id``. ``user`` must be an admin of its workspace (anyone else: 404,
    as for any thread they may not see). Raises ServiceError 400 ``invalid`` (no reason, or one
    over 2000 chars), 409 ``not_blind`` (the workspace is not admin-blind: admins read it
    already), ``own_thread`` (it is the caller's chat), ``already_requested`` (a pending request
    or open grant of theirs for it exists)."""
    try:
        thread = Thread.objects.select_related("workspace").get(pk=thread_id, temporary=False)
    except Exception as exc:  # unknown, malformed, temporary: one answer
        raise Http404(_("No such thread.")) from exc
    if _admin_membership(user=user, workspace_id=thread.workspace_id) is None:
        raise Http404(_("No such thread."))
    reason = (reason or "").strip()
    if not reason:
        raise ServiceError("invalid", _("Give a reason: the chat's owner and the approving admin will see it."))
    if len(reason) > REASON_MAX_CHARS:
        raise ServiceError("invalid", _("The reason is too long (at most 2000 characters)."))
    if thread.owner_id == user.pk:
        raise ServiceError("own_thread", _("This is your own chat."), 409)
    if not thread.workspace.admin_blind:
        raise ServiceError("not_blind", _("This workspace is not admin-blind: its admins can already read this chat."),
                           409)
    now = timezone.now()
    with transaction.atomic():
        open_ = (BreakGlassRequest.objects.select_for_update()
                 .filter(requested_by_id=user.pk, thread=thread)
                 .filter(Q(status=BreakGlassRequest.Status.PENDING, expires_at__gt=now)
                         | Q(status=BreakGlassRequest.Status.APPROVED, access_until__gt=now)))
        if open_.exists():
            raise ServiceError("already_requested", _("You already have an open request for this chat."), 409)
        return BreakGlassRequest.objects.create(
            workspace=thread.workspace, thread=thread, thread_ref=thread.pk, thread_owner_id=thread.owner_id,
            requested_by=user, reason=reason,
            expires_at=now + timedelta(seconds=settings.BREAK_GLASS_REQUEST_TTL_S),
        )


def requests_for_user(*, user) -> QuerySet[BreakGlassRequest]:
    """The requests ``user`` may see: every request of a workspace they are an admin of, and
    their own. Newest first."""
    admin_of = memberships_for_user(user=user, admin=True).values("workspace_id")
    return (BreakGlassRequest.objects.filter(Q(workspace_id__in=admin_of) | Q(requested_by_id=user.pk))
            .select_related("workspace", "thread", "thread_owner", "requested_by", "decided_by")
            .order_by("-created_at"))


def request_get_for_user(*, user, request_id) -> BreakGlassRequest:
    """One request of :func:`requests_for_user`; Http404 for anything else (another workspace's,
    unknown, malformed)."""
    try:
        return requests_for_user(user=user).get(pk=request_id)
    except Exception as exc:
        raise Http404(_("No such break-glass request.")) from exc


def request_decide(*, request: BreakGlassRequest, user, approve: bool, note: str = "") -> BreakGlassRequest:
    """Approve or deny ``request`` (from :func:`request_get_for_user`) as ``user``. The decider
    must be an admin of the request's workspace NOW (else 404) and not its requester (403
    ``own_request``). Raises 409 ``expired`` past ``expires_at``, ``not_pending`` once decided.
    Approving opens access for ``BREAK_GLASS_ACCESS_S`` from now."""
    if _admin_membership(user=user, workspace_id=request.workspace_id) is None:
        raise Http404(_("No such break-glass request."))
    if request.requested_by_id == user.pk:
        raise ServiceError("own_request", _("A second admin must decide: you cannot approve or deny your own request."),
                           403)
    if len(note or "") > NOTE_MAX_CHARS:
        raise ServiceError("invalid", _("The note is too long (at most 500 characters)."))
    with transaction.atomic():
        row = BreakGlassRequest.objects.select_for_update().get(pk=request.pk)
        now = timezone.now()
        if row.status != BreakGlassRequest.Status.PENDING:
            raise ServiceError("not_pending", _("This request was already decided."), 409)
        if row.expires_at <= now:
            raise ServiceError("expired", _("This request expired before anyone decided it; the admin may ask again."),
                               409)
        if row.thread_id is None:
            raise ServiceError("not_pending", _("The chat was deleted."), 409)
        row.status = BreakGlassRequest.Status.APPROVED if approve else BreakGlassRequest.Status.DENIED
        row.decided_by = user
        row.decided_at = now
        row.decision_note = (note or "").strip()
        if approve:
            row.access_until = now + timedelta(seconds=settings.BREAK_GLASS_ACCESS_S)
        row.save()
    return row


def request_revoke(*, request: BreakGlassRequest, user) -> BreakGlassRequest:
    """End an approved grant early (any admin of the workspace, the requester included: giving
    access back is always allowed). 409 ``not_pending`` unless it is approved and open."""
    if _admin_membership(user=user, workspace_id=request.workspace_id) is None:
        raise Http404(_("No such break-glass request."))
    with transaction.atomic():
        row = BreakGlassRequest.objects.select_for_update().get(pk=request.pk)
        if request_state(row) != "approved":
            raise ServiceError("not_pending", _("This grant is not open."), 409)
        row.status = BreakGlassRequest.Status.REVOKED
        row.access_until = timezone.now()
        row.save(update_fields=["status", "access_until"])
    return row


def audit_for_owner(*, thread: Thread) -> list[BreakGlassRequest]:
    """``thread``'s approved (or since revoked) requests, newest first, reads prefetched: what
    its owner is shown. Pending and denied requests are not — nobody read anything."""
    return list(BreakGlassRequest.objects
                .filter(thread=thread, status__in=[BreakGlassRequest.Status.APPROVED, BreakGlassRequest.Status.REVOKED])
                .select_related("requested_by", "decided_by").prefetch_related("reads__user")
                .order_by("-decided_at"))
