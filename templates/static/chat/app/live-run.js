// The live run: the thread page's state machine for the run it is following — queued (waiting
// for a worker), streaming, waiting for an approval, stopping, quiet, ended — and the ways back
// to it: a reload or a send whose answer a dropped socket lost (pickUp, settleSend), a hole in
// the event log (missed), a quiet run looked up over REST (probe), a backing service away
// (unavailable). It touches the page only through the dependencies it is given, so it runs
// in node with fakes (tests/js/live_run.test.mjs).
//
// createLiveRun(deps) → the run's controller. deps:
//   stream    ThreadStream (stream.js): seen, accept(ev), follow(runId, fromStart), resume(runId),
//             resumeRun, open, connect()
//   view      ThreadView (thread.js): load() → Promise<last> ({turn, runId, openRun, openText,
//             waiting, unanswered, lastUser, toolTail}), newTurn(runId) → the turn's <article>
//   composer  Composer (composer.js) or null on a read-only thread: pending, accepted() → the
//             text sent or null, rejected(message, code), setRunning(on, opts), clearNote(code)
//   api       (method, url) → Promise<body>; a failure carries .code and .message (api.js)
//   urls      {run, runCancel, thread} templates with "ID" (urlFor); threadId
//   status    the connection label: show(text, kind, title?), text() → its text, bad() → shows an error
//   page      drawQuestion({id, content, created_at}) (draws it unless drawn), scrollToEnd(),
//             stickToBottom(), lastQuestionId() → id or null, clearNotConnectedNotes(), refreshTitle()
//   handle    (ev) → void: an accepted event to the page's handlers (handlers.js)
//   textView  (turn) → a LiveText on the turn's body; overlap (storedText) → a StoredOverlap
//   clock     {now, setTimeout, clearTimeout} (the real ones unless given)
//   urlFor    (template, id) → URL (api.js)
// Its words go through i18n.js (the page's catalogue; as written in node).
import { gettext, interpolate } from "./i18n.js";

// How long a run may send nothing before its turn says so, and how often a quiet run is looked
// up over REST (seconds); a run waiting for an approval or a worker is looked up less often.
export const QUIET_S = 8;
export const PROBE_S = 10;
export const WAITING_PROBE_S = 30;
// A queued run no worker takes up within this long is drawn waiting (ms).
export const QUEUED_GRACE_MS = 1000;
// A send caught by a dropped socket is looked for again this long after the first look (ms).
export const SETTLE_AGAIN_MS = 3000;
// While a backing service is away, the thread is read again this often (ms).
export const RECOVERY_MS = 5000;

// A run's stored status → the terminal event it ended with.
export const RUN_END = {completed: "run.completed", failed: "run.failed", cancelled: "run.cancelled", interrupted: "run.failed"};

const realClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (t) => clearTimeout(t),
};

