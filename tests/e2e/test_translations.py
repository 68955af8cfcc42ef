"""The pages in German and Simplified Chinese, scanned for English a person would see, and a
right-to-left language laid out without overflow (one embedded platform, Chromium, 1280 and
390 px).

Pages: the chat landing, a chat with a finished run, Settings, Approvals. The browser's
language is the context's locale (Accept-Language). Each page's visible text is collected:
text nodes of rendered elements, ``placeholder``, ``title``, ``aria-label``, ``alt``, the
value of buttons, the options of visible selects — leaving out what people or models wrote
(message bodies, chat titles, code). A string is English UI when

* it equals a msgid (or a msgid's pattern with its placeholders) of the language's catalogues
  (``django.po`` and ``djangojs.po``) whose translation differs from it, or
* it holds at least two English function words ("the", "your", "to"…) — text no catalogue
  has yet (an unmarked string), or
* on a Chinese page, it holds a Latin-script word of three letters or more that is neither a
  name from the data (users, workspaces, providers, models, tools) nor a technical term kept in
  English (:data:`KEPT_IN_ENGLISH`) — the single English words the other two tests miss.

Each finding is reported with the page, language and width, and as *server-rendered* (it is in
the page's HTML as the server sent it: ``django.po``'s side) or *script-rendered* (the page
scripts wrote it: ``djangojs.po``'s side).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import flows
from .harness import Platform, started
from .test_browser import ARTIFACTS, STEP_MS

LOCALE = Path(__file__).resolve().parent.parent.parent / "locale"
LANGUAGES = {"de": ("de-DE", "de"), "zh-hans": ("zh-CN", "zh_Hans")}  # code: (browser locale, locale dir)
WIDTHS = (1280, 390)
FUNCTION_WORDS = {"the", "and", "to", "of", "your", "you", "this", "is", "are", "for", "with", "not", "or",
                  "it", "be", "can", "will", "from", "yet", "has", "have", "was", "an", "what", "which", "here",
                  "there", "no", "any", "only", "when", "its", "their", "them", "at", "on", "by", "as", "if"}
# Names and terms a Chinese page shows in Latin script on purpose.
KEPT_IN_ENGLISH = {"chatplatform", "api", "apis", "mcp", "openai", "rest", "url", "ctrl", "shift", "esc", "enter",
                   "markdown", "pdf", "word", "docx", "html", "json", "csv", "token", "tokens", "bearer",
                   "authorization", "key", "vision", "slug", "http", "https", "usd", "eur", "svg", "mermaid"}
# What people, models and admins wrote, and code: not the platform's words. A tool's name and
# description (the assistants form's checkboxes) are the tool's own, written for the model — an
# MCP server's in its own words.
CONTENT = ("article.msg .body, .t-title, #thread-title, code, pre, kbd, .ws-instructions, textarea, "
           ".tool .tool-args, .tool .tool-result, .tool-summary, .cite-preview, .citations, .tool-check")

VISIBLE_STRINGS = """(content) => {
  const out = [];
  const add = (text, how) => { text = (text || "").replace(/\\s+/g, " ").trim(); if (text) out.push([text, how]); };
  // Text marked as another language (a language's own name in the language menu) is meant so.
  const page = document.documentElement.lang;
  const foreign = (el) => { const marked = el.closest("[lang]"); return marked && marked.lang !== page; };
  const shown = (el) => el && el.checkVisibility({visibilityProperty: true, opacityProperty: false});
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || el.closest(content) || el.closest("script, style, template, option") || foreign(el)) continue;
    if (shown(el)) add(n.nodeValue, "text");
  }
  for (const el of document.querySelectorAll("[placeholder], [title], [aria-label], [alt], button[value], input[type=submit], input[type=button]")) {
    if (el.closest(content)) continue;
    const visible = shown(el) || (el.matches("summary, [aria-label]") && shown(el.parentElement));
    if (!visible) continue;
    for (const attr of ["placeholder", "title", "aria-label", "alt"]) if (el.hasAttribute(attr)) add(el.getAttribute(attr), attr);
    if (el.matches("input[type=submit], input[type=button]")) add(el.value, "value");
  }
  for (const select of document.querySelectorAll("select")) {
    if (!shown(select) || select.closest(content)) continue;
    for (const option of select.options) if (!foreign(option)) add(option.text, "option");
  }
  return out;
}"""


def catalogue(directory: str) -> tuple[set[str], list[re.Pattern]]:
    """The English msgids of a language's catalogues that have a translation of their own: the
    plain ones, and the ones with placeholders as whole-string patterns."""
    from tests.i18n.test_catalogues import po_entries

    plain, patterns = set(), []
    for po in sorted((LOCALE / directory / "LC_MESSAGES").glob("*.po")):
        for key, value in po_entries(po).items():
            msgids = list(key) if isinstance(key, tuple) else [key]
            forms = value if isinstance(value, list) else [value]
            for msgid in msgids:
                msgid = msgid.split("\x04")[-1]
                if not any(forms) or all(f == msgid for f in forms):
                    continue  # untranslated or the same in both languages (e.g. "URL")
                if re.search(r"%(\(\w+\))?[sdr]", msgid):
                    pattern = re.escape(msgid)
                    pattern = re.sub(r"%(\\\(\w+\\\))?[sdr]", ".+?", pattern)
                    patterns.append(re.compile(pattern))
                else:
                    plain.add(re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", msgid))).strip())
    return plain, patterns


@dataclass
class Scan:
    findings: dict[str, list[str]] = field(default_factory=lambda: {"server": [], "script": []})
    overflow: list[str] = field(default_factory=list)


def english(text: str, plain: set[str], patterns: list[re.Pattern], names: set[str] | None) -> str | None:
    """Why ``text`` is English UI, or None. ``names``: for a Chinese page, the Latin-script
    words it may show (data and :data:`KEPT_IN_ENGLISH`); None for a German one."""
    if text in plain:
        return "msgid"
    if any(p.fullmatch(text) for p in patterns):
        return "msgid pattern"
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", text)}
    if len(words & FUNCTION_WORDS) >= 2:
        return "English words"
    if names is not None:
        latin = {w.lower() for w in re.findall(r"(?<![\w.-])[A-Za-z]{3,}(?![\w.-])", text)}
        if latin - names:
            return "Latin words on a Chinese page"
    return None


def data_names(platform) -> set[str]:
    """The Latin-script words of the demo data a page may show: users, workspaces, providers,
    models and tools (they are names, not the platform's words)."""
    token = flows.login_token(platform, "alice")
    with flows.http(platform, token) as client:
        texts = ["alice bob carol dave admin", "search_knowledge"]
        listed = client.get("/api/v1/workspaces/").json()
        texts += [w["name"] + " " + w["slug"] for w in (listed["results"] if isinstance(listed, dict) else listed)]
        texts += [p["name"] + " " + p["slug"] for p in client.get("/api/v1/providers/").json()]
        for group in client.get("/api/v1/models/").json()["providers"]:
            texts += [group["name"], group["slug"], group["kind"]]
            texts += [m["name"] + " " + m["label"] for m in group["models"]]
    return {w.lower() for t in texts for w in re.findall(r"[A-Za-z]+", t)} | KEPT_IN_ENGLISH


@pytest.fixture(scope="module")
def platform():
    # Arabic is offered without a translation: its pages stay English, laid out right to left.
    yield from started(Platform("embedded", extra_env={"EXTRA_LANGUAGES": "ar"}))


@pytest.fixture(scope="module")
def pages(platform):
    """The paths to scan: the landing page, a chat whose run finished, Settings, Approvals."""
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token)
    flows.rest_turn(platform, token, thread_id)
    return {"landing": "/chat/", "thread": f"/chat/{thread_id}/", "settings": "/chat/settings/",
            "approvals": "/chat/approvals/"}


