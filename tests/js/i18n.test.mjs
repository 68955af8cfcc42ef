// templates/static/chat/app/i18n.js in node: the words as written without Django's catalogue,
// the catalogue's when the page loaded it (globalThis.django, as /jsi18n/ defines it), and the
// Intl formats in the page's language (<html lang>).
// Run: node --test tests/js (tests/test_js.py runs it under pytest).
import { test } from "node:test";
import assert from "node:assert/strict";

import { gettext, ngettext, pgettext, interpolate, pageLanguage, formatNumber, formatUnit, formatList }
  from "../../templates/static/chat/app/i18n.js";

function withPage(lang, catalogue, fn) {
  globalThis.document = {documentElement: {lang}};
  if (catalogue) globalThis.django = catalogue;
  try { fn(); } finally { delete globalThis.document; delete globalThis.django; }
}

// The part of Django's JavaScript catalogue i18n.js uses (django/views/templates/i18n_catalog.js).
const german = {
  gettext: (id) => ({"Approve": "Freigeben"})[id] || id,
  ngettext: (s, p, n) => (n === 1 ? "%(count)s Anfrage wartet auf Sie" : "%(count)s Anfragen warten auf Sie"),
  pgettext: (ctx, id) => (ctx === "knowledge item type" && id === "note" ? "Notiz" : id),
  interpolate: (fmt, obj, named) => (named ? fmt.replace(/%\(\s*([^)]+)\s*\)s/g, (m) => String(obj[m.slice(2, -2)]))
    : fmt.replace(/%s/g, () => String(obj.shift()))),
};

test("without a catalogue the words stay as written, plurals by count", () => {
  assert.equal(gettext("Approve"), "Approve");
  assert.equal(pgettext("knowledge item type", "note"), "note");
  assert.equal(ngettext("%(count)s token", "%(count)s tokens", 1), "%(count)s token");
  assert.equal(ngettext("%(count)s token", "%(count)s tokens", 0), "%(count)s tokens");
  assert.equal(interpolate("Revoke %(name)s?", {name: "ci"}, true), "Revoke ci?");
  assert.equal(interpolate("%s of %s", [1, 2]), "1 of 2");
  assert.equal(pageLanguage(), undefined);  // no document: the runtime's own locale
});

test("with Django's catalogue its translations are used", () => {
  withPage("de", german, () => {
    assert.equal(gettext("Approve"), "Freigeben");
    assert.equal(pgettext("knowledge item type", "note"), "Notiz");
    const fmt = ngettext("%(count)s request waits for you", "%(count)s requests wait for you", 3);
    assert.equal(interpolate(fmt, {count: formatNumber(3)}, true), "3 Anfragen warten auf Sie");
  });
});

test("numbers, units and lists follow <html lang>", () => {
  withPage("de", null, () => {
    assert.equal(pageLanguage(), "de");
    assert.equal(formatNumber(32001), "32.001");
    assert.equal(formatUnit(45, "second"), "45 Sek.");
    assert.equal(formatList(["alice", "bob"]), "alice und bob");
  });
  withPage("zh-hans", null, () => {  // Django's code for Simplified Chinese
    assert.equal(pageLanguage(), "zh-Hans");
    assert.equal(formatUnit(60, "minute"), "60分钟");
  });
  withPage("en-us", null, () => {
    assert.equal(formatNumber(32001), "32,001");
    assert.equal(formatUnit(60, "minute"), "60 min");  // the inbox's "expires in 60 min"
    assert.equal(formatList([".md", ".pdf"], "disjunction"), ".md or .pdf");
  });
  withPage("not a language tag!", null, () => assert.equal(pageLanguage(), undefined));
});
