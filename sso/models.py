"""Single sign-on records.

* ``SSOIdentity`` — which identity provider account (issuer + ``sub``) a platform user is.
  Users are matched by it, never by e-mail (an address can change or be reused).
* ``SSOGroupRule`` — an admin rule: members of identity-provider group ``group`` get role
  ``role`` in ``workspace``. Several matching rules for one workspace → the highest-ranked
  role wins.
* ``SSOMembership`` — a workspace membership that single sign-on granted. Only these are
  changed or removed at the next login; a membership an admin created by hand is never
  touched by SSO.
"""

from django.conf import settings
from django.db import models


class SSOIdentity(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, blank=True, help_text="Groups claim at the last login.")
    last_login_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "SSO identity"
        verbose_name_plural = "SSO identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique_subject")]

    def __str__(self) -> str:
        return f"{self.user} ← {self.subject} @ {self.issuer}"


class SSOGroupRule(models.Model):
    group = models.CharField(max_length=200, help_text="A value of the groups claim (exact, case-sensitive).")
    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="+")
    role = models.ForeignKey("agents.Role", on_delete=models.PROTECT, related_name="+")

    class Meta:
        verbose_name = "SSO group rule"
        ordering = ["group", "workspace"]
        constraints = [models.UniqueConstraint(fields=["group", "workspace"], name="sso_rule_unique_group_workspace")]

    def __str__(self) -> str:
        return f"{self.group} → {self.role} in {self.workspace}"


class SSOMembership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="+")
    granted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "SSO-granted membership"
        constraints = [models.UniqueConstraint(fields=["user", "workspace"], name="sso_membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} (via SSO)"
