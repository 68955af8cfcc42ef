// The thread page's live-run state machine (templates/static/chat/app/live-run.js) in node,
// without a browser: the real ThreadStream (its replay filter and run.resume frames) over a
// fake socket, a scripted thread view, a recording composer and a manual clock.
// Run: node --test tests/js (tests/test_js.py runs it under pytest).
import { test } from "node:test";
import assert from "node:assert/strict";

import { createLiveRun, QUIET_S, PROBE_S, QUEUED_GRACE_MS, SETTLE_AGAIN_MS, RECOVERY_MS }
  from "../../templates/static/chat/app/live-run.js";
import { ThreadStream } from "../../templates/static/chat/app/stream.js";

globalThis.WebSocket ??= {OPEN: 1};  // ThreadStream.open compares readyState with it

// An element with a text, a class list and children found by class (".meta", ".body").
function element(className = "", text = "") {
  const el = {
    textContent: text, className, children: {},
    classList: {contains: (c) => el.className.split(/\s+/).includes(c)},
    querySelector: (sel) => el.children[sel] || null,
  };
  return el;
}
function turn(runId, metaText = "", metaClass = "meta") {
  const t = element("msg assistant");
  t.runId = runId;
  t.children[".meta"] = element(metaClass, metaText);
  t.children[".body"] = element("body");
  return t;
}

function manualClock(start = 1_000_000) {
  let now = start, next = 1;
  const timers = new Map();
  return {
    now: () => now,
    setTimeout(fn, ms) { const id = next++; timers.set(id, {at: now + ms, fn}); return id; },
    clearTimeout(id) { timers.delete(id); },
    pending: () => timers.size,
    // Moves time on, running each timer due in order.
    async advance(ms) {
      const end = now + ms;
      for (;;) {
        const due = [...timers].filter(([, t]) => t.at <= end).sort((a, b) => a[1].at - b[1].at)[0];
        if (!due) break;
        timers.delete(due[0]);
        now = due[1].at;
        due[1].fn();
        await settle();
      }
      now = end;
    },
  };
}

const settle = () => new Promise((r) => setImmediate(r));

// The page around a live run. ``loads`` scripts view.load(): each call takes the next entry
// (an object: the thread as drawn; an Error: the load fails); the last one repeats.
function harness({loads = [{}], composer = true, api = {}} = {}) {
  const clock = manualClock();
  const sent = [];
  const stream = new ThreadStream({url: "ws://test/", onEvent: () => {}, onState: () => {}});
  stream.ws = {readyState: 1, send: (frame) => sent.push(JSON.parse(frame))};
  stream.connect = () => { stream.connected = true; };
  const log = [];
  const handled = [];
  const label = {text: "", kind: "", title: ""};
  let loadCount = 0;
  const view = {
    load() {
      const next = loads[Math.min(loadCount++, loads.length - 1)];
      return next instanceof Error ? Promise.reject(next) : Promise.resolve({openRun: null, ...next});
    },
    newTurn: (runId) => turn(runId),
    get loads() { return loadCount; },
  };
  const comp = composer ? {
    pending: null, notes: [], running: [],
    accepted() { const t = this.pending; this.pending = null; log.push("accepted"); return t; },
    rejected(message, code) { this.pending = null; log.push(["rejected", message, code]); },
    setRunning(on, opts) { this.running.push([on, opts || null]); },
    clearNote(code) { this.notes.push(code); },
  } : null;
  const calls = [];
  const apiFn = (method, url) => {
    calls.push([method, url]);
    const answer = api[method + " " + url];
    if (answer === undefined) return Promise.reject(Object.assign(new Error("no answer scripted"), {code: "test"}));
    const value = typeof answer === "function" ? answer() : answer;
    return value instanceof Error ? Promise.reject(value) : Promise.resolve(value);
  };
  const page = {
    drawn: [], scrolled: 0, cleared: 0, titles: 0, lastId: null,
    drawQuestion(m) { this.drawn.push(m); },
    scrollToEnd() { this.scrolled++; },
    stickToBottom() {},
    lastQuestionId() { return this.lastId; },
    clearNotConnectedNotes() { this.cleared++; },
    refreshTitle() { this.titles++; },
  };
  const texts = [];
  const run = createLiveRun({
    stream, view, composer: comp, api: apiFn, page, clock,
    urlFor: (template, id) => template.replace("ID", id),
    urls: {run: "/runs/ID/", runCancel: "/runs/ID/cancel/", thread: "/threads/ID/"}, threadId: "t1",
    status: {
      show(text, kind, title) { Object.assign(label, {text, kind, title: title === undefined ? text : title}); },
      text: () => label.text,
      bad: () => label.kind === "bad",
    },
    handle: (ev) => handled.push(ev),
    textView: (t) => { const v = {turn: t, text: "", append(s) { this.text += s; }}; texts.push(v); return v; },
    overlap: (stored) => ({stored}),
  });
  return {run, stream, sent, view, composer: comp, clock, calls, page, label, handled, log, texts};
}

