"""The seeded approval rules (migration 0011; admins change or add rules in the admin).

=====================  =========  ====  ===============================  ======  =======
rule                   risk       tier  who approves                     needed  expires
=====================  =========  ====  ===============================  ======  =======
Write                  write      any   the requester (or an admin)      1       24 h
Production write       write      prod  a workspace admin, not the       1       1 h
                                        requester
Dangerous              dangerous  any   the requester (or an admin)      1       1 h
Production dangerous   dangerous  prod  two workspace admins, requester  2       1 h
                                        excluded
=====================  =========  ====  ===============================  ======  =======

The most specific rule wins, so prod calls take the production rules; calls no rule covers
(a read tool set to "always", a call over its per-tool limit) fall back to the requester.
"""

from django.utils.translation import gettext_noop

# name, risk, env_tier, approver_kind, approvals_needed, requester_counts, expires_s. The names
# are stored in English and translated where they are shown (policy.rule_name), as the
# fallback's "Approval" is.
DEFAULT_RULES = [
    (gettext_noop("Write"), "write", "", "requester", 1, True, 86400),
    (gettext_noop("Production write"), "write", "prod", "workspace_admins", 1, False, 3600),
    (gettext_noop("Dangerous"), "dangerous", "", "requester", 1, True, 3600),
    (gettext_noop("Production dangerous"), "dangerous", "prod", "workspace_admins", 2, False, 3600),
]


def ensure_default_approval_policies(policy_model) -> None:
    """Create the seeded rules that are missing (``policy_model``: the ApprovalPolicy class)."""
    for name, risk, tier, kind, needed, counts, expires in DEFAULT_RULES:
        policy_model.objects.get_or_create(name=name, defaults={
            "risk": risk, "env_tier": tier, "approver_kind": kind, "approvals_needed": needed,
            "requester_counts": counts, "expires_s": expires})
