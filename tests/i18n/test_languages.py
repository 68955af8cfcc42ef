"""The language of pages and messages: the browser's (Accept-Language, the language cookie),
overridden by the person's choice in Settings; <html lang dir>; the JavaScript catalogue;
translated API errors, approval sentences and run failures."""

from __future__ import annotations

import re

import pytest
from django.test import override_settings
from django.utils import translation

from agents.approvals.policy import FALLBACK, ApprovalRule, waiting_text
from agents.models import ApprovalPolicy
from agents.presentation import error_for_viewer
from chat.models import UserPreferences
from chatplatform.locale import SESSION_KEY, language_from_scope
from tests.conftest import make_thread

pytestmark = pytest.mark.django_db

WITH_ARABIC = [("en", "English"), ("de", "Deutsch"), ("zh-hans", "简体中文"), ("ar", "العربية")]


def html_tag(response) -> str:
    return re.search(r"<html[^>]*>", response.content.decode()).group(0)


@pytest.mark.parametrize(("accept", "lang", "words"), [
    ("de-DE,de;q=0.9,en;q=0.5", "de", "Melden Sie sich an, um mit dem Assistenten Ihres Teams zu chatten."),
    ("zh-CN,zh;q=0.9", "zh-hans", "登录后即可与您团队的助手对话。"),
    ("fr-FR,fr;q=0.9", "en", "Sign in to chat with your team's assistant."),
])
def test_the_browser_language_picks_the_page_language(client, accept, lang, words):
    response = client.get("/accounts/login/", headers={"accept-language": accept})
    assert html_tag(response) == f'<html lang="{lang}" dir="ltr">'
    assert words in response.content.decode()
    assert response.headers["Content-Language"] == lang
    assert "Accept-Language" in response.headers["Vary"]


@override_settings(LANGUAGES=WITH_ARABIC)
def test_a_right_to_left_language_without_a_translation_only_turns_the_page(client):
    response = client.get("/accounts/login/", headers={"accept-language": "ar"})
    assert html_tag(response) == '<html lang="ar" dir="rtl">'
    assert "Sign in to chat with your team's assistant." in response.content.decode()  # no Arabic catalogue


def test_the_person_s_choice_wins_over_the_browser_and_is_kept(client, users):
    alice = users["alice"]
    client.force_login(alice)
    english = {"accept-language": "en"}
    response = client.post("/chat/settings/", {"language": "de"}, headers=english)
    assert response.status_code == 302 and response.cookies["django_language"].value == "de"
    assert UserPreferences.objects.get(user=alice).language == "de"
    client.cookies.pop("django_language")  # not the cookie: the session says so for this person
    page = client.get("/chat/settings/", headers=english)
    assert html_tag(page) == '<html lang="de" dir="ltr">' and "<h1>Einstellungen</h1>" in page.content.decode()
    assert re.search(r'<option value="de" lang="de" selected>Deutsch</option>', page.content.decode())
    assert "Bis zu 4.000 Zeichen." in page.content.decode()  # numbers follow the language

    # A new sign-in (another browser) finds the choice in the preferences.
    other = client_class()
    other.login(username="alice", password="pw-alice")
    assert other.session[SESSION_KEY] == "de"
    assert html_tag(other.get("/chat/", headers=english)) == '<html lang="de" dir="ltr">'

    # Back to the browser's language.
    response = client.post("/chat/settings/", {"language": ""}, headers=english)
    assert response.cookies["django_language"].value == ""  # deleted
    page = client.get("/chat/settings/", headers={"accept-language": "zh-CN"})
    assert html_tag(page) == '<html lang="zh-hans" dir="ltr">'
    assert "浏览器语言（当前为 简体中文）" in page.content.decode()


def client_class():
    from django.test import Client

    return Client()


def test_an_unknown_language_is_refused_in_the_request_s_language(client, users, api_for):
    client.force_login(users["alice"])
    page = client.post("/chat/settings/", {"language": "xx"}, headers={"accept-language": "de"})
    assert page.status_code == 400
    assert "„xx“ ist keine Sprache, die diese Website anbietet." in page.content.decode()
    response = api_for(users["alice"]).patch("/api/v1/me/preferences/", {"language": "tlh"}, format="json",
                                             headers={"accept-language": "zh-CN"})
    assert response.status_code == 400
    assert response.json()["error"] == {"code": "language_not_supported", "message": "本站不提供“tlh”语言。"}
    response = api_for(users["alice"]).patch("/api/v1/me/preferences/", {"language": "zh-hans"}, format="json")
    assert response.status_code == 200 and response.json()["language"] == "zh-hans"