test("events of a run wait in order while the page re-reads the thread, then replay once", () => {
  const h = harness();
  const live = h.run.startLive("r1");
  assert.equal(h.stream.resumeRun, "r1");
  h.run.dispatch({type: "text.delta", run_id: "r1", seq: 2, delta: "a"});
  h.run.dispatch({type: "text.delta", run_id: "r1", seq: 3, delta: "b"});
  assert.deepEqual(h.handled, []);  // waiting
  assert.equal(live.queue.length, 2);
  h.run.liveReady(live);
  assert.deepEqual(h.handled.map((e) => e.seq), [2, 3]);
  h.run.dispatch({type: "text.delta", run_id: "r1", seq: 3, delta: "b"});  // a replay: dropped
  h.run.dispatch({type: "text.delta", run_id: "r1", seq: 4, delta: "c"});
  assert.deepEqual(h.handled.map((e) => e.seq), [2, 3, 4]);
  assert.equal(h.stream.seen.get("r1"), 4);
});

test("run.started counts its run from the start again, so a replay after a re-queue is shown", () => {
  const h = harness();
  h.stream.seen.set("r1", 9);
  h.run.startLive("r1");  // followed, the thread not yet read again: its run.started still goes through
  h.run.dispatch({type: "run.started", run_id: "r1", seq: 1});
  assert.deepEqual(h.handled.map((e) => e.type), ["run.started"]);
  assert.deepEqual(h.run.live.queue, []);
});

test("a queued run draws the question at once and, with no worker after a grace, the waiting turn with Stop", async () => {
  const h = harness();
  h.composer.pending = "Am I in the queue?";
  h.run.queued("r1", "m1");
  assert.equal(h.page.drawn.length, 1);
  assert.deepEqual({id: h.page.drawn[0].id, content: h.page.drawn[0].content}, {id: "m1", content: "Am I in the queue?"});
  assert.deepEqual(h.composer.running.at(-1), [true, {canStop: false}]);
  assert.equal(h.run.live, null);
  await h.clock.advance(QUEUED_GRACE_MS - 1);
  assert.equal(h.run.live, null);  // not yet
  await h.clock.advance(1);
  const live = h.run.live;
  assert.equal(live.runId, "r1");
  const meta = live.turn.querySelector(".meta");
  assert.equal(meta.textContent, "waiting for a free worker…");
  assert.equal(meta.className, "meta awaiting");
  assert.deepEqual(h.composer.running.at(-1), [true, {canStop: true}]);
  assert.equal(live.ready, true);
});

test("a queued run that started within the grace is not drawn waiting", async () => {
  const h = harness();
  h.composer.pending = "hi";
  h.run.queued("r1", "m1");
  h.run.startLive("r1");  // run.started meanwhile
  const live = h.run.live;
  await h.clock.advance(QUEUED_GRACE_MS);
  assert.equal(h.run.live, live);
  assert.equal(live.turn, null);
});

test("a quiet run says so, counting, and its next event puts the label back", async () => {
  const h = harness();
  const live = h.run.startLive("r1");
  live.turn = turn("r1", "writing…", "meta writing");
  h.run.liveReady(live);
  h.run.dispatch({type: "text.delta", run_id: "r1", seq: 1, delta: "x"});
  await h.clock.advance((QUIET_S - 1) * 1000);
  h.run.tick();
  assert.equal(live.turn.querySelector(".meta").textContent, "writing…");
  await h.clock.advance(1000);
  h.run.tick();
  assert.equal(live.turn.querySelector(".meta").textContent, `nothing new for ${QUIET_S} s`);
  assert.equal(live.turn.querySelector(".meta").className, "meta quiet");
  h.run.dispatch({type: "text.delta", run_id: "r1", seq: 2, delta: "y"});
  assert.equal(live.turn.querySelector(".meta").textContent, "writing…");
  assert.equal(live.turn.querySelector(".meta").className, "meta writing");
});

test("a run waiting for an approval is not called quiet", async () => {
  const h = harness();
  const live = h.run.startLive("r1");
  live.turn = turn("r1", "waiting for your approval", "meta awaiting");
  h.run.liveReady(live);
  h.run.tick();
  await h.clock.advance(20_000);
  h.run.tick();
  assert.equal(live.turn.querySelector(".meta").textContent, "waiting for your approval");
});

