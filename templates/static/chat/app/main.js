// Thread page entry point: wires the view, the stream, the handlers and the composer.
// Every URL comes from the page's data-url-* attributes (templates/chat/app.html).
import { api, urlFor } from "./api.js";
import { ThreadView } from "./thread.js";
import { ThreadStream } from "./stream.js";
import { makeHandlers } from "./handlers.js";
import { LiveText, StoredOverlap } from "./live-text.js";
import { Composer } from "./composer.js";

const box = document.getElementById("messages");
if (box) start(box);

function start(box) {
  const d = box.dataset;
  const conn = document.getElementById("conn");
  const composerForm = document.getElementById("composer");
  const config = {
    threadId: d.threadId,
    canWrite: d.canWrite === "1",
    canSaveKnowledge: d.canSaveKnowledge === "1",
    urls: {messages: d.urlMessages, branch: d.urlBranch, regenerate: d.urlRegenerate, edit: d.urlEdit,
           knowledgeItem: d.urlKnowledgeItem, thread: d.urlThread, runCancel: d.urlRunCancel, run: d.urlRun},
    showProd: () => { const b = document.getElementById("prod-banner"); if (b) b.hidden = false; },
  };

  function showConn(text, kind) {
    if (!conn) return;
    conn.textContent = text;
    conn.className = "conn " + (kind || "");
    conn.title = text;
  }

  const sendOptions = () => {
    const out = {};
    const grounded = document.getElementById("send-grounded");
    const priv = document.getElementById("send-private");
    if (grounded) out.grounded = grounded.checked;
    if (priv) out.include_private = priv.checked;
    return out;
  };

  let stream = null;
  const decide = (id, decision) => stream.send({type: "approval.decide", tool_call_id: id, decision});
  const view = new ThreadView({box, config, decide, status: showConn, options: sendOptions});

  let composer = null;
  let sentAfter = null;  // the last question drawn when the pending send went out (settleSend)
  const app = {
    box, view, live: null,
    showConn, showProd: config.showProd, decide,
    startLive(runId) {
      app.live = {runId, turn: null, textView: null, ready: false, queue: []};
      stream.follow(runId);
      return app.live;
    },
    liveReady(live) {
      live.ready = true;
      for (const ev of live.queue.splice(0)) dispatch(ev);
    },
    endLive(ev) {
      app.busy(false);
      // A run that ended before run.started (no worker took it up, no database connection):
      // its message is stored, so the composer takes the next one instead of staying locked.
      if (composer) composer.accepted();
      app.live = null;
      stream.resumeRun = null;
      refreshTitle();
      if (conn && stream.open && conn.textContent !== "connected") showConn("connected", "ok");  // "regenerating…", an error
      view.load().then(() => {
        if (ev.type === "run.failed" && ev.error) showConn(ev.error.message, "bad");
        // A completed run whose final answer was cut off (output_limit) says why, as its
        // stored message does: the status line shows it in full (a long reason wraps).
        if (ev.type === "run.completed" && ev.truncated) showConn(ev.truncated.message, "warn wrap");
      });
    },
    // run.queued: the send was taken, so the composer clears and the question is drawn at
    // once from the text sent (the thread is read again at run.started). A run that no worker
    // takes up within a second (every worker busy) is drawn as "waiting for a free worker…",
    // with Stop.
    queued(runId, userMessageId) {
      const sent = composer ? composer.accepted() : null;
      if (sent !== null && userMessageId && !app.live
          && !box.querySelector('article.msg.user[data-message-id="' + CSS.escape(userMessageId) + '"]')) {
        box.appendChild(view.userMessage({id: userMessageId, content: sent, created_at: new Date().toISOString()}));
        box.scrollTop = box.scrollHeight;
      }
      app.busy(true, {canStop: false});
      setTimeout(() => {
        if (app.live || stream.seen.get(runId)) return;  // started, or ended, meanwhile
        const live = app.startLive(runId);
        view.load().then(() => { if (app.live === live) showWaiting(live); })
          .catch((e) => showConn("could not load messages: " + e.message, "bad"));
      }, 1000);
    },
    // events_missing: the event log lost some of a run's events (Redis away for longer than
    // EVENTS_LOG_RETRY_S). The database holds the text: read the thread again, then stream on
    // from the stored text with the run's events after the hole (those arriving meanwhile wait
    // in order) while it is open — or free the composer when it has ended, whose terminal
    // event may be among those lost (a trial's page stayed "writing…" with Send locked until
    // a reload). The stored text can be behind the first event after the hole (a few words
    // missing) or ahead of it (those events' text held back: StoredOverlap); the run's end
    // draws the stored message whole.
    missed(ev) {
      if (!ev.run_id) { app.live = null; view.load(); return; }
      stream.seen.set(ev.run_id, Math.max(stream.seen.get(ev.run_id) || 0, ev.to_seq || 0));
      const live = {runId: ev.run_id, turn: null, textView: null, ready: false, queue: []};
      app.live = live;
      view.load().then((last) => {
        if (app.live !== live) return;  // a newer run started meanwhile
        if (last.openRun === live.runId) {
          live.turn = last.turn;
          live.textView = new LiveText(last.turn.querySelector(".body"));
          live.textView.append(last.openText);
          live.overlap = new StoredOverlap(last.openText);  // the events after the hole may repeat its tail
          stream.resumeRun = live.runId;
          app.busy(!last.waiting, {canStop: true});
          app.liveReady(live);
          return;
        }
        app.live = null;
        if (!last.openRun) {
          app.busy(false);
          stream.resumeRun = null;
        }
      }).catch((e) => showConn("could not load messages: " + e.message, "bad"));
    },
    busy(on, opts) { if (composer) composer.setRunning(on, opts); },
    composerSent() { if (composer) composer.accepted(); },
    composerRejected(ev) { if (composer) composer.rejected(ev.message, ev.code); },
    unavailable(message) { unavailable(message); },
    stickToBottom() {
      if (box.scrollHeight - box.scrollTop - box.clientHeight < 160) box.scrollTop = box.scrollHeight;
    },
  };
  view.onBusy = (on) => app.busy(on);
  const vocabNode = document.getElementById("event-vocabulary");
  const vocabulary = JSON.parse(vocabNode.textContent);  // agents/event_types.py
  const handlers = makeHandlers(app, vocabulary);

  function dispatch(ev) {
    // While the page re-reads the thread after run.started, later events of that run wait
    // in order (they count as seen when replayed, not when queued).
    if (app.live && !app.live.ready && ev.type !== "run.started" && ev.run_id === app.live.runId) {
      app.live.queue.push(ev);
      return;
    }
    if (ev.type === "run.started" && ev.run_id) stream.seen.set(ev.run_id, 0);
    if (!stream.accept(ev)) return;
    if (app.live && ev.run_id === app.live.runId) heard(app.live);
    box.dispatchEvent(new CustomEvent("chat:event", {detail: ev}));  // e.g. budget.warning (usage/thread_usage.js)
    const handler = handlers[ev.type];
    if (handler) handler(ev);
    else if (!vocabulary.types[ev.type]) console.warn("undeclared event type", ev.type);
  }

  function refreshTitle() {  // the first message names the thread: show it without a reload
    api("GET", urlFor(config.urls.thread, config.threadId)).then((t) => {
      if (!t || !t.title) return;
      document.dispatchEvent(new CustomEvent("chat:renamed", {detail: {id: config.threadId, title: t.title}}));
    }).catch(() => {});
  }

  const proto = location.protocol === "https:" ? "wss://" : "ws://";
  stream = new ThreadStream({
    url: proto + location.host + d.wsPath,
    onEvent: dispatch,
    onState: (state, detail) => {
      if (state === "open") {
        showConn("connected", "ok");
        if (composer && composer.pending !== null && !app.live) settleSend(composer.pending, 0);
        // Notes that said the socket was away ("Not connected: try again…") are stale now.
        if (composer) composer.clearNote("not_connected");
        for (const note of box.querySelectorAll('.approval-note[data-kind="not_connected"]')) {
          note.textContent = "";
          delete note.dataset.kind;
        }
      }
      else if (state === "reconnecting") showConn("reconnecting…", "warn");
      else showConn(detail || "disconnected", "bad");
    },
  });

  if (composerForm) {
    composer = new Composer({
      form: composerForm,
      input: document.getElementById("input"),
      sendBtn: document.getElementById("send"),
      stopBtn: document.getElementById("stop"),
      counter: document.getElementById("composer-counter"),
      limits: {maxChars: Number(d.maxChars), maxBytes: Number(d.maxFrameBytes)},
      send: (text) => {
        const mine = box.querySelectorAll("article.msg.user[data-message-id]");
        sentAfter = mine.length ? mine[mine.length - 1].dataset.messageId : null;
        return stream.send({type: "message.send", content: text, ...sendOptions()});
      },
      stop: stopRun,
    });
  }

  // Stop goes over REST, not the socket: it needs only the database, so it works while the
  // socket reconnects (a frame sent then was lost) or Redis is down, and its answer says it
  // was taken. A second Stop (button, then Escape) before run.cancelled arrives is not sent.
  // Once taken, the turn says "stopping…" until run.cancelled: at once when the worker is alive,
  // after the reaper's ~10 s when it died (it closes the run then).
  function stopRun() {
    const live = app.live;
    if (!live || live.stopping) return;
    live.stopping = true;
    const stopping = () => {
      if (app.live !== live) return;
      app.busy(true, {canStop: false});
      const meta = live.turn && live.turn.querySelector(".meta");
      if (meta) { meta.textContent = "stopping…"; meta.className = "meta stopping"; }
    };
    api("POST", urlFor(config.urls.runCancel, live.runId)).then(stopping, (e) => {
      if (e.code === "run_finished") { stopping(); return; }  // cancelled already: its end is coming
      live.stopping = false;
      showConn("could not stop: " + e.message, "bad");
    });
  }

  document.addEventListener("chat:stop", stopRun);

  // A run that waits for a worker, drawn after the thread: its turn says so, Stop cancels it.
  function showWaiting(live) {
    live.turn = view.newTurn(live.runId);
    const meta = live.turn.querySelector(".meta");
    meta.textContent = "waiting for a free worker…";
    meta.className = "meta awaiting";
    app.busy(true, {canStop: true});
    app.liveReady(live);
    box.scrollTop = box.scrollHeight;
  }

  // A run that sends nothing for QUIET_S says so on its turn, counting ("nothing new for
  // 12 s"): a slow model, a long tool call and a worker being replaced (~10 s) look alike from
  // here, and a frozen "writing…" said none of them. The run's next event puts back what the
  // turn said before. Not while it waits for an approval or is stopping: those say so.
  const QUIET_S = 8;
  function heard(live) {
    live.heardAt = Date.now();
    // An error shown meanwhile ("could not stop: …" while the database was away) is stale
    // once the run is heard from again.
    if (conn && stream.open && conn.classList.contains("bad")) showConn("connected", "ok");
    if (!live.quiet) return;
    const meta = live.turn && live.turn.querySelector(".meta");
    if (meta && meta.classList.contains("quiet")) { meta.textContent = live.quiet.text; meta.className = live.quiet.cls; }
    live.quiet = null;
  }
  setInterval(() => {
    const live = app.live;
    const meta = live && live.turn && live.turn.querySelector(".meta");
    if (!meta) return;
    if (!live.heardAt) live.heardAt = Date.now();  // followed from a reload: count from now
    const quiet = Math.floor((Date.now() - live.heardAt) / 1000);
    if (quiet < QUIET_S) return;
    // Waiting for an approval or a worker may take long: looked up less often, nothing said.
    const waiting = live.stopping || meta.classList.contains("awaiting");
    const every = (waiting ? WAITING_PROBE_S : PROBE_S) * 1000;
    if (!live.probing && Date.now() - (live.probedAt || 0) >= every) probe(live);
    if (waiting) return;
    if (!live.quiet) live.quiet = {text: meta.textContent, cls: meta.className};
    meta.textContent = "nothing new for " + quiet + " s" + (live.requeued ? " · queued again, waiting for a free worker" : "");
    meta.className = "meta quiet";
  }, 1000);

  // A quiet run is looked up over REST (PROBE_S apart while it stays quiet; WAITING_PROBE_S
  // while it waits for an approval or a worker, or is stopping): the database says whether it
  // went on or ended without this page hearing it (an event lost on the way that the
  // server's own catch-up did not see: its socket never had a live event of the run, or the
  // log lost the end). Then the socket's run.resume sends what the page missed — or an
  // events_missing, which reloads the thread and frees the composer. A run still found ended
  // at the next look is ended from the thread as stored. A 503 (the server cannot reach its
  // database: the run's worker holds its events until it is back) is said in the label.
  const PROBE_S = 10;
  const WAITING_PROBE_S = 30;
  function probe(live) {
    live.probing = true;
    live.probedAt = Date.now();
    api("GET", urlFor(config.urls.run, live.runId)).then((run) => {
      if (app.live !== live) return;
      backAgain();
      const ended = Object.hasOwn(RUN_END, run.status);
      if (ended && live.endSeen) {
        app.endLive({type: RUN_END[run.status], run_id: run.id, error: run.error && run.error.message ? run.error : null});
        return;
      }
      live.endSeen = ended;
      // Queued again after it had started: its worker was lost and the reaper handed it on
      // (or an approval was decided): the quiet turn says it waits for a worker.
      live.requeued = run.status === "queued" && !!run.started_at;
      if ((ended || run.last_event_seq > (stream.seen.get(live.runId) || 0)) && stream.open) stream.resume(live.runId);
    }, (e) => {
      if (app.live === live && e.code === "service_unavailable") unavailable(e.message);
    }).finally(() => { live.probing = false; });
  }
  const RUN_END = {completed: "run.completed", failed: "run.failed", cancelled: "run.cancelled", interrupted: "run.failed"};

  // The server cannot reach a backing service (a send refused with service_unavailable, a
  // quiet run's probe answered 503): the label says so, and the thread is read again every
  // 5 s until it answers, then the label and the composer's note go back.
  let recovery = null;
  function unavailable(message) {
    showConn("service unavailable", "bad");
    if (conn) conn.title = message;
    if (recovery) return;
    const attempt = () => {
      recovery = setTimeout(() => {
        api("GET", urlFor(config.urls.thread, config.threadId)).then(backAgain, attempt);
      }, 5000);
    };
    attempt();
  }
  function backAgain() {
    if (recovery) { clearTimeout(recovery); recovery = null; }
    if (conn && conn.textContent === "service unavailable" && stream.open) showConn("connected", "ok");
    if (composer) composer.clearNote("service_unavailable");
  }

  // What the page picks up from the thread as drawn: a run still open (after a load, a
  // reload, or a send whose answer the socket lost) is followed from its first event — its
  // handlers find the rows already drawn, so nothing appears twice; an unanswered last question
  // whose run is still queued is drawn waiting.
  function pickUp(last) {
    if (last.openRun) {
      app.live = {runId: last.openRun, turn: last.turn, textView: null, ready: true, queue: []};
      stream.follow(last.openRun, true);
      if (stream.open) stream.resume(last.openRun);
      app.busy(!last.waiting, {canStop: true});
    } else if (last.unanswered) {
      return api("GET", urlFor(config.urls.run, last.unanswered)).then((run) => {
        if (run.status !== "queued" || app.live) return;
        const live = app.startLive(run.id);
        stream.seen.set(run.id, 0);
        showWaiting(live);
      }).catch(() => {});
    }
  }

  // A send whose answer (run.queued, or an error) never came: the socket closed with it in
  // flight (a web process restarting under it). Back on a socket, the thread says whether the
  // server took it — then the page follows its run as after a reload; if not (at a second look
  // 3 s later: the old process may still have been storing it), the text is freed to send
  // again. The composer used to stay locked until a reload (found by a fresh-clone trial).
  function settleSend(text, looks) {
    view.load().then((last) => {
      if (!composer || composer.pending !== text || app.live) return;  // answered meanwhile
      const you = last.lastUser;
      if (you && you.id !== sentAfter && you.content.trim() === text.trim()) {
        composer.accepted();
        return pickUp(last);
      }
      if (looks < 1) { setTimeout(() => settleSend(text, looks + 1), 3000); return; }
      const note = "Not sent: the connection dropped before the server took it — send it again.";
      composer.rejected(note, "not_connected");
      showConn(note, "bad");
    }).catch((e) => {
      if (looks < 1) setTimeout(() => settleSend(text, looks + 1), 3000);
      else showConn("could not load messages: " + e.message, "bad");
    });
  }

  view.load().then(pickUp)
    .catch((e) => showConn("could not load messages: " + e.message, "bad")).finally(() => stream.connect());
}
