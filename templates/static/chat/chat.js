// Thread page: renders messages, streams a run over the websocket, shows tool calls.
// Assistant HTML always comes from the server (markdown-it + nh3); streamed text is shown
// as plain text until the message completes.
(function () {
  "use strict";
  var box = document.getElementById("messages");
  if (!box) return;
  var threadId = box.dataset.threadId;
  var form = document.getElementById("composer");
  var input = document.getElementById("input");
  var sendBtn = document.getElementById("send");
  var stopBtn = document.getElementById("stop");
  var conn = document.getElementById("conn");
  var ws = null, retry = 0, closedForGood = false;
  // The server's event vocabulary (agents/event_types.py), embedded by the page as JSON.
  var vocabNode = document.getElementById("event-vocabulary");
  var VOCAB = vocabNode ? JSON.parse(vocabNode.textContent) : {types: {}, terminal: []};
  var TERMINAL = new Set(VOCAB.terminal);
  var live = null; // {runId, turn, text, tools: {tool_call_id: row}}

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function statusLabel(s) {
    var labels = {complete: "", streaming: "writing…", truncated: "truncated", error: "error", cancelled: "cancelled"};
    return Object.prototype.hasOwnProperty.call(labels, s) ? labels[s] : s;
  }

  function toolRow(name, summary, status, detail) {
    var row = el("details", "tool " + (status || "running"));
    var sum = el("summary");
    sum.appendChild(el("span", "tool-name", name));
    sum.appendChild(el("span", "tool-args", summary || ""));
    sum.appendChild(el("span", "tool-status", status || "running"));
    row.appendChild(sum);
    row.appendChild(el("div", "tool-detail", detail || ""));
    return row;
  }

  function setToolStatus(row, status, detail) {
    row.className = "tool " + status;
    row.querySelector(".tool-status").textContent = status;
    if (detail !== undefined) row.querySelector(".tool-detail").textContent = detail;
  }

  function riskTone(level, env) {
    if (level === "dangerous") return "dangerous";
    if (level === "guarded") return "write " + (env || "");
    return "read";
  }

  // An approval card: the server owns the countdown; the button only mirrors it.
  function approvalCard(a) {
    var card = el("div", "card approval " + (a.risk_level || ""));
    card.dataset.id = a.tool_call_id;
    var head = el("div", "approval-head");
    head.appendChild(el("strong", "", "Approve " + a.tool + "?"));
    head.appendChild(el("span", "badge tone", riskTone(a.risk_level, a.env_context)));
    if (a.env_context) head.appendChild(el("span", "badge env env-" + a.env_context, a.env_context));
    card.appendChild(head);
    card.appendChild(el("div", "approval-args", a.arguments_summary || "(no arguments)"));
    if (a.description) card.appendChild(el("div", "approval-why muted", "Why the agent asks: " + a.description));
    var actions = el("div", "approval-actions");
    var approve = el("button", "approve", "Approve");
    var deny = el("button", "deny secondary", "Deny");
    var note = el("span", "approval-note muted");
    note.setAttribute("aria-live", "polite");
    actions.appendChild(approve); actions.appendChild(deny); actions.appendChild(note);
    card.appendChild(actions);
    var readyAt = (a.requested_at_ms || Date.now()) + (a.countdown_s || 0) * 1000;
    function tick() {
      var left = Math.ceil((readyAt - Date.now()) / 1000);
      if (left > 0 && !card.dataset.state) {
        approve.disabled = true;
        note.textContent = "Dangerous: you can approve in " + left + " s";
        setTimeout(tick, 250);
      } else if (!card.dataset.state) {
        approve.disabled = false;
        note.textContent = a.countdown_s ? "Dangerous: check the arguments before approving." : "";
      }
    }
    tick();
    function decide(decision) {
      if (!ws || ws.readyState !== 1) return;
      approve.disabled = deny.disabled = true;
      ws.send(JSON.stringify({type: "approval.decide", tool_call_id: a.tool_call_id, decision: decision}));
    }
    approve.addEventListener("click", function () { decide("approve"); });
    deny.addEventListener("click", function () { decide("deny"); });
    return card;
  }

  function resolveCard(id, decision, by) {
    var card = box.querySelector('.card.approval[data-id="' + id + '"]');
    if (!card) return;
    card.dataset.state = decision;
    card.classList.add("resolved");
    card.querySelectorAll("button").forEach(function (b) { b.remove(); });
    var text = {approve: "Approved", deny: "Denied — operation cancelled", superseded: "Not run: a new message was sent",
                cancelled: "Not run: the run was cancelled"}[decision] || decision;
    card.querySelector(".approval-note").textContent = text + (by ? " by " + by : "");
  }

  function showProdBanner() {
    var b = document.getElementById("prod-banner");
    if (b) b.hidden = false;
  }

  function newTurn() {
    var turn = el("article", "msg assistant");
    turn.appendChild(el("div", "who", "Assistant"));
    turn.appendChild(el("div", "tools"));
    var body = el("div", "body streaming");
    turn.appendChild(body);
    turn.appendChild(el("div", "meta"));
    box.appendChild(turn);
    return turn;
  }

  // "Save to knowledge" on a message; the form and the request live in knowledge/save.js.
  function saveAction(messageId) {
    var slot = el("div", "kb-save-slot");
    var button = el("button", "link kb-save", "Save to knowledge");
    button.type = "button";
    button.dataset.messageId = messageId;
    slot.appendChild(button);
    return slot;
  }

  function renderMessages(messages) {
    box.textContent = "";
    var turn = null, lastRun = null;
    messages.forEach(function (m) {
      if (m.role === "user") {
        var u = el("article", "msg user");
        u.appendChild(el("div", "who", "You"));
        u.appendChild(el("div", "body", m.content));
        u.appendChild(saveAction(m.id));
        box.appendChild(u);
        turn = null;
        return;
      }
      if (m.role === "tool") return;
      if (m.role !== "assistant") return;
      if (!turn || m.run_id !== lastRun) turn = newTurn();
      lastRun = m.run_id;
      var tools = turn.querySelector(".tools");
      (m.tool_calls || []).forEach(function (c) {
        var st = c.status === "succeeded" ? "succeeded" : (c.status || "failed");
        var row = toolRow(c.name, c.arguments_summary || "", st, c.summary || "");
        if (c.tool_call_id) row.dataset.id = c.tool_call_id;
        tools.appendChild(row);
        if (c.status === "awaiting_approval") {
          tools.appendChild(approvalCard({tool_call_id: c.tool_call_id, tool: c.name, arguments_summary: c.arguments_summary,
            risk_level: c.risk_level, env_context: c.env_context, countdown_s: c.countdown_s,
            requested_at_ms: c.requested_at ? Date.parse(c.requested_at) : Date.now()}));
          if (c.env_context === "prod") showProdBanner();
        }
      });
      var body = turn.querySelector(".body");
      if (m.content_html && m.content) {
        body.classList.remove("streaming");
        body.innerHTML = m.content_html; // sanitised server-side (nh3)
      } else if (m.status === "streaming") {
        body.textContent = m.content;
        pendingRun = m.run_id;
      }
      var meta = turn.querySelector(".meta");
      var bits = [];
      if (statusLabel(m.status)) bits.push(statusLabel(m.status));
      if (m.error && m.error.message) bits.push(m.error.message);
      meta.textContent = bits.join(" — ");
      meta.className = "meta " + m.status;
      if (m.content && m.status !== "streaming") {
        var oldSave = turn.querySelector(".kb-save-slot");
        if (oldSave) oldSave.remove();  // one action per turn: its latest message with text
        turn.appendChild(saveAction(m.id));
      }
      if (m.citations && m.citations.length) {
        // One line per source item, with every number that cites one of its passages.
        var cites = el("ul", "citations"), byItem = {}, order = [];
        m.citations.forEach(function (c) {
          if (!byItem[c.item_id]) { byItem[c.item_id] = {title: c.title, ns: []}; order.push(c.item_id); }
          byItem[c.item_id].ns.push(c.n);
        });
        order.forEach(function (id) {
          var li = el("li");
          li.appendChild(el("span", "cite-n", byItem[id].ns.map(function (n) { return "[" + n + "]"; }).join("")));
          var link = el("a", null, byItem[id].title);  // the source → the item's page
          link.href = "/knowledge/" + encodeURIComponent(id) + "/";
          li.appendChild(link);
          cites.appendChild(li);
        });
        turn.appendChild(cites);
      }
      if (m.status !== "streaming") body.classList.remove("streaming");
    });
    box.scrollTop = box.scrollHeight;
    return {turn: turn, runId: lastRun};
  }

  function offerRetry() {  // a retryable failure (rate limit, network, 5xx): send the question again
    var users = box.querySelectorAll("article.msg.user .body");
    var turns = box.querySelectorAll("article.msg.assistant");
    if (!users.length || !turns.length) return;
    var question = users[users.length - 1].textContent;
    var again = el("button", "retry secondary", "Retry");
    again.addEventListener("click", function () {
      if (ws && ws.readyState === 1) { ws.send(JSON.stringify({type: "message.send", content: question})); busy(true); }
      again.remove();
    });
    turns[turns.length - 1].appendChild(again);
  }

  function refreshTitle() {  // the first message names the thread: show it without a reload
    fetch("/api/v1/threads/" + threadId + "/", {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (t) {
        if (!t || !t.title) return;
        var head = document.getElementById("thread-title");
        if (head) head.textContent = t.title;
        var item = document.querySelector('.thread-item[data-thread-id="' + threadId + '"] .t-title');
        if (item) item.textContent = t.title;
        document.title = t.title + " · chatplatform";
      });
  }

  function loadMessages() {
    pendingRun = null;
    return fetch("/api/v1/threads/" + threadId + "/messages/", {credentials: "same-origin"})
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(renderMessages)
      .catch(function (e) { showConn("could not load messages: " + e.message, "bad"); });
  }

  function showConn(text, cls) { if (conn) { conn.textContent = text; conn.className = "conn " + (cls || ""); } }

  function busy(on) {
    if (sendBtn) sendBtn.disabled = on;
    if (stopBtn) stopBtn.hidden = !on;
  }

  var seen = {}; // run_id -> last seq handled (the server guarantees order; this drops repeats)
  var pendingRun = null; // a run still streaming when the page loaded: resume it from seq 0

  function onEvent(ev) {
    // While the page re-reads the thread after run.started, later events wait in order
    // (they are counted as seen when they are replayed, not when queued).
    if (live && !live.ready && ev.type !== "run.started") { live.queue.push(ev); return; }
    if (ev.run_id && ev.seq) {
      if (ev.type === "run.started") seen[ev.run_id] = 0;
      if ((seen[ev.run_id] || 0) >= ev.seq) return;
      seen[ev.run_id] = ev.seq;
    }
    if (ev.type === "error" && ev.code === "events_missing") { live = null; loadMessages(); return; }
    switch (TERMINAL.has(ev.type) ? "terminal" : ev.type) {
      case "run.started":
        var started = {runId: ev.run_id, turn: null, tools: {}, ready: false, queue: []};
        live = started;
        busy(true);
        loadMessages().then(function (last) {
          if (live !== started) return;
          if (last && last.runId === ev.run_id && last.turn) {
            // The run's (still empty) message was already drawn: stream into it.
            started.turn = last.turn;
            started.turn.querySelector(".body").textContent = "";
            started.turn.querySelector(".body").classList.add("streaming");
          } else {
            started.turn = newTurn();
          }
          started.ready = true;
          var queued = started.queue.splice(0);
          queued.forEach(onEvent);
          box.scrollTop = box.scrollHeight;
        });
        break;
      case "text.delta":
        if (!live) return;
        if (!live.turn) live.turn = newTurn();
        var body = live.turn.querySelector(".body");
        body.textContent += ev.delta;
        box.scrollTop = box.scrollHeight;
        break;
      case "tool.started":
        if (!live) return;
        if (!live.turn) live.turn = newTurn();
        var row = toolRow(ev.name, ev.arguments_summary, "running");
        live.tools[ev.tool_call_id] = row;
        live.turn.querySelector(".tools").appendChild(row);
        break;
      case "tool.progress":
        if (live && live.tools[ev.tool_call_id]) live.tools[ev.tool_call_id].querySelector(".tool-detail").textContent = ev.label;
        break;
      case "tool.retry":
        if (live && live.tools[ev.tool_call_id]) setToolStatus(live.tools[ev.tool_call_id], "retrying");
        break;
      case "tool.timeout":
        if (live && live.tools[ev.tool_call_id]) {
          var trow = live.tools[ev.tool_call_id];
          setToolStatus(trow, "timed out", ev.status_unknown ? "outcome unknown — check before retrying" : "timed out");
          if (ev.retryable) {
            var again = el("button", "retry secondary", "Retry");
            var tname = trow.querySelector(".tool-name").textContent;
            again.addEventListener("click", function () {
              if (ws && ws.readyState === 1) ws.send(JSON.stringify({type: "message.send", content: "Please retry the " + tname + " call."}));
              again.remove();
            });
            trow.appendChild(again);
          }
        }
        break;
      case "approval.requested":
        if (!live) return;
        if (!live.turn) live.turn = newTurn();
        if (live.tools[ev.tool_call_id]) setToolStatus(live.tools[ev.tool_call_id], "awaiting approval");
        live.turn.querySelector(".tools").appendChild(approvalCard(ev));
        live.turn.querySelector(".body").classList.remove("streaming");  // waiting for a person, not writing
        if (ev.env_context === "prod") showProdBanner();
        busy(false); // a new message may be sent instead of deciding
        if (stopBtn) stopBtn.hidden = false;
        break;
      case "approval.resolved":
        resolveCard(ev.tool_call_id, ev.decision, ev.decided_by);
        if (ev.decision === "approve" || ev.decision === "deny") busy(true);
        break;
      case "tool.completed":
        if (live && live.tools[ev.tool_call_id]) setToolStatus(live.tools[ev.tool_call_id], ev.status, ev.summary);
        break;
      case "permission.denied":
        if (!live) return;
        if (!live.turn) live.turn = newTurn();
        var card = el("div", "card denied");
        card.textContent = "Permission denied: " + ev.tool + (ev.required_role ? " needs the " + ev.required_role + " role" : "") +
          (ev.alternatives && ev.alternatives.length ? ". You can use: " + ev.alternatives.join(", ") : ".");
        live.turn.querySelector(".tools").appendChild(card);
        break;
      case "knowledge.saved":
        showConn("saved to knowledge: " + ev.title, "ok");
        break;
      case "knowledge.changed":
        // Knowledge tabs of this browser refresh (knowledge/knowledge.js); so does the rail link.
        if (window.BroadcastChannel) new BroadcastChannel("chatplatform-knowledge").postMessage(ev);
        var kbLink = document.getElementById("rail-knowledge");
        if (kbLink) kbLink.classList.add("changed");
        break;
      case "terminal": // run.completed, run.failed, run.cancelled
        busy(false);
        live = null;
        refreshTitle();
        if (conn && conn.classList.contains("bad")) showConn("connected", "ok");
        loadMessages().then(function () {
          if (ev.type === "run.failed" && ev.error) {
            showConn(ev.error.message, "bad");
            if (ev.retryable) offerRetry();
          }
        });
        break;
      case "error":
        showConn(ev.message, "bad");
        if (ev.tool_call_id) {  // a refused decision: let the person try again
          var c = box.querySelector('.card.approval[data-id="' + ev.tool_call_id + '"]');
          if (c) c.querySelectorAll("button").forEach(function (b) { b.disabled = false; });
        } else if (!live) {
          busy(false);
        }
        break;
    }
  }

  function connect() {
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    ws = new WebSocket(proto + location.host + "/ws/threads/" + threadId + "/");
    ws.onopen = function () {
      retry = 0;
      showConn("connected", "ok");
      // Pick the stream up where this page left it (or from the start for a run that was
      // already streaming when the page loaded): the server sends exactly the missed events.
      var runId = live ? live.runId : pendingRun;
      if (runId) {
        if (!live) seen[runId] = 0;
        ws.send(JSON.stringify({type: "run.resume", run_id: runId, after_seq: seen[runId] || 0}));
      }
    };
    ws.onmessage = function (m) {
      try { onEvent(JSON.parse(m.data)); } catch (e) { console.error(e); }
    };
    ws.onclose = function (e) {
      if (e.code === 4403 || e.code === 4404) { closedForGood = true; showConn("no access to this chat", "bad"); return; }
      if (closedForGood) return;
      var wait = Math.min(10000, 500 * Math.pow(2, retry++));
      showConn("reconnecting…", "warn");
      setTimeout(connect, wait);
    };
  }

  function send() {
    var text = input.value;
    // While a reply is being written the text stays in the box (nothing is lost).
    if (!text.trim() || !ws || ws.readyState !== 1 || (sendBtn && sendBtn.disabled)) return;
    var frame = {type: "message.send", content: text};
    var grounded = document.getElementById("send-grounded");
    var priv = document.getElementById("send-private");
    if (grounded) frame.grounded = grounded.checked;     // per-send overrides of the thread's settings
    if (priv) frame.include_private = priv.checked;
    ws.send(JSON.stringify(frame));
    input.value = "";
    busy(true);
  }

  if (form) {
    form.addEventListener("submit", function (e) { e.preventDefault(); send(); });
    input.addEventListener("keydown", function (e) {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
    });
    stopBtn.addEventListener("click", function () {
      if (live && ws && ws.readyState === 1) ws.send(JSON.stringify({type: "run.cancel", run_id: live.runId}));
    });
  }
  loadMessages().then(connect);
})();
