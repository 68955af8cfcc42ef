// The text held after a hole in a run's events (templates/static/chat/app/stored-overlap.js):
// deltas that repeat the stored text's tail are dropped, what goes past it is shown once.
// Run: node --test tests/js (tests/test_js.py runs it under pytest).
import { test } from "node:test";
import assert from "node:assert/strict";

import { PROBE, StoredOverlap } from "../../templates/static/chat/app/stored-overlap.js";

const words = (from, to) => Array.from({length: to - from}, (_, i) => `word${from + i} `).join("");

// Feeds ``deltas`` one by one and returns everything shown.
function shown(stored, deltas) {
  const o = new StoredOverlap(stored);
  return deltas.map((d) => o.take(d)).join("");
}

test("deltas inside the stored text are held, and only what passes its end is shown", () => {
  const stored = words(0, 30);
  const after = words(20, 40).match(/word\d+ /g);  // the events after the hole repeat 10 words
  assert.equal(shown(stored, after), words(30, 40));
});

test("a repeat shorter than the probe is still dropped (a fresh-clone CI run showed word19 twice)", () => {
  const stored = words(0, 20);  // ends "word19 ": 7 characters, fewer than PROBE
  assert.ok("word19 ".length < PROBE);
  assert.equal(shown(stored, words(19, 30).match(/word\d+ /g)), words(20, 30));
});

test("a repeat of a single token's end is dropped, nothing more", () => {
  const stored = words(0, 20) + "wo";  // saved mid-token
  assert.equal(shown(stored, ["wo", "rd20 ", ...words(21, 30).match(/word\d+ /g)]), "rd20 " + words(21, 30));
});

test("stored text behind the events: nothing is dropped", () => {
  const stored = words(0, 10);
  const after = words(12, 30).match(/word\d+ /g);  // two words lost in the hole
  assert.equal(shown(stored, after), words(12, 30));
});

test("deltas that part from the stored text are shown whole", () => {
  const stored = words(0, 10) + "and then";
  assert.equal(shown(stored, ["word9 and now ", "something else entirely"]),
               "word9 and now something else entirely");
});

test("nothing is shown until the probe's length is held; later deltas pass straight through", () => {
  const o = new StoredOverlap(words(0, 5));
  assert.equal(o.take("word4 "), "");
  assert.equal(o.done, false);
  assert.equal(o.take("word5 word6 word7 word8 "), "word5 word6 word7 word8 ");
  assert.equal(o.done, true);
  assert.equal(o.take("word9 "), "word9 ");
});
