"""Use cases of policy changes: who may make them, draft → simulate → approve → apply, and
rollback to a version (DESIGN §4 "Policy simulation").

Errors (``chatplatform.errors.ServiceError``): 404 ``not_found`` (a workspace the caller is
not in, another workspace's draft), 403 ``not_allowed`` (not a workspace admin with the policy
permissions; approving one's own draft), 400 ``invalid`` (the changes; ``field`` names it),
409 ``stale`` (the live policy changed since the draft was simulated: re-simulate),
409 ``needs_approval`` (four eyes), 409 ``not_open`` (applied or discarded already),
409 ``not_simulated``.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import ToolPolicy
from agents.policy_set import policy_set_from_snapshot, policy_snapshot, snapshot_fingerprint
from chat.models import Membership, Workspace
from chatplatform.errors import ServiceError

from .drafts import changes_validate, snapshot_apply, snapshot_diff, snapshot_write
from .models import PolicyDraft, PolicySimulation, PolicyVersion, WorkspacePolicySettings
from .simulation import simulate, window

POLICY_PERMS = ("agents.change_toolpolicy", "agents.change_approvalpolicy")
DAYS_MAX = 365


def policy_admin_workspace(*, user, workspace_id) -> Workspace:
    """The workspace ``user`` may simulate and change policies for: an admin member of it (or
    a superuser) holding the policy permissions. 404 for a workspace they are not in, 403
    for a member who is not an admin or lacks the permissions."""
    try:
        workspace_id = int(workspace_id)
    except (TypeError, ValueError):
        raise ServiceError("not_found", _("No such workspace."), 404) from None
    if not 0 < workspace_id < 2**63:  # beyond a bigint: no such row (and no database overflow)
        raise ServiceError("not_found", _("No such workspace."), 404)
    membership = Membership.objects.select_related("role", "workspace").filter(
        user=user, workspace_id=workspace_id).first()
    if membership is None:
        workspace = Workspace.objects.filter(pk=workspace_id).first() if user.is_superuser else None
        if workspace is None:
            raise ServiceError("not_found", _("No such workspace."), 404)
        return workspace
    if not (membership.role.is_admin or user.is_superuser) or not user.has_perms(POLICY_PERMS):
        raise ServiceError("not_allowed", _("Only a workspace admin who may change tool policies and approval "
                                            "rules may simulate or change them."), 403)
    return membership.workspace


def _an_id(value) -> bool:
    """A plausible primary key from a URL: digits that fit a bigint."""
    text = str(value)
    return text.isdigit() and len(text) <= 18


def four_eyes_required() -> bool:
    """Policies apply platform wide: any workspace asking for four eyes asks for all."""
    return WorkspacePolicySettings.objects.filter(four_eyes=True).exists()


def draft_get_for_user(*, user, draft_id) -> PolicyDraft:
    """A draft of a workspace ``user`` is a policy admin of; 404 otherwise."""
    draft = PolicyDraft.objects.filter(pk=draft_id).select_related("workspace").first() if _an_id(draft_id) else None
    if draft is None:
        raise ServiceError("not_found", _("No such draft."), 404)
    try:
        policy_admin_workspace(user=user, workspace_id=draft.workspace_id)
    except ServiceError as exc:
        raise ServiceError("not_found", _("No such draft."), 404) from exc
    return draft


def draft_create(*, user, workspace: Workspace, changes, title: str = "", reason: str = "") -> PolicyDraft:
    """A new open draft; ``changes`` validated against the live set (400 naming the field)."""
    clean = changes_validate(changes, policy_snapshot())
    title = (title or "").strip()[:200] or _("Policy draft of %(when)s") % {
        "when": timezone.now().strftime("%Y-%m-%d %H:%M")}
    return PolicyDraft.objects.create(workspace=workspace, title=title, reason=(reason or "")[:2000], changes=clean,
                                      created_by=user)


def simulation_run(*, user, draft: PolicyDraft, days: int) -> PolicySimulation:
    """Replay the draft's workspace's last ``days`` days under the draft. Re-validates the
    changes against today's live set (a tool deleted since: 400). A new live set since an
    approval voids it (the draft is open again)."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= DAYS_MAX:
        raise ServiceError("invalid", _("days must be a whole number from 1 to %(max)s.") % {"max": DAYS_MAX}, 400,
                           field="days")
    if draft.status not in (PolicyDraft.Status.OPEN, PolicyDraft.Status.APPROVED):
        raise ServiceError("not_open", _("This draft was applied or discarded; make a new one."), 409)
    live = policy_snapshot()
    changes = changes_validate(draft.changes, live)
    since, until = window(days)
    result = simulate(workspace_id=draft.workspace_id, since=since, until=until,
                      draft=policy_set_from_snapshot(snapshot_apply(live, changes)),
                      live=policy_set_from_snapshot(live))
    fingerprint = snapshot_fingerprint(live)
    sim = PolicySimulation.objects.create(
        workspace_id=draft.workspace_id, draft=draft, requested_by=user, changes=changes, days=days, since=since,
        until=until, covered_from=result.covered_from or since, truncated=result.truncated,
        truncated_reason=result.truncated_reason, rows_scanned=result.rows_scanned,
        duration_ms=result.duration_ms, live_fingerprint=fingerprint, groups=result.groups)
    draft.last_simulation = sim
    if draft.status == PolicyDraft.Status.APPROVED and draft.simulated_fingerprint != fingerprint:
        draft.status, draft.approved_by, draft.approved_at = PolicyDraft.Status.OPEN, None, None
    draft.simulated_fingerprint = fingerprint
    draft.save(update_fields=["last_simulation", "simulated_fingerprint", "status", "approved_by", "approved_at"])
    return sim


