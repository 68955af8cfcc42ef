// The composer: limits are checked in bytes and characters before sending, a counter
// appears near them, and the text stays in the box on every error until the server has
// accepted the message (run.started for it).
import { el } from "./dom.js";
import { formatNumber, formatUnit, gettext, interpolate } from "./i18n.js";

const encoder = new TextEncoder();
const FRAME_OVERHEAD = 200;  // the rest of the message.send frame: type and options

export function measure(text, {maxChars, maxBytes}) {
  const chars = Array.from(text).length;  // code points, as the server counts
  const bytes = encoder.encode(JSON.stringify(text)).length + FRAME_OVERHEAD;
  const over = chars > maxChars || bytes > maxBytes;
  const near = chars > maxChars * 0.8 || bytes > maxBytes * 0.8;
  return {chars, bytes, over, near};
}

function kb(n) { return formatUnit(n / 1024, "kilobyte", {maximumFractionDigits: n < 10240 ? 1 : 0}); }

export class Composer {
  constructor({form, input, sendBtn, stopBtn, counter, limits, send, stop, attachments = null}) {
    Object.assign(this, {form, input, sendBtn, stopBtn, counter, limits, attachments});
    this.pending = null;   // text sent, not yet accepted
    this.running = false;
    form.addEventListener("submit", (e) => { e.preventDefault(); this.submit(send); });
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); this.submit(send); }
    });
    input.addEventListener("input", () => this.update());
    stopBtn.addEventListener("click", stop);
    this.update();
  }

  update() {
    const m = measure(this.input.value, this.limits);
    this.noteKind = "";  // a note said (say) is replaced by what the text calls for
    this.counter.hidden = !m.near;
    this.counter.classList.toggle("over", m.over);
    if (m.over) {
      const extraChars = m.chars - this.limits.maxChars;
      this.counter.textContent = extraChars > 0
        ? interpolate(gettext("Too long to send: %(count)s / %(max)s characters — shorten it or save it to the knowledge base and ask about it."),
                      {count: formatNumber(m.chars), max: formatNumber(this.limits.maxChars)}, true)
        : interpolate(gettext("Too long to send: %(size)s / %(max)s — shorten it or save it to the knowledge base and ask about it."),
                      {size: kb(m.bytes), max: kb(this.limits.maxBytes)}, true);
    } else if (m.near) {
      this.counter.textContent = interpolate(gettext("%(count)s / %(max)s characters · %(size)s / %(max_size)s"),
        {count: formatNumber(m.chars), max: formatNumber(this.limits.maxChars), size: kb(m.bytes), max_size: kb(this.limits.maxBytes)}, true);
    }
    this.sendBtn.disabled = this.running || m.over || this.pending !== null
      || (this.attachments !== null && this.attachments.uploading());
    return m;
  }

  submit(send) {
    const text = this.input.value;
    const files = this.attachments;
    if ((!text.trim() && !(files && files.count())) || this.running || this.pending !== null) return;
    if (this.update().over) { this.input.focus(); return; }
    if (files && files.uploading()) { this.say(gettext("Wait until the files have uploaded, then send."), "uploading"); return; }
    if (files && files.count() !== files.sendable()) {
      this.say(gettext("Remove the files that could not be attached (×), then send."), "attach_failed");
      return;
    }
    if (!send(text)) {
      this.say(gettext("Not connected — your message is still here; it can be sent once the connection is back."), "not_connected");
      return;
    }
    this.pending = text;
    this.input.readOnly = true;
    this.update();
  }

  // The server accepted a message: clear the box if it is the one we sent. Returns the text
  // sent (null when nothing was pending).
  accepted() {
    const sent = this.pending;
    if (this.pending !== null && this.input.value === this.pending) this.input.value = "";
    if (this.pending !== null && this.attachments) this.attachments.accepted();
    this.pending = null;
    this.input.readOnly = false;
    this.update();
    return sent;
  }

  // The server refused the send: the text stays, editable, with the reason (``kind``: the
  // error's code, for clearNote; no ``message``: the page says why elsewhere, e.g. the budget
  // banner). The note is said after update(), which would otherwise hide it at once.
  rejected(message, kind = "") {
    if (this.pending === null) return;
    this.pending = null;
    this.input.readOnly = false;
    this.update();
    if (message) this.say(message, kind);
    this.input.focus();
  }

  say(message, kind = "") {
    this.noteKind = kind;
    this.counter.hidden = false;
    this.counter.classList.add("over");
    this.counter.textContent = message;
  }

  // The condition a note of this kind spoke of is over (the socket is back, the service
  // answers again): the counter goes back to what the text in the box calls for.
  clearNote(kind) {
    if (!this.noteKind || this.noteKind !== kind) return;
    this.noteKind = "";
    this.update();
  }

  setRunning(on, {canStop = on} = {}) {
    this.running = on;
    this.stopBtn.hidden = !canStop;
    this.update();
  }
}

export function counterElement() {
  const c = el("div", "composer-counter");
  c.id = "composer-counter";
  c.setAttribute("aria-live", "polite");
  c.hidden = true;
  return c;
}
