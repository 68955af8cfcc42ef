// The thread's websocket: reconnects with backoff, drops repeated events by (run_id, seq),
// and resumes a run exactly after the last seq this page handled (run.resume).
import { gettext } from "./i18n.js";

export class ThreadStream {
  constructor({url, onEvent, onState}) {
    this.url = url;
    this.onEvent = onEvent;
    this.onState = onState;   // ("open" | "reconnecting" | "closed", detail)
    this.seen = new Map();    // run_id → last seq handled
    this.resumeRun = null;    // the run to pick up on (re)connect
    this.retry = 0;
    this.closedForGood = false;
    this.ws = null;
  }

  connect() {
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.onopen = () => {
      this.retry = 0;
      this.onState("open");
      if (this.resumeRun) this.resume(this.resumeRun);
    };
    ws.onmessage = (m) => {
      let ev;
      try { ev = JSON.parse(m.data); } catch (e) { console.error("bad event", e); return; }
      this.onEvent(ev);
    };
    ws.onclose = (e) => {
      if (e.code === 4403 || e.code === 4404) { this.closedForGood = true; this.onState("closed", gettext("no access to this chat")); return; }
      if (this.closedForGood) return;
      // Jittered (0.5–1.5 ×): a web process that lost Redis closes every socket at once.
      const wait = Math.min(10000, 500 * 2 ** this.retry++) * (0.5 + Math.random());
      this.onState("reconnecting");
      setTimeout(() => this.connect(), wait);
    };
  }

  // True when the event is new for this page (and records it); replays are dropped.
  accept(ev) {
    if (!ev.run_id || !ev.seq) return true;
    if ((this.seen.get(ev.run_id) || 0) >= ev.seq) return false;
    this.seen.set(ev.run_id, ev.seq);
    return true;
  }

  follow(runId, fromStart = false) {
    this.resumeRun = runId;
    if (fromStart) this.seen.set(runId, 0);
  }

  resume(runId) {
    this.send({type: "run.resume", run_id: runId, after_seq: this.seen.get(runId) || 0});
  }

  get open() { return !!this.ws && this.ws.readyState === WebSocket.OPEN; }

  send(frame) {
    if (!this.open) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }
}