def _ready(page, name: str) -> None:
    """Wait until the page scripts have drawn what they draw on load."""
    if name == "thread":
        page.locator("article.msg.assistant .body").last.wait_for()
        page.wait_for_function("() => document.getElementById('conn')?.textContent.trim().length > 0")
    elif name == "settings":
        page.wait_for_selector("#api-key-list:not([hidden]), #api-key-empty:not([hidden])", state="attached")
    elif name == "approvals":
        page.wait_for_selector("#inbox-empty:not([hidden]), #inbox > *", state="attached")
    else:
        page.wait_for_selector("#model-picker-label")


@pytest.fixture(scope="module")
def scans(browser, platform, pages):
    """Every page in every language at both widths: the English found, and (Arabic, 390 px)
    what overflows."""
    scan = Scan()
    names = data_names(platform)
    server_html: dict[tuple[str, str], str] = {}
    for code, (locale, directory) in [*LANGUAGES.items(), ("ar", ("ar", "ar"))]:
        plain, patterns = catalogue(directory) if code != "ar" else (set(), [])
        session = flows.login_session(platform, "alice")
        context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=platform.base_url,
                                      locale=locale)
        context.set_default_timeout(STEP_MS)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
        # Console errors too (a CSP violation by the catalogue script would be one).
        page.on("console", lambda msg, errors=errors: errors.append(msg.text)
                if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
        try:
            flows.sign_in_page(page, platform)
            for width in WIDTHS if code != "ar" else (390,):
                page.set_viewport_size({"width": width, "height": 900})
                for name, path in pages.items():
                    page.goto(path)
                    _ready(page, name)
                    lang, direction = page.evaluate("() => [document.documentElement.lang, document.documentElement.dir]")
                    assert (lang, direction) == (code, "rtl" if code == "ar" else "ltr"), (name, code, lang, direction)
                    ARTIFACTS.mkdir(exist_ok=True)
                    page.screenshot(path=str(ARTIFACTS / f"translations-{code}-{width}-{name}.png"), full_page=True)
                    if code == "ar":
                        wide = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
                        if wide > 0:
                            scan.overflow.append(f"{name}: {wide} px wider than the window")
                        continue
                    if (code, name) not in server_html:
                        server_html[(code, name)] = html.unescape(
                            session.get(path, headers={"Accept-Language": locale}).text)
                    for text, how in page.evaluate(VISIBLE_STRINGS, CONTENT):
                        why = english(text, plain, patterns, names if code == "zh-hans" else None)
                        if why is None:
                            continue
                        side = "server" if text in re.sub(r"\s+", " ", server_html[(code, name)]) else "script"
                        finding = f"{code} {width}px {name} [{how}, {why}]: {text!r}"
                        if finding not in scan.findings[side]:
                            scan.findings[side].append(finding)
            assert not errors, errors
        finally:
            context.close()
        session.close()
    return scan


@pytest.mark.browser
def test_server_rendered_text_is_translated(scans):
    assert not scans.findings["server"], "English in the server-rendered pages:\n" + "\n".join(scans.findings["server"])


@pytest.mark.browser
def test_script_rendered_text_is_translated(scans):
    """The page scripts' strings: translated once chat/app/*.js marks them and djangojs.po has
    them (another change); until then this lists exactly which are still English."""
    assert not scans.findings["script"], "English written by the page scripts:\n" + "\n".join(scans.findings["script"])


@pytest.mark.browser
def test_right_to_left_pages_do_not_overflow_a_phone(scans):
    assert not scans.overflow, scans.overflow
