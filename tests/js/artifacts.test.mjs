// Which code blocks of an answer get a Preview (templates/static/chat/app/artifacts.js codeKind):
// the fence's language, or an unlabelled / xml block that is an <svg> element.
// Run: node --test tests/js (tests/test_js.py runs it under pytest).
import { test } from "node:test";
import assert from "node:assert/strict";

import { codeKind } from "../../templates/static/chat/app/artifacts.js";

test("the fence's language names the kind, in any case", () => {
  assert.equal(codeKind("html", "<p>x</p>"), "html");
  assert.equal(codeKind("HTM", ""), "html");
  assert.equal(codeKind("xhtml", ""), "html");
  assert.equal(codeKind("svg", "<svg></svg>"), "svg");
  assert.equal(codeKind("mermaid", "graph TD; A-->B"), "mermaid");
  assert.equal(codeKind("mmd", "graph TD; A-->B"), "mermaid");
});

test("an unlabelled or xml block is SVG only when it is an <svg> element", () => {
  assert.equal(codeKind(undefined, "<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>"), "svg");
  assert.equal(codeKind("xml", "<?xml version=\"1.0\"?>\n<!-- a badge -->\n<svg width=\"1\"/>"), "svg");
  assert.equal(codeKind("xml", "<note><to>Tove</to></note>"), null);
  assert.equal(codeKind("", "<svgfoo/>"), null);
  assert.equal(codeKind("", "text mentioning <svg> later"), null);
});

test("other languages and look-alikes get none", () => {
  for (const lang of ["python", "javascript", "css", "markdown", "toString", "__proto__", "constructor"]) {
    assert.equal(codeKind(lang, "<svg></svg>"), null, lang);
  }
});
