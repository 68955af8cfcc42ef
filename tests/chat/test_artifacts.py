"""Artifact previews (issue 55, ``chat.artifacts``): the preview document's own headers (a CSP
that lets the artifact's inline code run and nothing reach the platform), the workspace switch
checked at every load, who may flip it (``PATCH /api/v1/workspaces/{id}/``), and the thread page
offering the preview panel only while it is on. The browser side: tests/e2e/test_artifacts.py."""

from __future__ import annotations

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from rest_framework.test import APIClient

from tests.conftest import make_thread

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def directives(response) -> dict[str, str]:
    policy = response["Content-Security-Policy"]
    return {part.split(" ", 1)[0]: part.split(" ", 1)[1] if " " in part else ""
            for part in (p.strip() for p in policy.split(";"))}


def frame_url(workspace) -> str:
    return f"/chat/artifacts/{workspace.pk}/frame/"


def test_the_preview_document_runs_inline_code_but_reaches_nothing(users, workspaces):
    response = signed_in(users["alice"]).get(frame_url(workspaces["demo"]))
    assert response.status_code == 200
    csp = directives(response)
    assert csp["default-src"] == "'none'"
    # The artifact's inline scripts, plus exactly two files of the platform by full URL — not
    # 'self', which would let an artifact load any script of this origin.
    assert csp["script-src"].split() == [
        "'unsafe-inline'", "http://testserver/static/chat/artifact-frame.js",
        "http://testserver/static/vendor/preview-vendor.js"]
    assert csp["style-src"] == "'unsafe-inline'"
    assert csp["img-src"] == "data: blob:"
    assert csp["connect-src"] == "'none'"
    assert csp["form-action"] == "'none'"
    assert csp["base-uri"] == "'none'"
    assert csp["frame-ancestors"] == "'self'"
    # Sandboxed by the header too: opened on its own in a tab it is still an opaque origin.
    assert csp["sandbox"] == "allow-scripts"
    assert response["X-Frame-Options"] == "SAMEORIGIN"  # the site's DENY would hide it from the chat page
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "no-referrer"
    assert response["Cache-Control"] == "no-store"
    html = response.content.decode()
    assert 'src="/static/chat/artifact-frame.js"' in html
    assert 'data-mermaid="/static/vendor/preview-vendor.js"' in html
    # Both scripts are served (the Mermaid build is committed: make vendor).
    assert finders.find("chat/artifact-frame.js") and finders.find("vendor/preview-vendor.js")


def test_the_workspace_switch_is_checked_at_every_load(users, workspaces):
    client, demo = signed_in(users["alice"]), workspaces["demo"]
    demo.artifacts_enabled = False
    demo.save(update_fields=["artifacts_enabled"])
    refused = client.get(frame_url(demo))
    assert refused.status_code == 403
    assert "turned off in this workspace" in refused.content.decode()
    assert "artifact-frame.js" not in refused.content.decode()
    assert directives(refused)["sandbox"] == "allow-scripts"  # the notice is shown in the frame, as safely
    assert refused["X-Frame-Options"] == "SAMEORIGIN"
    demo.artifacts_enabled = True
    demo.save(update_fields=["artifacts_enabled"])
    assert client.get(frame_url(demo)).status_code == 200


def test_another_workspace_or_no_session_gets_no_preview_document(users, workspaces):
    assert signed_in(users["dave"]).get(frame_url(workspaces["demo"])).status_code == 404
    assert signed_in(users["alice"]).get("/chat/artifacts/999999/frame/").status_code == 404
    # An id past the database's integer range is no workspace either (was a 500: OverflowError
    # on SQLite, NumericValueOutOfRange on PostgreSQL).
    for huge in ("9223372036854775808", "9" * 30):
        assert signed_in(users["alice"]).get(f"/chat/artifacts/{huge}/frame/").status_code == 404
    anonymous = Client().get(frame_url(workspaces["demo"]))
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


