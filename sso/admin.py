from django.contrib import admin

from .models import SSOGroupRule, SSOIdentity, SSOMembership


@admin.register(SSOGroupRule)
class SSOGroupRuleAdmin(admin.ModelAdmin):
    """Members of an identity-provider group get a role in a workspace at their next login;
    leaving the group removes the membership SSO granted (at the next login)."""

    list_display = ["group", "workspace", "role"]
    list_filter = ["workspace", "role"]
    search_fields = ["group"]


@admin.register(SSOIdentity)
class SSOIdentityAdmin(admin.ModelAdmin):
    list_display = ["user", "subject", "issuer", "last_login_at"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "groups", "last_login_at"]


@admin.register(SSOMembership)
class SSOMembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "workspace", "granted_at"]
    list_filter = ["workspace"]
