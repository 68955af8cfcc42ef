// Thread page entry point: wires the view, the stream, the live run (live-run.js), the
// handlers and the composer. Every URL comes from the page's data-url-* attributes
// (templates/chat/app.html).
import { api, csrf, urlFor } from "./api.js";
import { ThreadView } from "./thread.js";
import { ThreadStream } from "./stream.js";
import { makeHandlers } from "./handlers.js";
import { LiveText } from "./live-text.js";
import { StoredOverlap } from "./stored-overlap.js";
import { Composer } from "./composer.js";
import { Attachments } from "./attachments.js";
import { createLiveRun } from "./live-run.js";

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
    // POST an answer to an MCP server's question (elicitation.js); the template's id is all zeros
    elicitationUrl: (id) => String(d.urlElicitation || "").replace("00000000-0000-0000-0000-000000000000",
                                                                  encodeURIComponent(id)),
  };

  function showConn(text, kind) {
    if (!conn) return;
    conn.textContent = text;
    conn.className = "conn " + (kind || "");
    conn.title = text;
  }
  const status = {
    show(text, kind, title) { showConn(text, kind); if (conn && title !== undefined) conn.title = title; },
    text: () => (conn ? conn.textContent : ""),
    bad: () => !!conn && conn.classList.contains("bad"),
  };

  const sendOptions = () => {
    const out = {};
    const grounded = document.getElementById("send-grounded");
    const priv = document.getElementById("send-private");
    if (grounded) out.grounded = grounded.checked;
    if (priv) out.include_private = priv.checked;
    return out;
  };

  let run = null;  // the live run (live-run.js); the callbacks below run once it is made
  const proto = location.protocol === "https:" ? "wss://" : "ws://";
  const stream = new ThreadStream({
    url: proto + location.host + d.wsPath,
    onEvent: (ev) => run.dispatch(ev),
    onState: (state, detail) => {
      run.connection(state, detail);
      // A title the model wrote while this socket was away (thread.renamed is not in the
      // event log): read it on every (re)connect.
      if (state === "open") page.refreshTitle();
    },
  });
  const decide = (id, decision) => stream.send({type: "approval.decide", tool_call_id: id, decision});
  const view = new ThreadView({box, config, decide, status: showConn, options: sendOptions});

  let composer = null;
  const attachments = composerForm ? new Attachments({
    form: composerForm,
    chips: document.getElementById("attachment-chips"),
    picker: document.getElementById("attach-input"),
    pickButton: document.getElementById("attach"),
    input: document.getElementById("input"),
    dropTargets: [composerForm, box],
    say: (message) => composer && composer.say(message, "attachment"),
    onChange: () => composer && composer.update(),
  }) : null;
  composer = composerForm ? new Composer({
    form: composerForm,
    input: document.getElementById("input"),
    sendBtn: document.getElementById("send"),
    stopBtn: document.getElementById("stop"),
    counter: document.getElementById("composer-counter"),
    limits: {maxChars: Number(d.maxChars), maxBytes: Number(d.maxFrameBytes)},
    send: (text) => {
      run.sending();
      return stream.send({type: "message.send", content: text, attachments: attachments.ids(), ...sendOptions()});
    },
    stop: () => run.stop(),
    attachments,
  }) : null;

  const page = {
    drawQuestion(m) {
      if (box.querySelector('article.msg.user[data-message-id="' + CSS.escape(m.id) + '"]')) return;
      if (!m.attachments && attachments) m.attachments = attachments.sent;  // the files just sent with it
      box.appendChild(view.userMessage(m));
      box.scrollTop = box.scrollHeight;
    },
    scrollToEnd() { box.scrollTop = box.scrollHeight; },
    stickToBottom() {
      if (box.scrollHeight - box.scrollTop - box.clientHeight < 160) box.scrollTop = box.scrollHeight;
    },
    lastQuestionId() {
      const mine = box.querySelectorAll("article.msg.user[data-message-id]");
      return mine.length ? mine[mine.length - 1].dataset.messageId : null;
    },
    clearNotConnectedNotes() {
      for (const note of box.querySelectorAll('.approval-note[data-kind="not_connected"]')) {
        note.textContent = "";
        delete note.dataset.kind;
      }
    },
    refreshTitle() {  // the first message names the thread: show it without a reload
      api("GET", urlFor(config.urls.thread, config.threadId)).then((t) => {
        if (!t || !t.title) return;
        document.dispatchEvent(new CustomEvent("chat:renamed", {detail: {id: config.threadId, title: t.title}}));
      }).catch(() => {});
    },
  };

  const vocabulary = JSON.parse(document.getElementById("event-vocabulary").textContent);  // agents/event_types.py
  let handlers = null;
  run = createLiveRun({
    stream, view, composer, api, urlFor, status, page,
    urls: config.urls, threadId: config.threadId,
    textView: (turn) => new LiveText(turn.querySelector(".body")),
    overlap: (text) => new StoredOverlap(text),
    handle(ev) {
      box.dispatchEvent(new CustomEvent("chat:event", {detail: ev}));  // e.g. budget.warning (usage/thread_usage.js)
      const handler = handlers[ev.type];
      if (handler) handler(ev);
      else if (!vocabulary.types[ev.type]) console.warn("undeclared event type", ev.type);
    },
  });

  // What the handlers (handlers.js) see of the page.
  const app = {
    box, view, showConn, showProd: config.showProd, decide,
    elicitationUrl: config.elicitationUrl,
    get live() { return run.live; },
    startLive: run.startLive, liveReady: run.liveReady, endLive: run.endLive, queued: run.queued,
    missed: run.missed, busy: run.busy, unavailable: run.unavailable, stickToBottom: run.stickToBottom,
    composerSent: run.composerSent, composerRejected: run.composerRejected,
  };
  handlers = makeHandlers(app, vocabulary);
  view.onBusy = (on) => run.busy(on);
  document.addEventListener("chat:stop", () => run.stop());
  setInterval(run.tick, 1000);
  run.begin();

  // A temporary chat is closed when its page is left (another chat, a reload, the tab closed):
  // the server deletes it (unless a run is unfinished: then the reaper does, after its TTL).
  if (d.temporary === "1" && config.canWrite) {
    window.addEventListener("pagehide", () => {
      fetch(urlFor(config.urls.thread, config.threadId), {
        method: "DELETE", keepalive: true, credentials: "same-origin", headers: {"X-CSRFToken": csrf()},
      }).catch(() => {});
    });
  }
}
