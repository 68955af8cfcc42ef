"""Issue 17: a Content-Security-Policy with no inline scripts or styles, and the browser
security headers ``check --deploy`` does not cover, on every kind of response."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from knowledge.services import knowledge_item_create
from tests.conftest import make_thread

pytestmark = pytest.mark.django_db

INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
INLINE_STYLE = re.compile(r"<style\b|\sstyle=\"", re.I)
INLINE_HANDLER = re.compile(r"\son[a-z]+=\"", re.I)


@pytest.fixture
def pages(users, workspaces, offline):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    item = knowledge_item_create(workspace=workspaces["demo"], owner=users["alice"], title="A note", content="text")
    return ["/accounts/login/", "/chat/", f"/chat/{thread.pk}/", "/knowledge/", f"/knowledge/{item.pk}/",
            f"/knowledge/{item.pk}/edit/", "/api/docs/", "/api/v1/threads/", "/api/v1/nope/"]


def directives(header: str) -> dict[str, list[str]]:
    out = {}
    for part in header.split(";"):
        bits = part.split()
        if bits:
            out[bits[0]] = bits[1:]
    return out


def test_every_response_carries_the_policy_headers(client_for_alice, pages):
    for path in pages:
        response = client_for_alice.get(path)
        assert response.status_code in (200, 404), (path, response.status_code)
        csp = directives(response["Content-Security-Policy"])
        assert csp["default-src"] == ["'self'"] and csp["script-src"] == ["'self'"], path
        assert csp["style-src"] == ["'self'"] and csp["object-src"] == ["'none'"], path
        assert csp["frame-ancestors"] == ["'none'"] and csp["base-uri"] == ["'self'"], path
        assert not any("unsafe" in v for values in csp.values() for v in values), path
        policy = response["Permissions-Policy"]
        for feature in ("camera=()", "microphone=()", "geolocation=()", "payment=()"):
            assert feature in policy, (path, policy)
        assert response["Cross-Origin-Opener-Policy"] == "same-origin", path
        assert response["Referrer-Policy"] == "same-origin", path
        assert response["X-Content-Type-Options"] == "nosniff", path
        assert response["X-Frame-Options"] == "DENY", path


def test_pages_have_no_inline_script_style_or_handler(client_for_alice, pages):
    for path in pages:
        response = client_for_alice.get(path)
        if "text/html" not in response.get("Content-Type", ""):
            continue
        html = response.content.decode()
        assert not INLINE_SCRIPT.search(html), (path, INLINE_SCRIPT.search(html).group(0))
        assert not INLINE_STYLE.search(html), (path, INLINE_STYLE.search(html).group(0))
        assert not INLINE_HANDLER.search(html), (path, INLINE_HANDLER.search(html).group(0))


@pytest.fixture
def client_for_alice(users):
    client = Client()
    client.force_login(users["alice"])
    return client