export function createLiveRun({stream, view, composer = null, api, urlFor, urls, threadId, status, page,
                               handle, textView, overlap, clock = realClock}) {
  let live = null;        // {runId, turn, textView, ready, queue, …} of the run followed, or null
  let sentAfter = null;   // the last question drawn when the pending send went out (settleSend)
  let recovery = null;    // the timer reading the thread again while a service is away

  const couldNotLoad = (e) => status.show(interpolate(gettext("could not load messages: %(error)s"), {error: e.message}, true), "bad");
  // The label's words the page compares with what it shows (status.text()).
  const CONNECTED = gettext("connected"), UNAVAILABLE = gettext("service unavailable");
  const metaOf = (l) => l && l.turn && l.turn.querySelector(".meta");

  function startLive(runId) {
    live = {runId, turn: null, textView: null, ready: false, queue: []};
    stream.follow(runId);
    return live;
  }

  function liveReady(l) {
    l.ready = true;
    for (const ev of l.queue.splice(0)) dispatch(ev);
  }

  function dispatch(ev) {
    // While the page re-reads the thread after run.started, later events of that run wait
    // in order (they count as seen when replayed, not when queued).
    if (live && !live.ready && ev.type !== "run.started" && ev.run_id === live.runId) {
      live.queue.push(ev);
      return;
    }
    if (ev.type === "run.started" && ev.run_id) stream.seen.set(ev.run_id, 0);
    if (!stream.accept(ev)) return;
    if (live && ev.run_id === live.runId) heard(live);
    handle(ev);
  }

  function busy(on, opts) { if (composer) composer.setRunning(on, opts); }

  function endLive(ev) {
    busy(false);
    // A run that ended before run.started (no worker took it up, no database connection):
    // its message is stored, so the composer takes the next one instead of staying locked.
    if (composer) composer.accepted();
    live = null;
    stream.resumeRun = null;
    page.refreshTitle();
    if (stream.open && status.text() !== CONNECTED) status.show(CONNECTED, "ok");  // "regenerating…", an error
    return view.load().then(() => {
      if (ev.type === "run.failed" && ev.error) status.show(ev.error.message, "bad");
      // A completed run whose final answer was cut off (output_limit) says why, as its
      // stored message does: the status line shows it in full (a long reason wraps).
      if (ev.type === "run.completed" && ev.truncated) status.show(ev.truncated.message, "warn wrap");
    });
  }

  // run.queued: the send was taken, so the composer clears and the question is drawn at
  // once from the text sent (the thread is read again at run.started). A run that no worker
  // takes up within a second (every worker busy) is drawn as "waiting for a free worker…",
  // with Stop.
  function queued(runId, userMessageId) {
    const sent = composer ? composer.accepted() : null;
    if (sent !== null && userMessageId && !live) {
      page.drawQuestion({id: userMessageId, content: sent, created_at: new Date(clock.now()).toISOString()});
    }
    busy(true, {canStop: false});
    clock.setTimeout(() => {
      if (live || stream.seen.get(runId)) return;  // started, or ended, meanwhile
      const l = startLive(runId);
      view.load().then(() => { if (live === l) showWaiting(l); }).catch(couldNotLoad);
    }, QUEUED_GRACE_MS);
  }

  // events_missing: the event log lost some of a run's events (Redis away for longer than
  // EVENTS_LOG_RETRY_S). The database holds the text: read the thread again, then stream on
  // from the stored text with the run's events after the hole (those arriving meanwhile wait
  // in order) while it is open — or free the composer when it has ended, whose terminal
  // event may be among those lost (the page would stay "writing…" with Send locked until a
  // reload). The stored text can be behind the first event after the hole (a few words
  // missing) or ahead of it (those events' text held back: StoredOverlap); the run's end
  // draws the stored message whole.
  function missed(ev) {
    if (!ev.run_id) { live = null; view.load(); return; }
    stream.seen.set(ev.run_id, Math.max(stream.seen.get(ev.run_id) || 0, ev.to_seq || 0));
    const l = {runId: ev.run_id, turn: null, textView: null, ready: false, queue: []};
    live = l;
    view.load().then((last) => {
      if (live !== l) return;  // a newer run started meanwhile
      if (last.openRun === l.runId) {
        l.turn = last.turn;
        l.textView = textView(last.turn);
        l.textView.append(last.openText);
        l.overlap = overlap(last.openText);  // the events after the hole may repeat its tail
        stream.resumeRun = l.runId;
        busy(!last.waiting, {canStop: true});
        liveReady(l);
        return;
      }
      live = null;
      if (!last.openRun) {
        busy(false);
        stream.resumeRun = null;
      }
    }).catch(couldNotLoad);
  }

  // Stop goes over REST, not the socket: it needs only the database, so it works while the
  // socket reconnects (a frame sent then was lost) or Redis is down, and its answer says it
  // was taken. A second Stop (button, then Escape) before run.cancelled arrives is not sent.
  // Once taken, the turn says "stopping…" until run.cancelled: at once when the worker is alive,
  // after the reaper's ~10 s when it died (it closes the run then).
  function stop() {
    const l = live;
    if (!l || l.stopping) return;
    l.stopping = true;
    const stopping = () => {
      if (live !== l) return;
      busy(true, {canStop: false});
      const meta = metaOf(l);
      if (meta) { meta.textContent = gettext("stopping…"); meta.className = "meta stopping"; }
    };
    return api("POST", urlFor(urls.runCancel, l.runId)).then(stopping, (e) => {
      if (e.code === "run_finished") { stopping(); return; }  // cancelled already: its end is coming
      l.stopping = false;
      status.show(interpolate(gettext("could not stop: %(error)s"), {error: e.message}, true), "bad");
    });
  }

  // A run that waits for a worker, drawn after the thread: its turn says so, Stop cancels it.
  function showWaiting(l) {
    l.turn = view.newTurn(l.runId);
    const meta = l.turn.querySelector(".meta");
    meta.textContent = gettext("waiting for a free worker…");
    meta.className = "meta awaiting";
    busy(true, {canStop: true});
    liveReady(l);
    page.scrollToEnd();
  }

  // A run that sends nothing for QUIET_S says so on its turn, counting ("nothing new for
  // 12 s"): a slow model, a long tool call and a worker being replaced (~10 s) look alike from
  // here, and a frozen "writing…" said none of them. The run's next event puts back what the
  // turn said before. Not while it waits for an approval or is stopping: those say so.
  function heard(l) {
    l.heardAt = clock.now();
    // An error shown meanwhile ("could not stop: …" while the database was away) is stale
    // once the run is heard from again.
    if (stream.open && status.bad()) status.show(CONNECTED, "ok");
    if (!l.quiet) return;
    const meta = metaOf(l);
    if (meta && meta.classList.contains("quiet")) { meta.textContent = l.quiet.text; meta.className = l.quiet.cls; }
    l.quiet = null;
  }

  // Once a second (the page's interval): the quiet label and the probe.
  function tick() {
    const l = live;
    const meta = metaOf(l);
    if (!meta) return;
    const now = clock.now();
    if (!l.heardAt) l.heardAt = now;  // followed from a reload: count from now
    const quiet = Math.floor((now - l.heardAt) / 1000);
    if (quiet < QUIET_S) return;
    // Waiting for an approval or a worker may take long: looked up less often, nothing said.
    const waiting = l.stopping || meta.classList.contains("awaiting");
    const every = (waiting ? WAITING_PROBE_S : PROBE_S) * 1000;
    if (!l.probing && now - (l.probedAt || 0) >= every) probe(l);
    if (waiting) return;
    if (!l.quiet) l.quiet = {text: meta.textContent, cls: meta.className};
    meta.textContent = interpolate(l.requeued ? gettext("nothing new for %(seconds)s s · queued again, waiting for a free worker")
      : gettext("nothing new for %(seconds)s s"), {seconds: quiet}, true);
    meta.className = "meta quiet";
  }

  // A quiet run is looked up over REST (PROBE_S apart while it stays quiet; WAITING_PROBE_S
  // while it waits for an approval or a worker, or is stopping): the database says whether it
  // went on or ended without this page hearing it (an event lost on the way that the
  // server's own catch-up did not see: its socket never had a live event of the run, or the
  // log lost the end). Then the socket's run.resume sends what the page missed — or an
  // events_missing, which reloads the thread and frees the composer. A run still found ended
  // at the next look is ended from the thread as stored. A 503 (the server cannot reach its
  // database: the run's worker holds its events until it is back) is said in the label.
  function probe(l) {
    l.probing = true;
    l.probedAt = clock.now();
    return api("GET", urlFor(urls.run, l.runId)).then((run) => {
      if (live !== l) return;
      backAgain();
      const ended = Object.hasOwn(RUN_END, run.status);
      if (ended && l.endSeen) {
        endLive({type: RUN_END[run.status], run_id: run.id, error: run.error && run.error.message ? run.error : null});
        return;
      }
      l.endSeen = ended;
      // Queued again after it had started: its worker was lost and the reaper handed it on
      // (or an approval was decided): the quiet turn says it waits for a worker.
      l.requeued = run.status === "queued" && !!run.started_at;
      if ((ended || run.last_event_seq > (stream.seen.get(l.runId) || 0)) && stream.open) stream.resume(l.runId);
    }, (e) => {
      if (live === l && e.code === "service_unavailable") unavailable(e.message);
    }).finally(() => { l.probing = false; });
  }

  // The server cannot reach a backing service (a send refused with service_unavailable, a
  // quiet run's probe answered 503): the label says so, and the thread is read again every
  // RECOVERY_MS until it answers, then the label and the composer's note go back.
  function unavailable(message) {
    status.show(UNAVAILABLE, "bad", message);
    if (recovery) return;
    const attempt = () => {
      recovery = clock.setTimeout(() => {
        api("GET", urlFor(urls.thread, threadId)).then(backAgain, attempt);
      }, RECOVERY_MS);
    };
    attempt();
  }

  function backAgain() {
    if (recovery) { clock.clearTimeout(recovery); recovery = null; }
    if (status.text() === UNAVAILABLE && stream.open) status.show(CONNECTED, "ok");
    if (composer) composer.clearNote("service_unavailable");
  }

  // What the page picks up from the thread as drawn: a run still open (after a load, a
  // reload, or a send whose answer the socket lost) is followed from its first event — its
  // handlers find the rows already drawn, so nothing appears twice; an unanswered last question
  // whose run is still queued is drawn waiting.
  function pickUp(last) {
    if (last.openRun) {
      live = {runId: last.openRun, turn: last.turn, textView: null, ready: true, queue: []};
      stream.follow(last.openRun, true);
      if (stream.open) stream.resume(last.openRun);
      busy(!last.waiting, {canStop: true});
    } else if (last.toolTail) {
      return api("GET", urlFor(urls.run, last.toolTail)).then((run) => {
        if (live || !["queued", "running"].includes(run.status)) return;
        live = {runId: run.id, turn: last.turn, textView: null, ready: true, queue: []};
        stream.follow(run.id, true);
        if (stream.open) stream.resume(run.id);
        busy(true, {canStop: true});
      }).catch(() => {});
    } else if (last.unanswered) {
      return api("GET", urlFor(urls.run, last.unanswered)).then((run) => {
        if (run.status !== "queued" || live) return;
        const l = startLive(run.id);
        stream.seen.set(run.id, 0);
        showWaiting(l);
      }).catch(() => {});
    }
  }

  // A send whose answer (run.queued, or an error) never came: the socket closed with it in
  // flight (a web process restarting under it). Back on a socket, the thread says whether the
  // server took it — then the page follows its run as after a reload; if not (at a second look
  // SETTLE_AGAIN_MS later: the old process may still have been storing it), the text is freed
  // to send again, rather than the composer staying locked until a reload.
  function settleSend(text, looks) {
    return view.load().then((last) => {
      if (!composer || composer.pending !== text || live) return;  // answered meanwhile
      const you = last.lastUser;
      if (you && you.id !== sentAfter && you.content.trim() === text.trim()) {
        composer.accepted();
        return pickUp(last);
      }
      if (looks < 1) { clock.setTimeout(() => settleSend(text, looks + 1), SETTLE_AGAIN_MS); return; }
      const note = gettext("Not sent: the connection dropped before the server took it — send it again.");
      composer.rejected(note, "not_connected");
      status.show(note, "bad");
    }).catch((e) => {
      if (looks < 1) clock.setTimeout(() => settleSend(text, looks + 1), SETTLE_AGAIN_MS);
      else couldNotLoad(e);
    });
  }

  // The socket's state (stream.js onState): back on a socket, a send it may have dropped is
  // settled and the notes that said it was away are cleared.
  function connection(state, detail) {
    if (state === "open") {
      status.show(CONNECTED, "ok");
      if (composer && composer.pending !== null && !live) settleSend(composer.pending, 0);
      // Notes that said the socket was away ("Not connected: try again…") are stale now.
      if (composer) composer.clearNote("not_connected");
      page.clearNotConnectedNotes();
    }
    else if (state === "reconnecting") status.show(gettext("reconnecting…"), "warn");
    else status.show(detail || gettext("disconnected"), "bad");
  }

  // The composer is sending: remember the last question drawn, so that settleSend can tell
  // the question it sent from an older one with the same text.
  function sending() { sentAfter = page.lastQuestionId(); }

  // The page's first look: draw the thread, pick up a run still open, then open the socket.
  function begin() {
    return view.load().then(pickUp).catch(couldNotLoad).finally(() => stream.connect());
  }

  return {
    get live() { return live; },
    begin, dispatch, connection, sending, tick, stop,
    startLive, liveReady, endLive, queued, missed, busy, unavailable,
    composerSent() { if (composer) composer.accepted(); },
    // Whether a send of this page was waiting for it (the refusal is then the composer's).
    composerRejected(ev) {
      if (!composer || composer.pending === null) return false;
      composer.rejected(ev.message, ev.code);
      return true;
    },
    stickToBottom() { page.stickToBottom(); },
  };
}