def test_an_api_error_is_in_german_for_a_german_browser(api_for, users, workspaces, offline):
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    response = api_for(users["alice"]).post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "   "}, format="json",
                                            headers={"accept-language": "de"})
    assert response.status_code == 400
    assert response.json()["error"] == {"code": "empty_message", "message": "Die Nachricht ist leer."}
    english = api_for(users["alice"]).post(f"/api/v1/threads/{thread.pk}/runs/", {"content": "   "}, format="json")
    assert english.json()["error"]["message"] == "The message is empty."


def test_approval_sentences_and_run_failures_are_translated_where_they_are_read():
    rule = ApprovalRule(rule="Production write", policy_id=1, approver_kind=ApprovalPolicy.ApproverKind.WORKSPACE_ADMINS,
                        role="", approvals_needed=2, requester_counts=False, expires_s=3600)
    with translation.override("de"):
        assert waiting_text(rule, "alice") == \
            "Schreiben in Produktion: benötigt 2 Freigaben von zwei Arbeitsbereichs-Admins außer alice"
        assert waiting_text(FALLBACK, "bob") == "Freigabe: benötigt 1 Freigabe von bob oder ein Arbeitsbereichs-Admin"
        generic = error_for_viewer({"code": "rate_limited", "message": "429 from upstream"}, detailed=False)
        assert generic["message"] == ("Der KI-Anbieter begrenzt gerade die Anfragen. Versuchen Sie es in einer "
                                      "Minute erneut. (Fehlercode: rate_limited)")
    with translation.override("zh-hans"):
        assert waiting_text(rule, "alice") == "生产环境写入：需要除 alice 以外的两位工作区管理员的 2 项审批"
        stored = {"code": "not_started", "message": "No worker picked this run up; try again, or ask an admin to "
                                                    "check the workers and the broker."}
        assert error_for_viewer(stored, detailed=True)["message"] == \
            "没有工作进程接手此次运行。请重试，或请管理员检查工作进程和消息代理。"
        upstream = {"code": "upstream_error", "message": "HTTP 502 from api.example"}
        assert error_for_viewer(upstream, detailed=True) == upstream  # an admin sees upstream text as it is


def test_the_javascript_catalogue_is_served_cacheable_and_loaded_before_the_modules(client, users):
    response = client.get("/jsi18n/", headers={"accept-language": "de"})
    assert response.status_code == 200 and "javascript" in response["Content-Type"]
    body = response.content.decode()
    assert "django.gettext" in body and '"DECIMAL_SEPARATOR": ","' in body  # German formats too
    assert "max-age=86400" in response["Cache-Control"] and response.has_header("Last-Modified")
    client.force_login(users["alice"])
    page = client.get("/chat/").content.decode()
    catalogue, first_module = page.index('<script src="/jsi18n/"></script>'), page.index('type="module"')
    assert catalogue < first_module


@override_settings(LANGUAGES=WITH_ARABIC)
def test_a_websocket_speaks_the_language_of_its_session_cookie_or_browser(users):
    class Loaded:
        _session_cache = {SESSION_KEY: "zh-hans"}

    headers = [(b"accept-language", b"de-DE,de;q=0.9"), (b"cookie", b"csrftoken=x; django_language=ar")]
    assert language_from_scope({"headers": headers, "session": Loaded(), "user": users["alice"]}) == "zh-hans"
    assert language_from_scope({"headers": headers}) == "ar"
    assert language_from_scope({"headers": headers[:1]}) == "de"
    assert language_from_scope({"headers": [(b"accept-language", b"tlh")]}) == "en"


@override_settings(ROOT_URLCONF="tests.bad_input.test_server_error", DEBUG=False)
def test_the_503_page_and_json_are_in_the_browser_s_language():
    from django.test import Client

    client = Client(raise_request_exception=False)
    page = client.get("/page/broken/", headers={"accept-language": "de"})
    assert page.status_code == 503 and html_tag(page) == '<html lang="de" dir="ltr">'
    body = page.content.decode()
    assert "Diese Seite versucht es in 5 Sekunden von selbst erneut." in body
    assert "es ist nichts verloren gegangen" in body
    answer = client.get("/api/v1/broken/", headers={"accept-language": "zh-CN"})
    assert answer.json()["error"]["message"] == \
        "某个后端服务（数据库或消息代理）暂时无法访问；没有丢失任何内容——请几秒后重试。"
