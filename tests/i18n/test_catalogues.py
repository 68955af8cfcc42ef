"""The shipped translations (locale/<lang>/LC_MESSAGES/*.po) and the compiled .mo files the
platform reads agree, and every shipped language is complete with its placeholders intact.

The .mo files are committed (demo and test need no GNU gettext); a .po edited or merged without
``make messages`` leaves its .mo behind, and this fails naming the strings.
"""

from __future__ import annotations

import ast
import gettext
import re
from pathlib import Path

import pytest

LOCALE = Path(__file__).resolve().parent.parent.parent / "locale"
SHIPPED = ("de", "zh_Hans")
PO_FILES = sorted(LOCALE.glob("*/LC_MESSAGES/*.po"))
PLACEHOLDER = re.compile(r"%\(\w+\)[sdrfi]|%[sdrfi]|\{\w*\}")


def po_entries(path: Path) -> dict[str, str | list[str]]:
    """``{context\\x04msgid (\\x00 msgid_plural): msgstr or [msgstr[0], …]}`` of the .po's
    translated, non-fuzzy, non-obsolete entries, the keys as gettext's .mo catalogue has them."""
    out: dict = {}
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        lines = block.strip().splitlines()
        if any(line.startswith("#~") for line in lines) or any(
                line.startswith("#,") and "fuzzy" in line for line in lines):
            continue
        fields: dict[str, str] = {}
        current = None
        for line in lines:
            if line.startswith("#"):
                continue
            m = re.match(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?) (".*")$', line)
            if m:
                current = m.group(1)
                fields[current] = ast.literal_eval(m.group(2))
            elif line.startswith('"') and current:
                fields[current] += ast.literal_eval(line)
        if not fields.get("msgid"):
            continue  # the header
        key = fields["msgid"]
        if "msgctxt" in fields:
            key = f"{fields['msgctxt']}\x04{key}"
        if "msgid_plural" in fields:
            forms = [fields[k] for k in sorted(k for k in fields if k.startswith("msgstr["))]
            out[(key, fields["msgid_plural"])] = forms
        else:
            out[key] = fields.get("msgstr", "")
    return out


def mo_catalogue(path: Path) -> dict:
    with path.open("rb") as fh:
        return gettext.GNUTranslations(fh)._catalog


def test_there_are_catalogues_for_every_shipped_language():
    for language in SHIPPED:
        assert (LOCALE / language / "LC_MESSAGES" / "django.po").exists(), language


@pytest.mark.parametrize("po", PO_FILES, ids=lambda p: str(p.relative_to(LOCALE)))
def test_every_po_and_its_compiled_mo_agree(po):
    mo = po.with_suffix(".mo")
    assert mo.exists(), f"{mo.relative_to(LOCALE)} is missing: run `make messages`"
    compiled = {k: v for k, v in mo_catalogue(mo).items() if k != ""}
    wanted: dict = {}
    for key, value in po_entries(po).items():
        if isinstance(key, tuple):
            for n, form in enumerate(value):
                if form:
                    wanted[(key[0], n)] = form
        elif value:
            wanted[key] = value
    stale = sorted(str(k) for k in set(wanted) | set(compiled) if wanted.get(k) != compiled.get(k))
    assert not stale, f"{po.relative_to(LOCALE)} and its .mo disagree (run `make messages`): {stale[:10]}"


@pytest.mark.parametrize("po", [p for p in PO_FILES if p.parts[-3] in SHIPPED], ids=lambda p: str(p.relative_to(LOCALE)))
def test_shipped_languages_are_complete_with_their_placeholders(po):
    missing, broken = [], []
    for key, value in po_entries(po).items():
        msgids = list(key) if isinstance(key, tuple) else [key]
        forms = value if isinstance(value, list) else [value]
        if not all(forms):
            missing.append(msgids[0])
            continue
        wanted = sorted(PLACEHOLDER.findall(msgids[-1].split("\x04")[-1]))
        for form in forms:
            # A language with one plural form may leave out the count of the singular.
            if sorted(PLACEHOLDER.findall(form)) != wanted:
                broken.append((msgids[0], form))
    assert not missing, f"untranslated in {po.relative_to(LOCALE)}: {missing[:10]}"
    assert not broken, f"placeholders changed in {po.relative_to(LOCALE)}: {broken[:5]}"
