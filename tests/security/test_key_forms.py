"""Provider keys in transformed forms — percent-encoded, chunked by dots, colons, dashes or
spaces, hex (plain and colon-separated), base64 (standard and URL-safe, at any offset) — are
redacted like the key itself (security review: they survived in run error text shown to
workspace admins and on the Django admin's run pages); ordinary text is left alone."""

from __future__ import annotations

import base64
import urllib.parse

import pytest

from chatplatform.redaction import redact

KEY = "sk-ant-api03-Q7fLm2Xz9RtB4kWc8NvH1sJd6YpA3eGuT0"
BODY = KEY.removeprefix("sk-ant-api03-")


def chunked(text: str, size: int, sep: str) -> str:
    return sep.join(text[i:i + size] for i in range(0, len(text), size))


FORMS = {
    "percent-encoded": urllib.parse.quote(KEY, safe=""),
    "percent-encoded every byte": "".join(f"%{b:02X}" for b in KEY.encode()),
    "percent-encoded twice": urllib.parse.quote(urllib.parse.quote(KEY, safe=""), safe=""),
    "in a query string": f"?key={urllib.parse.quote(KEY, safe='')}&x=1",
    "dot-chunked": chunked(KEY, 4, "."),
    "dot-chunked body": chunked(BODY, 6, "."),
    "colon-hex": ":".join(f"{b:02x}" for b in KEY.encode()),
    "hex, upper-case": KEY.encode().hex().upper(),
    "hex of the body": BODY.encode().hex(),
    "spaced": " ".join(KEY),
    "dash-chunked": chunked(BODY, 5, "-"),
    "line-broken": chunked(KEY, 10, "\n"),
    "base64": base64.b64encode(KEY.encode()).decode(),
    "base64 inside user:key": base64.b64encode(f"user:{KEY}".encode()).decode(),
    "base64 of the body, offset 2": base64.b64encode(f"xy{BODY}".encode()).decode(),
    "URL-safe base64": base64.urlsafe_b64encode(f"x{KEY}?".encode()).decode(),
    "base64, dot-chunked": chunked(base64.b64encode(KEY.encode()).decode(), 8, "."),
}


def leaked(text: str) -> list[str]:
    """The key's forms (and their 12-character pieces) still readable in ``text``."""
    found = []
    for name, form in FORMS.items():
        compact = form.replace(".", "").replace(":", "").replace(" ", "").replace("\n", "")
        for i in range(0, max(1, len(compact) - 16), 4):
            if compact[i:i + 16].lower() in text.replace(".", "").replace(":", "").replace(" ", "").lower():
                found.append(name)
                break
    return found


@pytest.mark.parametrize("form", list(FORMS.values()), ids=list(FORMS))
def test_a_transformed_key_is_redacted(form):
    text = f"Upstream said: invalid credentials ({form}) — check your settings."
    out = redact(text, [KEY])
    assert "[redacted]" in out
    assert leaked(out) == []
    assert out.startswith("Upstream said: invalid credentials (") and out.endswith(") — check your settings.")


@pytest.mark.parametrize("form", list(FORMS.values()), ids=list(FORMS))
def test_a_remembered_key_is_redacted_in_every_form_without_being_passed(form, monkeypatch):
    from chatplatform import redaction

    monkeypatch.setattr(redaction, "_known", {KEY})
    assert "[redacted]" in redact(f"error: {form}")
    assert leaked(redact(f"error: {form}")) == []


ORDINARY = [
    "model 'claude-3-5-sonnet' not found (HTTP 404); retry after 12.5 s",
    "The request to https://api.example.com/v1/chat?q=a%20b%2Fc failed: 429 at 10.0.0.1:8080",
    "mac aa:bb:cc:dd:ee:ff:00:11:22:33:44:55, build 2026.12.07.0304, id 4f6c1c1e-8a8b-4a8e-9a4c-3b9a1f2f1d11",
    "d e a r   u s e r ,   t h e   s e r v i c e   i s   d o w n ;  base64 aGVsbG8gd29ybGQ=",
    "Q7fL is short; so is 6YpA3 — pieces of a key under 12 characters are not the key",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text):
    assert redact(text, [KEY]) == text


# --- end to end: an upstream echoing the key transformed -------------------------------------
@pytest.fixture
def keyed_upstream(monkeypatch):
    from tests.fakes.openai_server import FakeOpenAI

    fake = FakeOpenAI(api_key=KEY).start()
    monkeypatch.setenv("FORMS_OPENAI_KEY", KEY)
    yield fake
    fake.stop()


ECHOED = ["percent-encoded every byte", "dot-chunked", "colon-hex", "spaced", "base64 inside user:key"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("form", ECHOED)
def test_an_upstream_echoing_a_transformed_key_leaks_it_nowhere(users, workspaces, keyed_upstream, converse,
                                                                api_for, client, form):
    """The run's error as a workspace admin (REST) and staff (the Django admin's run page)
    see it, the stored message error and the events."""
    from agents.models import Provider
    from chat.models import Message
    from tests.conftest import make_thread
    from tests.fakes.openai_server import Failure

    provider = Provider.objects.create(slug="forms", name="Forms", kind="openai_compatible",
                                       base_url=keyed_upstream.base_url, api_key_env="FORMS_OPENAI_KEY",
                                       default_model="fake-model")
    keyed_upstream.script(Failure(status=401, message=f"Invalid API key: {FORMS[form]}"))
    thread = make_thread(users["alice"], workspaces["demo"], provider)
    run, events = converse(thread, users["alice"], "hello")
    assert events[-1]["type"] == "run.failed"
    assert "[redacted]" in str(run.error), run.error
    message = Message.objects.filter(thread=thread, role="assistant").last()
    shown = api_for(users["admin"]).get(f"/api/v1/runs/{run.pk}/")
    assert shown.status_code == 200
    staff = users["admin"]
    staff.is_staff = staff.is_superuser = True
    staff.save(update_fields=["is_staff", "is_superuser"])
    client.force_login(staff)
    page = client.get(f"/admin/agents/run/{run.pk}/change/")
    assert page.status_code == 200
    for text in (str(events), str(run.error), str(message.error), shown.content.decode(), page.content.decode()):
        assert leaked(text) == [], text[:2000]