test("a quiet run is looked up; found ended twice it ends from the stored thread, interrupted as failed", async () => {
  const h = harness({api: {"GET /runs/r1/": {id: "r1", status: "interrupted", error: {message: "worker lost"}, last_event_seq: 3}}});
  const live = h.run.startLive("r1");
  live.turn = turn("r1");
  h.run.liveReady(live);
  h.run.tick();  // heard from now
  await h.clock.advance(PROBE_S * 1000);
  h.run.tick();
  await settle();
  assert.deepEqual(h.calls, [["GET", "/runs/r1/"]]);
  assert.equal(h.run.live, live);  // first look: resumed, not ended
  assert.deepEqual(h.sent, [{type: "run.resume", run_id: "r1", after_seq: 0}]);
  await h.clock.advance(PROBE_S * 1000);
  h.run.tick();
  await settle();
  assert.equal(h.calls.length, 2);
  assert.equal(h.run.live, null);
  assert.equal(h.stream.resumeRun, null);
  assert.deepEqual(h.composer.running.at(-1), [false, null]);
  assert.equal(h.page.titles, 1);
  assert.deepEqual([h.label.text, h.label.kind], ["worker lost", "bad"]);
});

test("a quiet run re-queued after it started says it waits for a worker", async () => {
  const h = harness({api: {"GET /runs/r1/": {id: "r1", status: "queued", started_at: "2026-01-01T00:00:00Z", last_event_seq: 0}}});
  const live = h.run.startLive("r1");
  live.turn = turn("r1");
  h.run.liveReady(live);
  h.run.tick();
  await h.clock.advance(PROBE_S * 1000);
  h.run.tick();
  await settle();
  await h.clock.advance(1000);
  h.run.tick();
  assert.equal(live.turn.querySelector(".meta").textContent,
    `nothing new for ${PROBE_S + 1} s · queued again, waiting for a free worker`);
});

test("a 503 from the probe says the service is away, and the thread is read again until it answers", async () => {
  let threadUp = false;
  const down = Object.assign(new Error("database unreachable"), {code: "service_unavailable", status: 503});
  const h = harness({api: {
    "GET /runs/r1/": down,
    "GET /threads/t1/": () => (threadUp ? {id: "t1"} : down),
  }});
  const live = h.run.startLive("r1");
  live.turn = turn("r1");
  h.run.liveReady(live);
  h.run.tick();
  await h.clock.advance(PROBE_S * 1000);
  h.run.tick();
  await settle();
  assert.deepEqual(h.label, {text: "service unavailable", kind: "bad", title: "database unreachable"});
  await h.clock.advance(RECOVERY_MS);
  assert.deepEqual(h.calls.at(-1), ["GET", "/threads/t1/"]);
  assert.equal(h.label.text, "service unavailable");  // still away
  threadUp = true;
  await h.clock.advance(RECOVERY_MS);
  assert.deepEqual([h.label.text, h.label.kind], ["connected", "ok"]);
  assert.ok(h.composer.notes.includes("service_unavailable"));
  assert.equal(h.clock.pending(), 0);  // no more looks
});

test("Stop posts the cancel once and the turn says stopping…", async () => {
  const h = harness({api: {"POST /runs/r1/cancel/": {}}});
  const live = h.run.startLive("r1");
  live.turn = turn("r1", "writing…");
  h.run.stop();
  h.run.stop();  // Escape after the button: not sent twice
  await settle();
  assert.deepEqual(h.calls, [["POST", "/runs/r1/cancel/"]]);
  assert.equal(live.turn.querySelector(".meta").textContent, "stopping…");
  assert.deepEqual(h.composer.running.at(-1), [true, {canStop: false}]);
});

test("a refused Stop says why and may be tried again; a run already finished counts as stopping", async () => {
  let answer = Object.assign(new Error("database unreachable"), {code: "service_unavailable"});
  const h = harness({api: {"POST /runs/r1/cancel/": () => answer}});
  const live = h.run.startLive("r1");
  live.turn = turn("r1", "writing…");
  await h.run.stop();
  assert.deepEqual([h.label.text, h.label.kind], ["could not stop: database unreachable", "bad"]);
  assert.equal(live.stopping, false);
  answer = Object.assign(new Error("finished"), {code: "run_finished"});
  await h.run.stop();
  assert.equal(live.turn.querySelector(".meta").textContent, "stopping…");
  assert.equal(h.calls.length, 2);
});

test("a send caught by a dropped socket: found in the thread, its run is followed", async () => {
  const h = harness({loads: [{openRun: "r2", turn: turn("r2"), waiting: false, lastUser: {id: "m2", content: "hello "}}]});
  h.page.lastId = "m1";
  h.run.sending();  // the last question drawn when the send went out
  h.composer.pending = "hello";
  h.stream.seen.set("r2", 5);
  h.run.connection("open");
  await settle();
  assert.ok(h.log.includes("accepted"));
  assert.equal(h.run.live.runId, "r2");
  assert.equal(h.run.live.ready, true);
  assert.deepEqual(h.sent, [{type: "run.resume", run_id: "r2", after_seq: 0}]);  // from its first event
  assert.deepEqual(h.composer.running.at(-1), [true, {canStop: true}]);
  assert.deepEqual(h.composer.notes, ["not_connected"]);
  assert.equal(h.page.cleared, 1);
});

