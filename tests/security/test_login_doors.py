"""One sign-in budget for every door that takes a password (the sign-in page, the admin
login, the token endpoint), keyed on the username as the sign-in form reads it (NFKC,
case-folded); ``PASSWORD_LOGIN_ENABLED=false`` lets only superusers use a password; new
usernames are stored in NFKC form and look-alikes of existing accounts are refused."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client
from rest_framework.test import APIClient

from chatplatform.usernames import UsernameLookalike

pytestmark = [pytest.mark.django_db, pytest.mark.db_backends, pytest.mark.usefixtures("budgets")]

ADMIN_LOGIN = "/admin/login/"
FORM = "/accounts/login/"
TOKEN = "/api/v1/auth/token/"
BOLD_B = "\U0001d41b"  # MATHEMATICAL BOLD SMALL B: NFKC → "b"




@pytest.fixture
def root(db):
    return get_user_model().objects.create_superuser(username="root", password="pw-root", email="root@example.com")


def admin_post(client, username, password):
    return client.post(ADMIN_LOGIN, {"username": username, "password": password, "next": "/admin/"})


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_admin_login_is_throttled_by_address(root):
    client = Client()
    codes = [admin_post(client, "root", f"wrong-{i}").status_code for i in range(3)]
    assert codes == [200, 200, 200]  # the admin's form again: "enter the correct username and password"
    blocked = admin_post(client, "root", "pw-root")
    assert blocked.status_code == 429 and int(blocked["Retry-After"]) > 0
    assert "Too many sign-in attempts" in blocked.content.decode()
    assert not signed_in(client)  # the right password did not get in


def test_admin_login_is_throttled_by_username_from_many_addresses(root, budgets):
    budgets.LOGIN_RATE_LIMIT = "1000/hour"
    budgets.LOGIN_USERNAME_RATE_LIMIT = "3/hour"
    for i in range(3):
        assert admin_post(Client(REMOTE_ADDR=f"192.0.2.{i}"), "root", "wrong").status_code == 200
    last = Client(REMOTE_ADDR="192.0.2.77")
    assert admin_post(last, "root", "pw-root").status_code == 429 and not signed_in(last)


def test_all_doors_share_one_budget(users, budgets):
    """Two guesses at the admin and one at the token endpoint spend the budget the sign-in page
    and the token endpoint see too."""
    budgets.LOGIN_RATE_LIMIT = "1000/hour"
    budgets.LOGIN_USERNAME_RATE_LIMIT = "3/hour"
    admin_post(Client(REMOTE_ADDR="192.0.2.1"), "alice", "wrong")
    admin_post(Client(REMOTE_ADDR="192.0.2.2"), "alice", "wrong")
    assert APIClient(REMOTE_ADDR="192.0.2.3").post(
        TOKEN, {"username": "alice", "password": "wrong"}, format="json").status_code == 400
    assert Client(REMOTE_ADDR="192.0.2.4").post(FORM, {"username": "alice", "password": "pw-alice"}).status_code == 429
    token = APIClient(REMOTE_ADDR="192.0.2.5").post(TOKEN, {"username": "alice", "password": "pw-alice"}, format="json")
    assert token.status_code == 429 and token.json()["error"]["code"] == "throttled"


def test_a_lookalike_username_does_not_reopen_a_throttled_account(users, budgets):
    """``𝐛ob`` signs in as ``bob`` (the form applies NFKC), so it must spend bob's budget."""
    budgets.LOGIN_RATE_LIMIT = "1000/hour"
    budgets.LOGIN_USERNAME_RATE_LIMIT = "3/hour"
    for i in range(3):
        assert Client(REMOTE_ADDR=f"192.0.2.{i}").post(FORM, {"username": "bob", "password": "wrong"}).status_code == 200
    for i, name in enumerate([BOLD_B + "ob", "BOB", "\uff42\uff4f\uff42"]):  # bold, upper case, full width
        client = Client(REMOTE_ADDR=f"198.51.100.{i}")
        response = client.post(FORM, {"username": name, "password": "pw-bob"})
        assert response.status_code == 429, name
        assert not signed_in(client)
    # Under the budget the look-alike is bob (the form's own reading), so the key must be too.
    cache.clear()
    client = Client(REMOTE_ADDR="198.51.100.9")
    assert client.post(FORM, {"username": BOLD_B + "ob", "password": "pw-bob"}).status_code == 302
    assert client.session["_auth_user_id"] == str(users["bob"].pk)


