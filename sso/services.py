"""Single sign-on writes: the user for an identity, and memberships from the groups claim.

Plain functions (no HTTP): ``backend.py`` calls them after the identity provider's token was
verified; tests call them directly.
"""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.db import transaction

from chat.models import Membership
from chatplatform.usernames import UsernameLookalike, lookalike_of, nfkc

from .models import SSOGroupRule, SSOIdentity, SSOMembership

_USERNAME_BAD = re.compile(r"[^\w.@+-]")


def groups_from_claims(claims: dict, *, claim: str) -> list[str]:
    """The groups claim as a list of strings: a JSON list, or one string (space- or
    comma-separated, as some providers send it); missing → ``[]``."""
    value = claims.get(claim)
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in re.split(r"[\s,]+", value) if v]
    if isinstance(value, list | tuple):
        return [str(v) for v in value if v is not None and str(v)]
    return []


def _free_username(base: str) -> str:
    base = (_USERNAME_BAD.sub("", nfkc(base)) or "user")[:140]
    name, n = base, 1
    while lookalike_of(name) is not None:
        n += 1
        name = f"{base}-{n}"
    return name


@transaction.atomic
def sso_user_for_identity(*, issuer: str, claims: dict, username_claim: str = "preferred_username"):
    """The platform user of identity ``(issuer, claims["sub"])``; created on first login
    (username from ``username_claim``, else the e-mail's local part, else ``sub``, in NFKC
    form; made unique with a ``-2`` suffix; no usable password). A name that NFKC maps onto
    an existing account's (``ａｄｍｉｎ`` beside ``admin``) raises
    ``chatplatform.usernames.UsernameLookalike``. E-mail and names are refreshed from
    the claims at every login. Raises ValueError when ``sub`` is missing."""
    subject = str(claims.get("sub") or "")
    if not subject:
        raise ValueError("the identity provider sent no subject (sub)")
    User = get_user_model()
    identity = SSOIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    email = str(claims.get("email") or "")[:254]
    if identity is None:
        wanted = str(claims.get(username_claim) or email.split("@")[0] or subject)
        if nfkc(wanted) != wanted and (existing := lookalike_of(nfkc(wanted))) is not None:
            # A look-alike (full-width, mathematical letters …) of an existing account is
            # refused, not given a "-2" name beside it: it reads as that account.
            raise UsernameLookalike(wanted, existing)
        user = User(username=_free_username(wanted), email=email)
        user.set_unusable_password()
        user.save()
        identity = SSOIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    user = identity.user
    changed = {}
    for field, value in (("email", email), ("first_name", str(claims.get("given_name") or "")[:150]),
                         ("last_name", str(claims.get("family_name") or "")[:150])):
        if value and getattr(user, field) != value:
            setattr(user, field, value)
            changed[field] = value
    if changed:
        user.save(update_fields=list(changed))
    return user


@transaction.atomic
def sso_memberships_sync(*, user, groups: list[str]) -> dict[str, list]:
    """Make ``user``'s SSO-granted memberships match the rules for ``groups``.

    For each workspace some rule of ``groups`` names: the highest-ranked role among them
    (admins above everything). A membership SSO granted earlier whose workspace no rule
    matches any more is removed — the user's open websockets of that workspace then get no
    further events (the consumer re-checks membership per event). Memberships created by
    hand are left alone: neither changed nor removed. Returns ``{"added": [slug],
    "changed": [slug], "removed": [slug]}``.
    """
    wanted: dict[int, object] = {}
    for rule in SSOGroupRule.objects.filter(group__in=groups).select_related("role", "workspace"):
        best = wanted.get(rule.workspace_id)
        if best is None or (rule.role.is_admin, rule.role.rank) > (best.role.is_admin, best.role.rank):
            wanted[rule.workspace_id] = rule
    granted = set(SSOMembership.objects.filter(user=user).values_list("workspace_id", flat=True))
    existing = {m.workspace_id: m for m in Membership.objects.filter(user=user).select_related("workspace")}
    out: dict[str, list] = {"added": [], "changed": [], "removed": []}
    for workspace_id, rule in wanted.items():
        membership = existing.get(workspace_id)
        if membership is None:
            Membership.objects.create(user=user, workspace_id=workspace_id, role=rule.role)
            SSOMembership.objects.get_or_create(user=user, workspace_id=workspace_id)
            out["added"].append(rule.workspace.slug)
        elif workspace_id in granted and membership.role_id != rule.role_id:
            Membership.objects.filter(pk=membership.pk).update(role=rule.role)
            out["changed"].append(rule.workspace.slug)
    for workspace_id in granted - set(wanted):
        membership = existing.get(workspace_id)
        if membership is not None:
            membership.delete()
            out["removed"].append(membership.workspace.slug)
        SSOMembership.objects.filter(user=user, workspace_id=workspace_id).delete()
    SSOIdentity.objects.filter(user=user).update(groups=list(groups)[:500])
    return out
