// The composer's copy of the {{variable}} grammar (templates/static/chat/app/prompt-vars.js),
// checked against the same cases as the server's (tests/prompts/test_variables.py).
// Run: node --test tests/js (tests/test_js.py runs it under pytest).
import { test } from "node:test";
import assert from "node:assert/strict";

import { promptFill, promptMatches, promptVariables } from "../../templates/static/chat/app/prompt-vars.js";

test("variables in order with defaults and trimmed names", () => {
  const body = "Summarize {{ text }} in a {{tone|friendly}} tone for {{target language | German }}; again {{tone}}.";
  assert.deepEqual(promptVariables(body), [
    {name: "text", default: null}, {name: "tone", default: "friendly"}, {name: "target language", default: "German"}]);
});

test("things between braces that are not variables stay text", () => {
  for (const body of ["{{<script>}}", "{{}}", "{{ 1st }}", "{{a{b}}", "{{ x | {y} }}", "{ {x} }"]) {
    assert.deepEqual(promptVariables(body), [], body);
    assert.equal(promptFill(body, {x: "X"}), body);
  }
});

test("a later default fills a name first used without one", () => {
  assert.deepEqual(promptVariables("{{tone}} … {{tone|dry}}"), [{name: "tone", default: "dry"}]);
  assert.deepEqual(promptVariables("{{x|}}"), [{name: "x", default: ""}]);
});

test("fill uses values then defaults and never expands twice", () => {
  const body = "Hi {{name}}, be {{tone|friendly}}; {{missing}} stays.";
  assert.equal(promptFill(body, {name: "{{tone}}"}), "Hi {{tone}}, be friendly; {{missing}} stays.");
  assert.equal(promptFill(body, {name: "Ann", tone: "", missing: "ok"}), "Hi Ann, be ; ok stays.");
  assert.equal(promptFill("$& {{v}}", {v: "$1 $&"}), "$& $1 $&");  // replacement patterns are not special
});

test("the menu puts command prefixes first, then command and title matches", () => {
  const prompts = [{command: "translate", title: "Translate"}, {command: "summarize", title: "Summary"},
                   {command: "bug", title: "Summarize a bug"}, {command: "resummarize", title: "Again"}];
  assert.deepEqual(promptMatches(prompts, "sum").map((p) => p.command), ["summarize", "resummarize", "bug"]);
  assert.deepEqual(promptMatches(prompts, "").map((p) => p.command), ["bug", "resummarize", "summarize", "translate"]);
  assert.deepEqual(promptMatches(prompts, "zzz"), []);
});