def test_the_thread_page_offers_previews_only_while_the_workspace_allows_them(users, workspaces, offline):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    client = signed_in(users["alice"])
    page = client.get(f"/chat/{thread.pk}/").content.decode()
    assert 'id="artifact-panel"' in page and f'data-frame-url="{frame_url(workspaces["demo"])}"' in page
    workspaces["demo"].artifacts_enabled = False
    workspaces["demo"].save(update_fields=["artifacts_enabled"])
    page = client.get(f"/chat/{thread.pk}/").content.decode()
    assert 'id="artifact-panel"' not in page and "/frame/" not in page


def test_a_workspace_admin_switches_previews_off_and_on(users, workspaces):
    demo = workspaces["demo"]
    url = f"/api/v1/workspaces/{demo.pk}/"
    assert api(users["alice"]).get(url).json() == {
        "id": demo.pk, "slug": "demo", "name": "Demo team", "role": "member", "artifacts_enabled": True}
    off = api(users["admin"]).patch(url, {"artifacts_enabled": False}, format="json")
    assert off.status_code == 200 and off.json()["artifacts_enabled"] is False and off.json()["role"] == "admin"
    demo.refresh_from_db()
    assert demo.artifacts_enabled is False
    listed = {w["slug"]: w["artifacts_enabled"] for w in api(users["alice"]).get("/api/v1/workspaces/").json()["results"]}
    assert listed == {"demo": False}
    by_slug = api(users["admin"]).patch("/api/v1/workspaces/demo/", {"artifacts_enabled": True}, format="json")
    assert by_slug.status_code == 200 and by_slug.json()["artifacts_enabled"] is True


def test_only_an_admin_may_switch_and_only_with_a_boolean(users, workspaces):
    demo = workspaces["demo"]
    url = f"/api/v1/workspaces/{demo.pk}/"
    member = api(users["alice"]).patch(url, {"artifacts_enabled": False}, format="json")
    assert member.status_code == 403 and member.json()["error"]["code"] == "not_allowed"
    assert api(users["dave"]).patch(url, {"artifacts_enabled": False}, format="json").status_code == 404
    assert api(users["dave"]).get(url).status_code == 404
    bad = api(users["admin"]).patch(url, {"artifacts_enabled": "no"}, format="json")
    assert bad.status_code == 400 and "artifacts_enabled" in bad.text
    missing = api(users["admin"]).patch(url, {}, format="json")
    assert missing.status_code == 400 and "artifacts_enabled" in missing.text
    demo.refresh_from_db()
    assert demo.artifacts_enabled is True  # nothing changed by the refusals


def test_the_settings_page_switch_is_for_workspace_admins(users, workspaces):
    demo = workspaces["demo"]
    admin_page = signed_in(users["admin"])
    form = admin_page.get("/chat/settings/").content.decode()
    assert 'id="artifacts-demo"' in form and 'name="artifacts_enabled" checked' in form
    saved = admin_page.post("/chat/settings/", {"artifacts_workspace": str(demo.pk)})  # box unticked: off
    assert saved.status_code == 302 and saved["Location"].endswith("?saved=artifacts#artifact-previews")
    demo.refresh_from_db()
    assert demo.artifacts_enabled is False
    assert 'name="artifacts_enabled" checked' not in admin_page.get("/chat/settings/").content.decode()

    member = signed_in(users["alice"])
    shown = member.get("/chat/settings/").content.decode()
    assert 'name="artifacts_workspace"' not in shown and "Demo team: off" in shown
    refused = member.post("/chat/settings/", {"artifacts_workspace": str(demo.pk), "artifacts_enabled": "on"})
    assert refused.status_code == 403 and "Only a workspace administrator" in refused.content.decode()
    other = signed_in(users["dave"]).post("/chat/settings/", {"artifacts_workspace": str(demo.pk),
                                                              "artifacts_enabled": "on"})
    assert other.status_code == 404
    assert member.post("/chat/settings/", {"artifacts_workspace": "demo"}).status_code == 404
    demo.refresh_from_db()
    assert demo.artifacts_enabled is False  # none of the refusals changed it
