"""Django admin: the "Simulate" action on tool policies and approval rules (edit the selected
rows as a draft, without applying it, and replay the recorded calls), the result page, drafts
(approve / apply), versions (roll back) and the four-eyes workspace setting."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.admin import ApprovalPolicyAdmin, ToolPolicyAdmin
from agents.models import ApprovalPolicy, Role, ToolPolicy
from chat.models import Membership, Workspace
from chatplatform.errors import ServiceError

from .models import PolicyDraft, PolicySimulation, PolicyVersion, WorkspacePolicySettings
from .selectors import simulation_calls_page, simulation_summary
from .services import (
    DAYS_MAX,
    draft_apply,
    draft_approve,
    draft_create,
    draft_discard,
    four_eyes_required,
    policy_admin_workspace,
    simulation_run,
    version_rollback,
)
from .simulation import APPROVERS_CHANGED, NOW_APPROVAL, NOW_AUTO, NOW_REFUSED, SAME, SKIPPED

CHANGE_LABELS = {
    NOW_REFUSED: gettext_lazy("Would be refused"),
    NOW_APPROVAL: gettext_lazy("Would need approval"),
    NOW_AUTO: gettext_lazy("Would run without approval"),
    APPROVERS_CHANGED: gettext_lazy("Different approvers"),
    SAME: gettext_lazy("No change"),
    SKIPPED: gettext_lazy("Stopped before the policy decided"),
}
COLUMNS = (NOW_REFUSED, NOW_APPROVAL, NOW_AUTO, APPROVERS_CHANGED, SAME, SKIPPED)
REASONS = {
    "permission_denied": gettext_lazy("the role may not use the tool"),
    "disabled": gettext_lazy("the tool is disabled"),
    "unknown": gettext_lazy("no such tool"),
    "unavailable": gettext_lazy("the tool is unavailable"),
}


def decision_words(decision: dict) -> str:
    """A decision in plain words: "Refused: the role may not use the tool", the approval
    card's sentence, or "Runs without approval"."""
    if decision["outcome"] == "refused":
        return _("Refused: %(why)s") % {"why": REASONS.get(decision.get("reason", ""), decision.get("reason", ""))}
    if decision["outcome"] == "approval":
        return decision.get("approvers") or _("Needs approval")
    return _("Runs without approval")


def _admin_workspaces(user):
    if user.is_superuser:
        return Workspace.objects.order_by("name")
    ids = Membership.objects.filter(user=user, role__is_admin=True).values_list("workspace_id", flat=True)
    return Workspace.objects.filter(pk__in=ids).order_by("name")


class SimulateForm(forms.Form):
    workspace = forms.ModelChoiceField(queryset=Workspace.objects.none(), label=gettext_lazy("Replay the calls of"))
    days = forms.IntegerField(min_value=1, max_value=DAYS_MAX, initial=30, label=gettext_lazy("Last days"))
    title = forms.CharField(max_length=200, required=False, label=gettext_lazy("Draft title"))
    reason = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}),
                             label=gettext_lazy("Why"))

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["workspace"].queryset = _admin_workspaces(user)


class ToolPolicyDraftForm(forms.ModelForm):
    allowed_roles = forms.ModelMultipleChoiceField(queryset=Role.objects.all(), required=False,
                                                   widget=forms.CheckboxSelectMultiple,
                                                   label=gettext_lazy("Allowed roles"))

    class Meta:
        model = ToolPolicy
        fields = ["enabled", "risk", "approval_mode", "allowed_roles", "timeout_s"]


class ApprovalRuleDraftForm(forms.ModelForm):
    class Meta:
        model = ApprovalPolicy
        fields = ["enabled", "risk", "env_tier", "approver_kind", "approver_role", "approvals_needed",
                  "requester_counts", "expires_s"]


def _changes_from(forms_: list[forms.ModelForm]) -> dict:
    """The draft's changes: only the fields an admin changed on each row."""
    tools: dict = {}
    rules: dict = {}
    for form in forms_:
        changed = {}
        for name in form.changed_data:
            value = form.cleaned_data[name]
            if name == "allowed_roles":
                value = sorted(r.name for r in value)
            elif name == "approver_role":
                name, value = "role", value.name if value else ""
            changed[name] = value
        if not changed:
            continue
        if isinstance(form.instance, ToolPolicy):
            tools[form.instance.tool_name] = changed
        else:
            rules[form.instance.name] = changed
    return {"tool_policies": tools, "approval_rules": rules}


