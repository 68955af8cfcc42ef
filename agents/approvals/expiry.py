"""The reaper's side of approvals: a parked call past its ``expires_at`` is denied
``expired`` and its run handed back to the caller's ``requeue`` (the reaper's
``enqueue_run``) — this layer knows no executor."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from agents.events import RunEmitter
from agents.models import Run, ToolCall
from agents.runs import lifecycle

from .requests import decision_record, inbox_notify


def approval_expire(*, ledger: ToolCall, requeue: Callable[[str], object]) -> bool:
    """A parked call past its ``expires_at``: denied with decision ``expired`` (the model gets
    an "expired" error result), the run re-queued so it goes on, ``approval.resolved``
    (decision ``expired``) published and the inbox told. False when it was decided (or
    expired) meanwhile. ``requeue(run_id)`` is called after commit when the run goes on."""
    run = Run.objects.select_related("thread", "user").get(pk=ledger.run_id)
    waited = int((ledger.expires_at - ledger.requested_at).total_seconds()) if ledger.requested_at else 0
    summary = (f"Not executed: the approval request expired after {waited} s without a decision "
               f"({(ledger.approval or {}).get('rule', 'approval')}). Nothing was changed.")
    with transaction.atomic():
        if not lifecycle.tool_call_expire_request(ledger=ledger, summary=summary):
            return False
        decision_record(ledger, run, user=None, decision="expired", role="", as_requester=False, so_far=ledger.approvals_so_far)
        requeued = lifecycle.run_requeue_decided(run_id=run.pk)

        def publish() -> None:
            emitter = RunEmitter.for_run(Run.objects.get(pk=run.pk))
            emitter.emit("approval.resolved", tool_call_id=str(ledger.pk), decision="expired", decided_by=None)
            emitter.close()
            inbox_notify(ledger=ledger, run=run, state="closed")
            if requeued:
                requeue(run.pk)

        transaction.on_commit(publish)
    return True


def approvals_expire_due(*, requeue: Callable[[str], object]) -> list[str]:
    """Expire every parked call whose ``expires_at`` has passed (the reaper calls this each
    pass). Returns the ledger ids expired."""
    due = ToolCall.objects.filter(status=ToolCall.Status.AWAITING_APPROVAL, expires_at__lte=timezone.now())
    return [str(row.pk) for row in due if approval_expire(ledger=row, requeue=requeue)]


def approvals_earliest_expiry() -> datetime | None:
    """The earliest ``expires_at`` of a call awaiting approval (None: none expires), so the
    reaper passes when it comes. One aggregate query on the ``(status, expires_at)`` index."""
    return ToolCall.objects.filter(status=ToolCall.Status.AWAITING_APPROVAL, expires_at__isnull=False).aggregate(
        first=Min("expires_at"))["first"]
