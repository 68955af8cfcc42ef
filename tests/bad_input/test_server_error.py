"""``handler500`` (``chatplatform.api.server_error``): a lost backing service is a 503 that says
so — JSON under ``/api/`` and ``/v1/``, a page that reloads itself elsewhere — and any other
unhandled exception stays Django's plain 500 (no detail leaks)."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.test import Client, override_settings
from django.urls import path

from chatplatform.api import UNAVAILABLE_MESSAGE
from config import urls as project_urls


def _database_gone(request):
    raise OperationalError("connection to server at 127.0.0.1 failed: Connection refused")


def _bug(request):
    raise ZeroDivisionError("secret detail 42")


urlpatterns = [
    path("api/v1/broken/", _database_gone),
    path("v1/broken", _database_gone),
    path("page/broken/", _database_gone),
    path("page/bug/", _bug),
    *project_urls.urlpatterns,
]
handler500 = project_urls.handler500


@pytest.fixture
def client():
    with override_settings(ROOT_URLCONF=__name__, DEBUG=False):
        yield Client(raise_request_exception=False)


@pytest.mark.parametrize("url", ["/api/v1/broken/", "/v1/broken"])
def test_an_unreachable_database_is_a_json_503_on_the_apis(client, url):
    response = client.get(url)
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert response.json() == {"error": {"code": "service_unavailable", "message": UNAVAILABLE_MESSAGE}}


def test_an_unreachable_database_is_a_503_page_that_reloads_itself(client, caplog):
    response = client.get("/page/broken/")
    # One warning line per request, not an ERROR with a traceback (an outage logged thousands).
    assert [(r.name, r.levelname) for r in caplog.records if r.name in ("django.request", "chatplatform.api")] == [
        ("chatplatform.api", "WARNING")]
    assert response.status_code == 503 and response["Retry-After"] == "5" and response["Refresh"] == "5"
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert UNAVAILABLE_MESSAGE in body and "Connection refused" not in body


def test_any_other_exception_stays_a_plain_500(client):
    response = client.get("/page/bug/")
    assert response.status_code == 500 and "Refresh" not in response
    assert "secret detail" not in response.content.decode()
