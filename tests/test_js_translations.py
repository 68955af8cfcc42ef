"""The page scripts' catalogue: every string the JavaScript marks (``gettext``, ``ngettext``,
``pgettext`` from ``templates/static/chat/app/i18n.js``) has a German and a Simplified Chinese
translation in ``locale/<lang>/LC_MESSAGES/djangojs.po`` with the same ``%(name)s`` placeholders.

The msgids are read from the scripts here, as ``makemessages -d djangojs`` reads them (string
literals only: a call with anything else would never reach the catalogue, so it fails too). A
string added without its translations fails this test until the .po files are brought up to
date (``manage.py makemessages -d djangojs -l de -l zh_Hans …``, then translate).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STATIC = REPO / "templates" / "static"
LANGUAGES = {"de": "nplurals=2; plural=(n != 1);", "zh_Hans": "nplurals=1; plural=0;"}

STRING = r'"(?:[^"\\\n]|\\.)*"'
CALL = re.compile(r"\b(gettext|ngettext|pgettext)\(")
ARGS = {
    "gettext": re.compile(rf"\s*({STRING})\s*\)"),
    "ngettext": re.compile(rf"\s*({STRING})\s*,\s*({STRING})\s*,"),
    "pgettext": re.compile(rf"\s*({STRING})\s*,\s*({STRING})\s*\)"),
}
PLACEHOLDER = re.compile(r"%\(\w+\)s")


def _scripts() -> list[Path]:
    return sorted(p for p in STATIC.rglob("*.js") if "vendor" not in p.relative_to(STATIC).parts)


def marked_strings() -> tuple[dict[tuple[str | None, str], str | None], list[str]]:
    """({(context, msgid): msgid_plural or None}, ["file:line: call not made of literals", …])."""
    found: dict[tuple[str | None, str], str | None] = {}
    bad: list[str] = []
    for path in _scripts():
        text = path.read_text(encoding="utf-8")
        for call in CALL.finditer(text):
            name = call.group(1)
            line_start = text.rfind("\n", 0, call.start()) + 1
            if text[line_start:call.start()].lstrip().startswith("//") or text[call.start() - 1] == ".":
                continue  # a comment, or i18n.js calling Django's catalogue (c.gettext(msgid))
            if text[:call.start()].rstrip().endswith("function"):
                continue  # i18n.js's own definitions
            match = ARGS[name].match(text, call.end())
            if not match:
                line = text.count("\n", 0, call.start()) + 1
                bad.append(f"{path.relative_to(REPO)}:{line}: {name}(…) without string literals")
                continue
            values = [ast.literal_eval(s) for s in match.groups()]
            if name == "gettext":
                found[(None, values[0])] = None
            elif name == "ngettext":
                found[(None, values[0])] = values[1]
            else:
                found[(values[0], values[1])] = None
    return found, bad


def read_po(path: Path) -> tuple[dict[str, str], dict[tuple[str | None, str], dict]]:
    """(header fields, {(msgctxt, msgid): {"plural": str|None, "msgstr": [forms], "fuzzy": bool}})."""
    entries: dict[tuple[str | None, str], dict] = {}
    header: dict[str, str] = {}
    for block in path.read_text(encoding="utf-8").strip().split("\n\n"):
        fields: dict[str, str] = {}
        fuzzy = False
        current = None
        for line in block.splitlines():
            if line.startswith("#~"):
                current = None  # an obsolete entry: not in the catalogue
                fields = {}
                break
            if line.startswith("#,"):
                fuzzy = fuzzy or "fuzzy" in line
                continue
            if line.startswith("#") or not line.strip():
                continue
            match = re.match(r"^(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?) (\".*\")$", line)
            if match:
                current = match.group(1)
                fields[current] = ast.literal_eval(match.group(2))
            elif current:
                fields[current] += ast.literal_eval(line)
        if "msgid" not in fields:
            continue
        if fields["msgid"] == "":
            header = dict(row.split(": ", 1) for row in fields.get("msgstr", "").splitlines() if ": " in row)
            continue
        forms = [fields[k] for k in sorted(k for k in fields if k.startswith("msgstr"))]
        entries[(fields.get("msgctxt"), fields["msgid"])] = {
            "plural": fields.get("msgid_plural"), "msgstr": forms, "fuzzy": fuzzy}
    return header, entries


def test_every_marked_string_is_a_literal_and_there_are_many():
    found, bad = marked_strings()
    assert not bad, bad
    # The chat app, inbox, knowledge, usage and API-key scripts mark their words (a regex that
    # stopped matching would let everything pass).
    assert len(found) > 200, len(found)
    assert (None, "Approve") in found and ("knowledge item type", "note") in found
    assert found[(None, "%(count)s token")] == "%(count)s tokens"


@pytest.mark.parametrize("lang", sorted(LANGUAGES))
def test_every_js_string_is_translated(lang):
    path = REPO / "locale" / lang / "LC_MESSAGES" / "djangojs.po"
    assert path.exists(), f"{path.relative_to(REPO)} is missing"
    header, entries = read_po(path)
    assert header.get("Plural-Forms") == LANGUAGES[lang], header
    assert header.get("Content-Type") == "text/plain; charset=UTF-8", header
    found, _ = marked_strings()
    problems = []
    for (context, msgid), plural in sorted(found.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
        label = f"{context}|{msgid}" if context else msgid
        entry = entries.get((context, msgid))
        if entry is None:
            problems.append(f"not in the catalogue: {label!r}")
            continue
        forms = entry["msgstr"]
        if entry["fuzzy"] or not forms or not all(forms):
            problems.append(f"untranslated or fuzzy: {label!r}")
            continue
        if (plural is None) != (entry["plural"] is None):
            problems.append(f"plural forms differ from the script's call: {label!r}")
            continue
        wanted = set(PLACEHOLDER.findall(msgid)) | set(PLACEHOLDER.findall(plural or ""))
        expected_forms = int(LANGUAGES[lang].split(";")[0].split("=")[1]) if plural else 1
        if len(forms) != expected_forms:
            problems.append(f"{len(forms)} forms instead of {expected_forms}: {label!r}")
        for form in forms:
            # Every placeholder the code fills must appear (a plural form may drop the count
            # only where the language's singular says "one" in words — none here do).
            if set(PLACEHOLDER.findall(form)) != wanted:
                problems.append(f"placeholders differ: {label!r} → {form!r}")
    assert not problems, "\n".join(problems)