def test_with_password_login_off_only_superusers_use_a_password_at_the_admin(users, root, settings):
    settings.PASSWORD_LOGIN_ENABLED = False
    staff = users["admin"]
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    client = Client()
    refused = admin_post(client, "admin", "pw-admin")
    assert refused.status_code == 200 and not signed_in(client)
    assert APIClient().post(TOKEN, {"username": "alice", "password": "pw-alice"}, format="json").status_code == 400
    ok = admin_post(client, "root", "pw-root")
    assert ok.status_code == 302 and client.session["_auth_user_id"] == str(root.pk)


def test_with_password_login_on_staff_sign_in_at_the_admin(users):
    staff = users["admin"]
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    client = Client()
    assert admin_post(client, "admin", "pw-admin").status_code == 302 and signed_in(client)


def test_changing_a_password_spends_the_same_budget(users, budgets):
    """The old-password check of /accounts/password_change/ is a door too: a stolen session
    cannot guess the password there beyond the account's budget."""
    budgets.LOGIN_RATE_LIMIT = "1000/hour"
    budgets.LOGIN_USERNAME_RATE_LIMIT = "3/hour"
    client = Client()
    client.force_login(users["alice"])
    url = "/accounts/password_change/"
    for i in range(3):
        wrong = client.post(url, {"old_password": f"guess-{i}", "new_password1": "N3w-secret-pw!", "new_password2": "N3w-secret-pw!"})
        assert wrong.status_code == 200  # the form again: old password incorrect
    blocked = client.post(url, {"old_password": "pw-alice", "new_password1": "N3w-secret-pw!", "new_password2": "N3w-secret-pw!"})
    assert blocked.status_code == 429 and int(blocked["Retry-After"]) > 0
    users["alice"].refresh_from_db()
    assert users["alice"].check_password("pw-alice")  # unchanged
    # The account's sign-in budget is spent as well.
    assert Client(REMOTE_ADDR="192.0.2.60").post(FORM, {"username": "alice", "password": "pw-alice"}).status_code == 429


# --- usernames at creation ---------------------------------------------------------------------
def test_new_usernames_are_stored_in_nfkc_form(db):
    user = get_user_model().objects.create_user(username="\uff43\uff41\uff52\uff4c", password="x")  # full-width carl
    assert get_user_model().objects.get(pk=user.pk).username == "carl"


@pytest.mark.parametrize("name", ["\uff41\uff44\uff4d\uff49\uff4e", "Admin", "\U0001d41a" + "dmin"])
def test_a_lookalike_of_an_existing_username_is_refused(users, name):
    before = get_user_model().objects.count()
    with pytest.raises(UsernameLookalike) as caught:
        get_user_model().objects.create_user(username=name, password="x")
    assert caught.value.existing == "admin"
    assert get_user_model().objects.count() == before


def test_renaming_onto_a_lookalike_is_refused_and_unchanged_names_save(users):
    bob = users["bob"]
    bob.first_name = "Bob"
    bob.save()  # a name from before the rule, unchanged: saves
    bob.username = "ALICE"
    with pytest.raises(UsernameLookalike):
        bob.save()


def test_renaming_onto_a_lookalike_in_the_admin_is_a_form_error(users, root):
    client = Client()
    client.force_login(root)
    bob = users["bob"]
    page = client.get(f"/admin/auth/user/{bob.pk}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {name: (value if value is not None else "") for name, value in form.initial.items()
            if name not in ("password", "groups", "user_permissions", "last_login", "date_joined")}
    data.update({"username": "\uff21\uff4c\uff49\uff43\uff45", "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00"})
    response = client.post(f"/admin/auth/user/{bob.pk}/change/", data)
    assert response.status_code == 200  # the form again, not a 500
    assert "reads the same as the existing account" in response.content.decode()
    bob.refresh_from_db()
    assert bob.username == "bob"