test("a send caught by a dropped socket: not in the thread at a second look, the text is freed", async () => {
  // The last question has the same text but is the one drawn before the send: not this send.
  const h = harness({loads: [{lastUser: {id: "m1", content: "hello"}}]});
  h.page.lastId = "m1";
  h.run.sending();
  h.composer.pending = "hello";
  h.run.connection("open");
  await settle();
  assert.deepEqual(h.log, []);  // first look: not decided yet
  assert.equal(h.view.loads, 1);
  await h.clock.advance(SETTLE_AGAIN_MS);
  assert.equal(h.view.loads, 2);
  const note = "Not sent: the connection dropped before the server took it — send it again.";
  assert.deepEqual(h.log, [["rejected", note, "not_connected"]]);
  assert.deepEqual([h.label.text, h.label.kind], [note, "bad"]);
  assert.equal(h.run.live, null);
});

test("the socket's other states are said in the label", () => {
  const h = harness();
  h.run.connection("reconnecting");
  assert.deepEqual([h.label.text, h.label.kind], ["reconnecting…", "warn"]);
  h.run.connection("closed", "no access to this chat");
  assert.deepEqual([h.label.text, h.label.kind], ["no access to this chat", "bad"]);
});

test("events_missing on an open run streams on from the stored text; those arriving meanwhile wait", async () => {
  const t = turn("r1");
  const h = harness({loads: [{openRun: "r1", turn: t, openText: "Stored so far", waiting: false}]});
  h.run.missed({type: "error", code: "events_missing", run_id: "r1", to_seq: 7});
  assert.equal(h.stream.seen.get("r1"), 7);
  h.run.dispatch({type: "text.delta", run_id: "r1", seq: 8, delta: "more"});
  assert.deepEqual(h.handled, []);
  await settle();
  const live = h.run.live;
  assert.equal(live.turn, t);
  assert.equal(h.texts[0].text, "Stored so far");
  assert.deepEqual(live.overlap, {stored: "Stored so far"});
  assert.equal(h.stream.resumeRun, "r1");
  assert.deepEqual(h.handled.map((e) => e.seq), [8]);
  assert.deepEqual(h.composer.running.at(-1), [true, {canStop: true}]);
});

test("events_missing on a run that has ended frees the composer", async () => {
  const h = harness({loads: [{openRun: null}]});
  h.stream.resumeRun = "r1";
  h.run.missed({type: "error", code: "events_missing", run_id: "r1", to_seq: 4});
  await settle();
  assert.equal(h.run.live, null);
  assert.equal(h.stream.resumeRun, null);
  assert.deepEqual(h.composer.running.at(-1), [false, null]);
});

test("the first look picks up a queued unanswered question as waiting, then opens the socket", async () => {
  const h = harness({loads: [{unanswered: "r3"}], api: {"GET /runs/r3/": {id: "r3", status: "queued"}}});
  await h.run.begin();
  assert.equal(h.stream.connected, true);
  assert.equal(h.run.live.runId, "r3");
  assert.equal(h.run.live.turn.querySelector(".meta").textContent, "waiting for a free worker…");
  assert.equal(h.page.scrolled, 1);
});

test("a last turn that ended on tool calls follows its run while it still runs (e.g. after a connect card)", async () => {
  const h = harness({loads: [{toolTail: "r4", turn: null}], api: {"GET /runs/r4/": {id: "r4", status: "running"}}});
  await h.run.begin();
  assert.equal(h.run.live.runId, "r4");
  assert.deepEqual(h.composer.running.at(-1), [true, {canStop: true}]);
});

test("a last turn that ended on tool calls of a finished run follows nothing", async () => {
  const h = harness({loads: [{toolTail: "r5"}], api: {"GET /runs/r5/": {id: "r5", status: "failed"}}});
  await h.run.begin();
  assert.equal(h.run.live, null);
});

test("the first look failing says so and still opens the socket", async () => {
  const h = harness({loads: [new Error("HTTP 500")]});
  await h.run.begin();
  assert.deepEqual([h.label.text, h.label.kind], ["could not load messages: HTTP 500", "bad"]);
  assert.equal(h.stream.connected, true);
});

test("a run's end frees the composer and says a failure", async () => {
  const h = harness();
  h.run.startLive("r1");
  h.label.text = "regenerating…";
  await h.run.endLive({type: "run.failed", run_id: "r1", error: {message: "provider said no"}});
  assert.equal(h.run.live, null);
  assert.ok(h.log.includes("accepted"));
  assert.deepEqual([h.label.text, h.label.kind], ["provider said no", "bad"]);
});
