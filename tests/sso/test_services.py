"""Group mapping and identities without HTTP (``sso/services.py``)."""

import pytest

from chat.models import Membership
from sso.models import SSOGroupRule, SSOMembership
from sso.services import groups_from_claims, sso_memberships_sync, sso_user_for_identity


@pytest.mark.parametrize(("value", "groups"), [
    (["eng", "ops"], ["eng", "ops"]),
    ("eng ops,qa", ["eng", "ops", "qa"]),
    (None, []),
    (42, []),
    (["eng", None, ""], ["eng"]),
])
def test_groups_claim_shapes(value, groups):
    assert groups_from_claims({"groups": value} if value is not None else {}, claim="groups") == groups


@pytest.mark.django_db
def test_the_highest_role_of_matching_rules_wins(workspaces, roles):
    for group, role in (("readers", "viewer"), ("eng", "member"), ("leads", "admin")):
        SSOGroupRule.objects.create(group=group, workspace=workspaces["demo"], role=roles[role])
    user = sso_user_for_identity(issuer="https://idp", claims={"sub": "1", "preferred_username": "kim"})
    assert sso_memberships_sync(user=user, groups=["readers", "eng"]) == {"added": ["demo"], "changed": [], "removed": []}
    assert Membership.objects.get(user=user).role.name == "member"
    assert sso_memberships_sync(user=user, groups=["leads", "readers"])["changed"] == ["demo"]
    assert Membership.objects.get(user=user).role.name == "admin"
    assert sso_memberships_sync(user=user, groups=["unmapped"])["removed"] == ["demo"]
    assert not Membership.objects.filter(user=user).exists() and not SSOMembership.objects.exists()


@pytest.mark.django_db
def test_a_hand_made_membership_is_never_changed_by_sso(workspaces, roles):
    SSOGroupRule.objects.create(group="eng", workspace=workspaces["demo"], role=roles["admin"])
    user = sso_user_for_identity(issuer="https://idp", claims={"sub": "2", "email": "lee@example.com"})
    Membership.objects.create(user=user, workspace=workspaces["demo"], role=roles["viewer"])
    assert sso_memberships_sync(user=user, groups=["eng"]) == {"added": [], "changed": [], "removed": []}
    assert sso_memberships_sync(user=user, groups=[]) == {"added": [], "changed": [], "removed": []}
    assert Membership.objects.get(user=user).role.name == "viewer"


@pytest.mark.django_db
def test_usernames_are_unique_and_identities_stable(django_user_model):
    django_user_model.objects.create_user(username="kim")
    first = sso_user_for_identity(issuer="https://idp", claims={"sub": "a", "preferred_username": "kim"})
    other_idp = sso_user_for_identity(issuer="https://other", claims={"sub": "a", "preferred_username": "kim"})
    again = sso_user_for_identity(issuer="https://idp", claims={"sub": "a", "preferred_username": "renamed",
                                                                  "email": "kim@example.com"})
    assert (first.username, other_idp.username) == ("kim-2", "kim-3")
    assert again.pk == first.pk and again.email == "kim@example.com"
    with pytest.raises(ValueError, match="sub"):
        sso_user_for_identity(issuer="https://idp", claims={"email": "x@example.com"})
