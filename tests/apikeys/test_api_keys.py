"""Self-service API keys through ``/api/v1/api-keys/`` and the admin: the secret is shown
once and stored only as its SHA-256; a revoked or expired key is refused at once with a
clear 401; another user's key is a 404; names and the per-user limit are checked."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import timedelta

import pytest
from django.db import connection
from django.test import AsyncClient, Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token

from apikeys.models import ApiKey

pytestmark = pytest.mark.django_db

URL = "/api/v1/api-keys/"


def session(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def make_key(client: Client, name: str = "laptop", **extra) -> dict:
    response = client.post(URL, {"name": name, **extra}, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def with_key(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def test_creation_shows_the_secret_once_and_only_its_hash_is_stored(users):
    alice = session(users["alice"])
    created = make_key(alice, "laptop script")
    key = created["key"]
    assert key.startswith("cp_") and len(key) == 46
    assert created["prefix"] == key[:9] and created["name"] == "laptop script"
    assert created["expires_at"] is None and created["last_used_at"] is None and created["expired"] is False

    row = ApiKey.objects.get(pk=created["id"])
    assert row.key_hash == hashlib.sha256(key.encode()).hexdigest()
    stored = [str(getattr(row, f.attname)) for f in ApiKey._meta.concrete_fields]
    assert not any(key in value for value in stored)  # the secret itself is nowhere in the row

    listed = alice.get(URL)
    detail = alice.get(f"{URL}{created['id']}/")
    assert listed.status_code == 200 and detail.status_code == 200
    for response in (listed, detail):
        assert key.encode() not in response.content and b'"key"' not in response.content
    assert [k["id"] for k in listed.json()] == [created["id"]]
    assert set(listed.json()[0]) == {"id", "name", "prefix", "created_at", "expires_at", "last_used_at", "expired"}


def test_a_key_authenticates_and_last_used_is_written_at_most_once_a_minute(users):
    key = make_key(session(users["alice"]))["key"]
    client = with_key(key)
    assert client.get("/api/v1/workspaces/").status_code == 200
    first = ApiKey.objects.get().last_used_at
    assert first is not None
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/api/v1/workspaces/").status_code == 200
    assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE") and "apikeys" in q["sql"]]
    assert ApiKey.objects.get().last_used_at == first
    ApiKey.objects.update(last_used_at=first - timedelta(seconds=61))
    assert client.get("/api/v1/workspaces/").status_code == 200
    assert ApiKey.objects.get().last_used_at > first


def test_the_owner_revokes_a_key_and_it_is_refused_at_once(users):
    alice = session(users["alice"])
    created = make_key(alice)
    assert with_key(created["key"]).get("/api/v1/workspaces/").status_code == 200
    assert alice.delete(f"{URL}{created['id']}/").status_code == 204
    refused = with_key(created["key"]).get("/api/v1/workspaces/")
    assert refused.status_code == 401
    assert refused.json()["error"] == {"code": "api_key_revoked", "message": "This API key has been revoked."}
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert alice.get(URL).json() == []
    assert alice.get(f"{URL}{created['id']}/").status_code == 404
    assert alice.delete(f"{URL}{created['id']}/").status_code == 404
    row = ApiKey.objects.get(pk=created["id"])
    assert row.revoked_at is not None and row.revoked_by == users["alice"]


@pytest.mark.django_db(transaction=True)  # /v1 reads the database from another thread
def test_an_expired_key_is_401_with_a_clear_message_at_rest_and_v1(users, offline):
    alice = session(users["alice"])
    created = make_key(alice, expires_at=(timezone.now() + timedelta(days=1)).isoformat())
    assert created["expires_at"] is not None
    assert with_key(created["key"]).get("/api/v1/workspaces/").status_code == 200
    ApiKey.objects.filter(pk=created["id"]).update(expires_at=timezone.now() - timedelta(minutes=1))

    refused = with_key(created["key"]).get("/api/v1/workspaces/")
    assert refused.status_code == 401
    error = refused.json()["error"]
    assert error["code"] == "api_key_expired"
    assert error["message"].startswith("This API key expired at ") and "settings page" in error["message"]

    async def v1():
        return await AsyncClient().get("/v1/models", headers={"Authorization": f"Bearer {created['key']}"})

    response = asyncio.run(v1())
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "api_key_expired"
    assert response.json()["error"]["type"] == "authentication_error"
    assert [k["expired"] for k in alice.get(URL).json()] == [True]  # listed, marked, until revoked


@pytest.mark.parametrize(("body", "why", "says"), [
    ({"name": ""}, "empty", "Give the key a name."),
    ({"name": "   "}, "blank", "Give the key a name."),
    ({"name": "x" * 101}, "too long", "A key's name is at most 100 characters."),
    ({}, "missing", "Give the key a name."),
    ({"name": 5, "expires_at": "not a date"}, "bad expiry", "The expiry must be a date and time"),
    ({"name": "old", "expires_at": "2001-01-01T00:00:00Z"}, "past expiry", "The expiry must be in the future."),
])
def test_bad_input_is_a_400_in_words_the_page_shows_and_makes_nothing(users, body, why, says):
    response = session(users["alice"]).post(URL, body, content_type="application/json")
    assert response.status_code == 400, (why, response.content)
    assert response.json()["error"]["code"] == "invalid"
    assert says in response.json()["error"]["message"], (why, response.json())
    assert not ApiKey.objects.exists()


def test_a_name_of_exactly_100_characters_is_taken(users):
    assert make_key(session(users["alice"]), "n" * 100)["name"] == "n" * 100


def test_another_users_key_is_a_404(users):
    created = make_key(session(users["alice"]))
    bob = session(users["bob"])
    assert bob.get(f"{URL}{created['id']}/").status_code == 404
    assert bob.delete(f"{URL}{created['id']}/").status_code == 404
    assert bob.get(f"{URL}not-a-uuid/").status_code == 404
    assert bob.get(URL).json() == []
    assert with_key(created["key"]).get("/api/v1/workspaces/").status_code == 200  # untouched


def test_at_most_the_configured_number_of_active_keys(users, settings):
    settings.API_KEYS_MAX_PER_USER = 2
    alice = session(users["alice"])
    first, _second = make_key(alice, "one"), make_key(alice, "two")
    refused = alice.post(URL, {"name": "three"}, content_type="application/json")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "too_many_keys"
    assert alice.delete(f"{URL}{first['id']}/").status_code == 204
    third = make_key(alice, "three")
    ApiKey.objects.filter(pk=third["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    make_key(alice, "four")  # an expired key does not count
    assert make_key(session(users["bob"]), "bob's")  # per user


def test_an_api_key_cannot_make_keys_but_a_password_token_can(users):
    key = make_key(session(users["alice"]))["key"]
    refused = with_key(key).post(URL, {"name": "child"}, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_allowed"
    token = Token.objects.create(user=users["alice"]).key
    made = Client(HTTP_AUTHORIZATION=f"Token {token}").post(URL, {"name": "from token"},
                                                            content_type="application/json")
    assert made.status_code == 201
    # A key may still list and revoke (its own user's keys).
    assert with_key(key).delete(f"{URL}{made.json()['id']}/").status_code == 204


def test_a_single_sign_on_user_without_a_password_makes_a_key(users, django_user_model):
    sso_user = django_user_model.objects.create_user(username="sso-only")
    sso_user.set_unusable_password()
    sso_user.save()
    key = make_key(session(sso_user), "ci")["key"]
    assert with_key(key).get("/api/v1/workspaces/").status_code == 200


def test_an_admin_sees_keys_without_their_secret_and_revokes_them(users, django_user_model):
    created = make_key(session(users["alice"]), "alice's laptop")
    row = ApiKey.objects.get(pk=created["id"])
    root = django_user_model.objects.create_superuser(username="root", password="pw-root")
    admin = session(root)
    page = admin.get("/admin/apikeys/apikey/")
    assert page.status_code == 200
    text = page.content.decode()
    assert created["prefix"] in text and "alice&#x27;s laptop" in text and "alice" in text
    change = admin.get(f"/admin/apikeys/apikey/{row.pk}/change/").content.decode()
    for secret in (created["key"], row.key_hash):
        assert secret not in text and secret not in change
    assert admin.get("/admin/apikeys/apikey/add/").status_code == 403

    done = admin.post("/admin/apikeys/apikey/", {"action": "revoke", "_selected_action": [str(row.pk)]})
    assert done.status_code == 302
    row.refresh_from_db()
    assert row.revoked_at is not None and row.revoked_by == root
    assert with_key(created["key"]).get("/api/v1/workspaces/").json()["error"]["code"] == "api_key_revoked"


def test_the_openapi_schema_carries_the_endpoints(users):
    schema = session(users["alice"]).get("/api/schema/", {"format": "json"}).json()
    assert set(schema["paths"]["/api/v1/api-keys/"]) == {"get", "post"}
    assert set(schema["paths"]["/api/v1/api-keys/{key_id}/"]) == {"get", "delete"}
    created = schema["components"]["schemas"]["ApiKeyCreated"]["properties"]
    assert "key" in created and "key" not in schema["components"]["schemas"]["ApiKey"]["properties"]


def test_the_admin_lists_password_tokens_without_their_secret_and_shows_a_new_one_once(users, django_user_model):
    token = Token.objects.create(user=users["alice"])
    root = django_user_model.objects.create_superuser(username="root", password="pw-root")
    admin = session(root)
    listing = admin.get("/admin/authtoken/tokenproxy/").content.decode()
    assert token.key[:6] + "…" in listing and token.key not in listing

    made = admin.post("/admin/authtoken/tokenproxy/add/", {"user": users["bob"].pk}, follow=True)
    assert made.status_code == 200
    new = Token.objects.get(user=users["bob"])
    assert new.key in made.content.decode()  # once, in the confirmation
    assert new.key not in admin.get("/admin/authtoken/tokenproxy/").content.decode()