def _fresh(draft: PolicyDraft, live: dict) -> None:
    if not draft.simulated_fingerprint:
        raise ServiceError("not_simulated", _("Simulate the draft first."), 409)
    if draft.simulated_fingerprint != snapshot_fingerprint(live):
        raise ServiceError("stale", _("The live policy changed since this draft was simulated: re-simulate it, "
                                      "then approve it again."), 409)


def draft_approve(*, user, draft: PolicyDraft) -> PolicyDraft:
    """The second admin's approval. Refused for the draft's author (403), a draft not open
    (409) or simulated against a live set that has changed since (409 ``stale``)."""
    with transaction.atomic():
        draft = PolicyDraft.objects.select_for_update().get(pk=draft.pk)
        if draft.status != PolicyDraft.Status.OPEN:
            raise ServiceError("not_open", _("Only an open draft can be approved."), 409)
        if draft.created_by_id == user.pk:
            raise ServiceError("not_allowed", _("You cannot approve your own draft: another admin must."), 403)
        _fresh(draft, policy_snapshot())
        draft.status, draft.approved_by, draft.approved_at = PolicyDraft.Status.APPROVED, user, timezone.now()
        draft.save(update_fields=["status", "approved_by", "approved_at"])
    return draft


def draft_apply(*, user, draft: PolicyDraft) -> PolicyVersion:
    """Apply the draft to the live rows and record a version (the first change also records
    the set before it as version 1, so it can be rolled back to). Four eyes: refused (409
    ``needs_approval``) until another admin approved; stale: refused (409)."""
    with transaction.atomic():
        # Every apply locks the tool policy rows first: two drafts never apply over each other.
        list(ToolPolicy.objects.select_for_update().values_list("pk", flat=True))
        draft = PolicyDraft.objects.select_for_update().get(pk=draft.pk)
        if draft.status not in (PolicyDraft.Status.OPEN, PolicyDraft.Status.APPROVED):
            raise ServiceError("not_open", _("This draft was applied or discarded already."), 409)
        if four_eyes_required() and draft.status != PolicyDraft.Status.APPROVED:
            raise ServiceError("needs_approval", _("Policy edits need four eyes: another admin must approve this "
                                                   "draft before it is applied."), 409)
        before = policy_snapshot()
        _fresh(draft, before)
        changes = changes_validate(draft.changes, before)
        snapshot_write(changes)
        after = policy_snapshot()
        latest = PolicyVersion.objects.order_by("-number").first()
        if latest is None:
            latest = PolicyVersion.objects.create(number=1, snapshot=before, fingerprint=snapshot_fingerprint(before),
                                                  reason=_("The policy before the first recorded change."))
        version = PolicyVersion.objects.create(
            number=latest.number + 1, snapshot=after, fingerprint=snapshot_fingerprint(after),
            changes=snapshot_diff(before, after), reason=draft.reason or draft.title, draft=draft,
            created_by=draft.created_by, approved_by=draft.approved_by, applied_by=user)
        draft.status, draft.applied_version = PolicyDraft.Status.APPLIED, version
        draft.save(update_fields=["status", "applied_version"])
    return version


def draft_discard(*, draft: PolicyDraft) -> None:
    """Discard an open or approved draft; applied or discarded ones stay as they are."""
    if draft.status in (PolicyDraft.Status.OPEN, PolicyDraft.Status.APPROVED):
        draft.status = PolicyDraft.Status.DISCARDED
        draft.save(update_fields=["status"])


def version_rollback(*, user, workspace: Workspace, version: PolicyVersion, days: int = 30) -> PolicyDraft:
    """A draft that restores ``version`` (tools deleted since are left out), simulated over
    ``days`` days of ``workspace``'s calls; it is approved and applied like any draft."""
    live = policy_snapshot()
    target = version.snapshot
    restore = snapshot_diff(live, {
        "tool_policies": {**live["tool_policies"],
                          **{k: v for k, v in target["tool_policies"].items() if k in live["tool_policies"]}},
        "approval_rules": {k: v for k, v in target["approval_rules"].items()
                           if not v.get("tool") or v["tool"] in live["tool_policies"]},
    })
    if not restore["tool_policies"] and not restore["approval_rules"]:
        raise ServiceError("invalid", _("The live policy is already as in version %(n)s.") % {"n": version.number},
                           400, field="version")
    draft = draft_create(user=user, workspace=workspace, changes=restore,
                         title=_("Roll back to version %(n)s") % {"n": version.number},
                         reason=_("Rollback to version %(n)s.") % {"n": version.number})
    simulation_run(user=user, draft=draft, days=days)
    return draft
