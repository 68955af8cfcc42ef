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


# --- users: the look-alike rule as a form error (chatplatform.usernames) --------------------
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.admin import UserAdmin  # noqa: E402
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm  # noqa: E402
from django.core.exceptions import ValidationError  # noqa: E402

from chatplatform.usernames import lookalike_of  # noqa: E402


def _clean_username(form):
    name = form.cleaned_data.get("username")
    if isinstance(name, str):
        other = lookalike_of(name, exclude_pk=form.instance.pk)
        if other is not None:
            raise ValidationError(f"This reads the same as the existing account {other!r}; choose another username.",
                                  code="username_lookalike")
    return name


class LookalikeSafeCreationForm(AdminUserCreationForm):
    def clean_username(self):
        super().clean_username()
        return _clean_username(self)


class LookalikeSafeChangeForm(UserChangeForm):
    def clean_username(self):
        return _clean_username(self)


class PlatformUserAdmin(UserAdmin):
    """Django's user admin; a username that reads the same as another account's (NFKC,
    case-folded: ``Admin``, ``ａｄｍｉｎ`` beside ``admin``) is a form error, not a failed save."""

    form = LookalikeSafeChangeForm
    add_form = LookalikeSafeCreationForm


if admin.site.is_registered(get_user_model()):
    admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), PlatformUserAdmin)