def simulate_view(request, *, model):
    """The action's page: the selected rows as editable forms (nothing is saved), the
    workspace and the window; on submit a draft is made and simulated, then the result shows."""
    ids = [i for i in request.GET.get("ids", "").split(",") if i.isdigit()]
    rows = list(model.objects.filter(pk__in=ids).order_by("pk"))
    form_class = ToolPolicyDraftForm if model is ToolPolicy else ApprovalRuleDraftForm
    data = request.POST if request.method == "POST" else None
    head = SimulateForm(data, user=request.user)
    row_forms = [form_class(data, instance=row, prefix=f"row{row.pk}") for row in rows]
    error = ""
    if data is not None and head.is_valid() and all(f.is_valid() for f in row_forms):
        changes = _changes_from(row_forms)
        if not changes["tool_policies"] and not changes["approval_rules"]:
            error = _("Change at least one field: the draft would change nothing.")
        else:
            try:
                workspace = policy_admin_workspace(user=request.user, workspace_id=head.cleaned_data["workspace"].pk)
                draft = draft_create(user=request.user, workspace=workspace, changes=changes,
                                     title=head.cleaned_data["title"], reason=head.cleaned_data["reason"])
                sim = simulation_run(user=request.user, draft=draft, days=head.cleaned_data["days"])
            except ServiceError as exc:
                error = exc.message
            else:
                return HttpResponseRedirect(reverse("admin:policies_policysimulation_result", args=[sim.pk]))
    opts = model._meta
    context = {**admin.site.each_context(request), "title": _("Simulate a policy draft"), "opts": opts,
               "head": head, "row_forms": list(zip(rows, row_forms, strict=True)), "error": error,
               "back_url": reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")}
    return TemplateResponse(request, "admin/policies/simulate.html", context)


def _simulate_action(modeladmin, request, queryset):
    ids = ",".join(str(pk) for pk in queryset.values_list("pk", flat=True))
    name = "policies_simulate_tools" if queryset.model is ToolPolicy else "policies_simulate_rules"
    return HttpResponseRedirect(f"{reverse(f'admin:{name}')}?ids={ids}")


class SimulatingToolPolicyAdmin(ToolPolicyAdmin):
    actions = ["simulate"]

    @admin.action(description=gettext_lazy("Simulate changes to the selected tool policies"))
    def simulate(self, request, queryset):
        return _simulate_action(self, request, queryset)

    def get_urls(self):
        return [path("simulate/", self.admin_site.admin_view(lambda r: simulate_view(r, model=ToolPolicy)),
                     name="policies_simulate_tools")] + super().get_urls()


class SimulatingApprovalPolicyAdmin(ApprovalPolicyAdmin):
    actions = ["simulate"]

    @admin.action(description=gettext_lazy("Simulate changes to the selected approval rules"))
    def simulate(self, request, queryset):
        return _simulate_action(self, request, queryset)

    def get_urls(self):
        return [path("simulate/", self.admin_site.admin_view(lambda r: simulate_view(r, model=ApprovalPolicy)),
                     name="policies_simulate_rules")] + super().get_urls()


admin.site.unregister(ToolPolicy)
admin.site.register(ToolPolicy, SimulatingToolPolicyAdmin)
admin.site.unregister(ApprovalPolicy)
admin.site.register(ApprovalPolicy, SimulatingApprovalPolicyAdmin)


def _table(counts: dict) -> dict:
    """``{value: {change: n}}`` → columns present and rows, for a counts table."""
    present = [c for c in COLUMNS if any(c in row for row in counts.values())]
    rows = [{"name": name, "cells": [row.get(c, 0) for c in present], "total": sum(row.values())}
            for name, row in sorted(counts.items(), key=lambda item: (-sum(item[1].values()), item[0]))]
    return {"columns": [CHANGE_LABELS[c] for c in present], "rows": rows}


@admin.register(PolicySimulation)
class PolicySimulationAdmin(admin.ModelAdmin):
    list_display = ["id", "workspace", "draft", "requested_by", "days", "rows_scanned", "truncated", "created_at"]
    list_filter = ["workspace", "truncated"]
    readonly_fields = [f.name for f in PolicySimulation._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_urls(self):
        return [path("<int:simulation_id>/result/", self.admin_site.admin_view(self.result_view),
                     name="policies_policysimulation_result")] + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        return HttpResponseRedirect(reverse("admin:policies_policysimulation_result", args=[object_id]))

    def result_view(self, request, simulation_id: int):
        sim = get_object_or_404(PolicySimulation.objects.select_related("draft", "workspace"), pk=simulation_id)
        try:
            policy_admin_workspace(user=request.user, workspace_id=sim.workspace_id)
        except ServiceError as exc:
            raise _not_found() from exc
        draft = sim.draft
        if request.method == "POST" and draft is not None:
            self._act(request, draft, sim)
            target = draft.last_simulation_id if request.POST.get("do") == "resimulate" else sim.pk
            return HttpResponseRedirect(reverse("admin:policies_policysimulation_result", args=[target]))
        counts = simulation_summary(sim)
        change = request.GET.get("change", "")
        page = request.GET.get("page", "1")
        try:
            calls = simulation_calls_page(sim=sim, change=change, page=int(page) if page.isdigit() else 1)
        except ServiceError:
            change, calls = "", simulation_calls_page(sim=sim)
        for call in calls["results"]:
            call["before"] = decision_words(call["current"])
            call["after"] = decision_words(call["simulated"])
            call["recorded_words"] = decision_words(call["recorded"])
            call["change_label"] = CHANGE_LABELS[call["change"]]
            call["url"] = reverse("admin:agents_toolcall_change", args=[call["id"]])
        by_change = [{"key": c, "label": CHANGE_LABELS[c], "count": counts["by_change"].get(c, 0)}
                     for c in COLUMNS if counts["by_change"].get(c)]
        stale = draft is not None and draft.simulated_fingerprint != sim.live_fingerprint
        context = {
            **self.admin_site.each_context(request), "title": _("Policy simulation: %(title)s") % {
                "title": draft.title if draft else sim.pk},
            "opts": self.model._meta, "sim": sim, "draft": draft, "counts": counts, "by_change": by_change,
            "tables": [(_("By tool"), _table(counts["by_tool"])), (_("By role (now)"), _table(counts["by_role"])),
                       (_("By environment"), _table(counts["by_env"]))],
            "calls": calls, "change": change, "change_label": CHANGE_LABELS.get(change, ""),
            "change_links": [(c, CHANGE_LABELS[c]) for c in (NOW_REFUSED, NOW_APPROVAL, NOW_AUTO, APPROVERS_CHANGED)
                             if counts["by_change"].get(c)],
            "changed_total": sum(counts["by_change"].get(c, 0) for c in
                                 (NOW_REFUSED, NOW_APPROVAL, NOW_AUTO, APPROVERS_CHANGED)),
            "four_eyes": four_eyes_required(), "is_author": draft is not None and draft.created_by_id == request.user.pk,
            "is_latest": draft is not None and draft.last_simulation_id == sim.pk and not stale,
            "draft_changes": _changes_rows(sim.changes),
        }
        return TemplateResponse(request, "admin/policies/result.html", context)

    def _act(self, request, draft: PolicyDraft, sim: PolicySimulation) -> None:
        action = request.POST.get("do")
        try:
            if action == "approve":
                draft_approve(user=request.user, draft=draft)
                self.message_user(request, _("Draft approved: it can be applied now."))
            elif action == "apply":
                version = draft_apply(user=request.user, draft=draft)
                self.message_user(request, _("Applied: the live policy is now version %(n)s.") % {"n": version.number})
            elif action == "discard":
                draft_discard(draft=draft)
                self.message_user(request, _("Draft discarded."))
            elif action == "resimulate":
                simulation_run(user=request.user, draft=draft, days=sim.days)
                draft.refresh_from_db()
        except ServiceError as exc:
            self.message_user(request, exc.message, level=messages.ERROR)


def _not_found():
    from django.http import Http404

    return Http404(_("No such simulation."))


def _changes_rows(changes: dict) -> list[dict]:
    rows = []
    for tool, fields in (changes.get("tool_policies") or {}).items():
        rows.append({"kind": _("Tool policy"), "name": tool, "fields": fields})
    for name, fields in (changes.get("approval_rules") or {}).items():
        rows.append({"kind": _("Approval rule"), "name": name, "fields": fields if fields is not None else None})
    return rows


@admin.register(PolicyDraft)
class PolicyDraftAdmin(admin.ModelAdmin):
    list_display = ["title", "workspace", "status", "created_by", "created_at", "approved_by", "result"]
    list_filter = ["status", "workspace"]
    readonly_fields = [f.name for f in PolicyDraft._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description=gettext_lazy("last simulation"))
    def result(self, obj):
        from django.utils.html import format_html

        if not obj.last_simulation_id:
            return "-"
        return format_html('<a href="{}">{}</a>', reverse("admin:policies_policysimulation_result",
                                                          args=[obj.last_simulation_id]), _("result"))


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    list_display = ["number", "created_at", "created_by", "approved_by", "applied_by", "reason"]
    readonly_fields = [f.name for f in PolicyVersion._meta.fields]
    actions = ["rollback"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=gettext_lazy("Roll back to the selected version (as a draft)"))
    def rollback(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, _("Select exactly one version."), level=messages.ERROR)
            return None
        workspace = _admin_workspaces(request.user).first()
        if workspace is None:
            self.message_user(request, _("Only a workspace admin may roll back."), level=messages.ERROR)
            return None
        try:
            policy_admin_workspace(user=request.user, workspace_id=workspace.pk)
            draft = version_rollback(user=request.user, workspace=workspace, version=queryset.get())
        except ServiceError as exc:
            self.message_user(request, exc.message, level=messages.ERROR)
            return None
        return HttpResponseRedirect(reverse("admin:policies_policysimulation_result", args=[draft.last_simulation_id]))


@admin.register(WorkspacePolicySettings)
class WorkspacePolicySettingsAdmin(admin.ModelAdmin):
    list_display = ["workspace", "four_eyes"]
