// After a hole in a run's events the page streams on from the stored text, which can run
// ahead of the first event after the hole: the worker kept saving its text while Redis — and
// so its events — were away (those tokens would be shown twice until the run's end). The deltas
// that follow are held while they repeat the stored text's tail and only what goes past it is
// shown. When they start inside the stored text, PROBE characters place them there; when they
// start fewer than PROBE characters before its end, the longest end of the stored text they
// begin with is the repeat. When they are not in the stored text at all (it was behind) or
// they part from it, they are shown as they come.
// No DOM here: tests/js runs it in node.
export const PROBE = 24;

export class StoredOverlap {
  constructor(stored) {
    this.stored = stored;
    this.held = "";
  }

  get done() { return this.stored === null; }

  // The part of ``delta`` to show now ("" while it repeats the stored text).
  take(delta) {
    if (this.done) return delta;
    this.held += delta;
    if (this.held.length < PROBE) return "";
    const held = this.held, stored = this.stored;
    const at = stored.lastIndexOf(held.slice(0, PROBE));
    if (at >= 0) {
      const tail = stored.slice(at);
      if (tail.startsWith(held)) return "";  // still inside the stored text
      return this.release(held.startsWith(tail) ? held.slice(tail.length) : held);
    }
    // Started less than PROBE characters before the stored text's end?
    for (let k = Math.min(PROBE - 1, stored.length); k > 0; k--) {
      if (stored.endsWith(held.slice(0, k))) return this.release(held.slice(k));
    }
    return this.release(held);
  }

  release(text) {
    this.stored = null;
    this.held = "";
    return text;
  }
}
