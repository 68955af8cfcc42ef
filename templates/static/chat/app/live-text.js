// Streamed Markdown. Deltas are appended to the text and drawn at most once per animation
// frame. Finished blocks (everything before the last blank line outside a code fence) are
// rendered once and kept; each frame re-renders only the open block at the end, so a frame
// costs the same on the 5,000th token as on the 50th. When the run ends the page draws the
// stored message in one piece, so the final HTML never depends on where blocks were cut.
import { renderInto } from "./markdown.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})/;

// The index just after the last blank line in text[from:] that is outside a fenced code
// block (``from`` is always outside one), or ``from`` when there is none.
export function stableBoundary(text, from) {
  let inFence = null, boundary = from, pos = from;
  while (pos < text.length) {
    const nl = text.indexOf("\n", pos);
    if (nl < 0) break;  // the last line is still being written
    const line = text.slice(pos, nl);
    const fence = FENCE.exec(line);
    if (fence) {
      if (!inFence) inFence = fence[1][0];
      else if (fence[1][0] === inFence) inFence = null;
    } else if (!inFence && line.trim() === "" && pos > from) {
      boundary = nl + 1;
    }
    pos = nl + 1;
  }
  return boundary;
}

export class LiveText {
  constructor(body) {
    this.body = body;
    this.pending = false;
    this.reset();
  }

  reset() {
    this.text = "";
    this.doneUpTo = 0;
    this.done = document.createElement("div");
    this.done.className = "md-done";
    this.tail = document.createElement("div");
    this.tail.className = "md-tail";
    this.body.replaceChildren(this.done, this.tail);
  }

  append(delta) {
    if (!this.text) performance.mark("chat:first-delta");
    this.text += delta;
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.draw();
    });
  }

  draw() {
    if (!this.body.contains(this.done)) this.body.replaceChildren(this.done, this.tail);
    const boundary = stableBoundary(this.text, this.doneUpTo);
    if (boundary > this.doneUpTo) {
      const block = document.createElement("div");
      renderInto(block, this.text.slice(this.doneUpTo, boundary));
      this.done.append(...block.childNodes);
      this.doneUpTo = boundary;
    }
    renderInto(this.tail, this.text.slice(this.doneUpTo), {artifacts: false});  // still being written
    this.body.dataset.renderedChars = String(this.text.length);
    performance.mark("chat:rendered");
  }
}
