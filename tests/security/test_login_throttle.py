"""Issue 17: sign-in throttling cannot be bypassed by rotating ``X-Forwarded-For`` and covers
the HTML form too, by client address and by username."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("budgets")]

TOKEN = "/api/v1/auth/token/"
FORM = "/accounts/login/"




def test_rotating_x_forwarded_for_does_not_reset_the_address_budget(users):
    client = APIClient()
    codes = [client.post(TOKEN, {"username": "alice", "password": "wrong"}, format="json",
                         HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code for i in range(5)]
    assert codes == [400, 400, 400, 429, 429]


def test_behind_one_trusted_proxy_the_proxys_entry_is_the_client(users, budgets):
    """With NUM_PROXIES=1 the right-most X-Forwarded-For entry is the client: spoofed entries
    to its left change nothing, different real clients have their own budgets."""
    budgets.NUM_PROXIES = 1
    client = APIClient()

    def attempt(xff):
        return client.post(TOKEN, {"username": "alice", "password": "wrong"}, format="json",
                           HTTP_X_FORWARDED_FOR=xff).status_code

    codes = [attempt(f"10.9.9.{i}, 198.51.100.7") for i in range(4)]
    assert codes == [400, 400, 400, 429]
    assert attempt("198.51.100.8") == 400  # another client behind the same proxy


def test_one_username_from_many_addresses_is_throttled(users, budgets):
    budgets.LOGIN_RATE_LIMIT = "1000/hour"
    budgets.LOGIN_USERNAME_RATE_LIMIT = "3/hour"
    codes = [APIClient(REMOTE_ADDR=f"192.0.2.{i}").post(TOKEN, {"username": "Alice", "password": "wrong"},
                                                       format="json").status_code for i in range(4)]
    assert codes == [400, 400, 400, 429]
    # The budget is the account's, whatever the case; other accounts are unaffected.
    assert APIClient(REMOTE_ADDR="192.0.2.99").post(TOKEN, {"username": "alice", "password": "pw-alice"},
                                                     format="json").status_code == 429
    assert APIClient(REMOTE_ADDR="192.0.2.99").post(TOKEN, {"username": "bob", "password": "pw-bob"},
                                                     format="json").status_code == 200


def test_throttled_token_answer_has_the_error_shape_and_retry_after(users):
    client = APIClient()
    for _ in range(3):
        client.post(TOKEN, {"username": "alice", "password": "wrong"}, format="json")
    response = client.post(TOKEN, {"username": "alice", "password": "pw-alice"}, format="json")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "throttled"
    assert int(response["Retry-After"]) > 0


def test_html_login_form_is_throttled_by_address(users):
    client = Client()
    codes = [client.post(FORM, {"username": "alice", "password": "wrong"},
                         HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code for i in range(3)]
    assert codes == [200, 200, 200]  # the form again, with "didn't match"
    blocked = client.post(FORM, {"username": "alice", "password": "pw-alice"})
    assert blocked.status_code == 429 and int(blocked["Retry-After"]) > 0
    assert "Too many sign-in attempts" in blocked.content.decode()
    assert "_auth_user_id" not in client.session  # the right password did not sign in either


def test_html_login_form_is_throttled_by_username(users, budgets):
    budgets.LOGIN_RATE_LIMIT = "1000/hour"
    budgets.LOGIN_USERNAME_RATE_LIMIT = "2/hour"
    for i in range(2):
        Client(REMOTE_ADDR=f"192.0.2.{i}").post(FORM, {"username": "alice", "password": "wrong"})
    assert Client(REMOTE_ADDR="192.0.2.50").post(FORM, {"username": "alice", "password": "pw-alice"}).status_code == 429
    ok = Client(REMOTE_ADDR="192.0.2.51").post(FORM, {"username": "bob", "password": "pw-bob"})
    assert ok.status_code == 302  # signed in, redirected


def test_html_form_still_signs_in_under_the_budget(users):
    response = Client().post(FORM, {"username": "alice", "password": "pw-alice"})
    assert response.status_code == 302
