// One handler per server event type (DESIGN §7). Each is idempotent for a replayed event
// (a resumed stream after a reload replays from seq 1): rows and cards are found by id
// before they are drawn.
import { el } from "./dom.js";
import { formatList, gettext, interpolate } from "./i18n.js";
import { LiveText } from "./live-text.js";
import { toolRow, setToolStatus, approvalCard, resolveCard, progressCard } from "./tools.js";
import { elicitationCard, resolveElicitation, resourceLinks } from "./elicitation.js";

// ``vocabulary`` is the server's declaration (agents/event_types.py, embedded by the page):
// its terminal types end the live run; a handler for an undeclared type is a bug.
export function makeHandlers(app, vocabulary) {
  const handlers = baseHandlers(app);
  for (const name of vocabulary.terminal) handlers[name] = (ev) => app.endLive(ev);
  for (const name of Object.keys(handlers)) {
    if (!vocabulary.types[name]) throw new Error("handler for an undeclared event type: " + name);
  }
  return handlers;
}

function baseHandlers(app) {
  const {view, box} = app;

  function turnOf(live) {
    if (!live.turn) live.turn = view.newTurn(live.runId);
    if (!live.textView) live.textView = new LiveText(live.turn.querySelector(".body"));
    return live.turn;
  }

  function rowOf(live, id) {
    return live && live.turn ? live.turn.querySelector('details.tool[data-id="' + CSS.escape(id) + '"]') : null;
  }

  return {
    "run.started"(ev) {
      const live = app.startLive(ev.run_id);
      app.busy(true);
      app.composerSent(ev);
      view.load().then((last) => {
        if (app.live !== live) return;
        if (last && last.runId === ev.run_id && last.turn) {
          live.turn = last.turn;  // the run's message was already drawn: stream into it
          live.turn.querySelector(".msg-actions").replaceChildren();
        } else {
          live.turn = view.newTurn(ev.run_id);
        }
        live.textView = new LiveText(live.turn.querySelector(".body"));
        live.textView.reset();
        live.turn.querySelector(".body").classList.add("streaming");
        app.liveReady(live);
        box.scrollTop = box.scrollHeight;
      }).catch((e) => app.showConn(interpolate(gettext("could not load messages: %(error)s"), {error: e.message}, true), "bad"));
    },

    "run.queued"(ev) {  // the reply to this page's send: taken, waiting for a worker
      app.queued(ev.run_id, ev.user_message_id);
    },

    "text.delta"(ev) {
      const live = app.live;
      if (!live) return;
      turnOf(live);
      if (live.messageEnded) {
        // A new message of the run (the next round, or a round asked again after its worker
        // was lost): its text replaces the last one's, as the stored turn shows a run's last
        // message with text.
        live.messageEnded = false;
        live.overlap = null;
        live.textView.reset();
      }
      const text = live.overlap ? live.overlap.take(ev.delta) : ev.delta;  // after a hole: live-run.js missed
      if (live.overlap && live.overlap.done) live.overlap = null;
      if (text) live.textView.append(text);
      app.stickToBottom();
    },

    "tool.started"(ev) {
      const live = app.live;
      if (!live) return;
      const turn = turnOf(live);
      const row = rowOf(live, ev.tool_call_id);
      if (row) { setToolStatus(row, "running"); return; }
      turn.querySelector(".tools").appendChild(toolRow({id: ev.tool_call_id, name: ev.name, summary: ev.arguments_summary,
                                                         status: "running"}));
    },

    "tool.progress"(ev) {
      const row = rowOf(app.live, ev.tool_call_id);
      if (row) row.querySelector(".tool-detail").textContent = ev.label;
    },

    "tool.retry"(ev) {
      const row = rowOf(app.live, ev.tool_call_id);
      if (row) setToolStatus(row, "retrying", interpolate(gettext("attempt %(n)s"), {n: ev.attempt}, true));
    },

    "tool.timeout"(ev) {
      const row = rowOf(app.live, ev.tool_call_id);
      if (row) setToolStatus(row, ev.status_unknown ? "status_unknown" : "timeout",
                             ev.status_unknown ? gettext("outcome unknown — check before retrying") : gettext("timed out"));
    },

    "tool.completed"(ev) {
      const row = rowOf(app.live, ev.tool_call_id);
      if (row) setToolStatus(row, ev.status, ev.summary);
    },

    "approval.requested"(ev) {
      const live = app.live;
      if (!live) return;
      const turn = turnOf(live);
      const row = rowOf(live, ev.tool_call_id);
      if (row) setToolStatus(row, "awaiting_approval", undefined, ev.connect ? gettext("waiting for sign-in") : "");
      if (!turn.querySelector('.card.approval[data-id="' + CSS.escape(ev.tool_call_id) + '"]')) {
        const card = approvalCard(ev, (d) => app.decide(ev.tool_call_id, d));
        turn.querySelector(".tools").appendChild(card);
        card.scrollIntoView({block: "nearest"});  // it waits for someone: its buttons in view, not under the composer
      }
      turn.querySelector(".body").classList.remove("streaming");  // waiting for a person, not writing
      const meta = turn.querySelector(".meta");
      meta.textContent = "";  // the card says what it waits for, once
      meta.className = "meta awaiting";
      if (ev.env_context === "prod") app.showProd();
      app.busy(false, {canStop: true});  // a new message may be sent instead of deciding
    },

    // An MCP server asks the person something mid-call: a card under the call (replayed after
    // a reload while the run still waits: found by id, drawn once).
    "elicitation.requested"(ev) {
      const live = app.live;
      if (!live) return;
      const turn = turnOf(live);
      if (box.querySelector('.card.elicitation[data-id="' + CSS.escape(ev.elicitation_id) + '"]')) return;
      const card = elicitationCard(ev, app.elicitationUrl);
      const row = rowOf(live, ev.tool_call_id);
      if (row) { row.after(card); setToolStatus(row, "running", undefined, gettext("waiting for your answer")); }
      else turn.querySelector(".tools").appendChild(card);
      turn.querySelector(".body").classList.remove("streaming");
      const meta = turn.querySelector(".meta");
      meta.textContent = "";  // the card says what the run waits for (and no "nothing new" count)
      meta.className = "meta awaiting";
      card.scrollIntoView({block: "nearest"});
      const first = card.querySelector("input, select");
      if (first) first.focus({preventScroll: true});
    },

    "elicitation.resolved"(ev) {
      const live = app.live;
      const found = box.querySelector('.card.elicitation[data-id="' + CSS.escape(ev.elicitation_id) + '"]');
      if (found && found.dataset.state) return;
      const card = resolveElicitation(found, ev);
      const row = rowOf(live, ev.tool_call_id);
      if (row) setToolStatus(row, "running");
      const meta = live && live.turn && live.turn.querySelector(".meta");
      if (meta && meta.classList.contains("awaiting")) { meta.textContent = ""; meta.className = "meta"; }
      if (!found && live) {
        if (row) row.after(card); else turnOf(live).querySelector(".tools").appendChild(card);
      }
    },

    "resource.linked"(ev) {
      const row = rowOf(app.live, ev.tool_call_id);
      if (row && !row.dataset.links) { row.dataset.links = "1"; row.after(resourceLinks(ev.links)); }
    },

    "approval.progress"(ev) {
      const card = box.querySelector('.card.approval[data-id="' + CSS.escape(ev.tool_call_id) + '"]');
      if (card) progressCard(card, ev);
    },

    "inbox.changed"() {},  // the rail badge keeps its own socket (approvals-badge.js)
    "thread.renamed"(ev) {  // the model titled the chat after its first answer (agents/titles.py)
      document.dispatchEvent(new CustomEvent("chat:renamed", {detail: {id: ev.thread_id, title: ev.title}}));
    },

    "approval.resolved"(ev) {
      const card = box.querySelector('.card.approval[data-id="' + CSS.escape(ev.tool_call_id) + '"]');
      if (card) resolveCard(card, ev.decision, ev.decided_by);
      if (ev.decision === "approve" || ev.decision === "deny") {
        app.busy(true);
        const meta = app.live && app.live.turn && app.live.turn.querySelector(".meta");
        if (meta) { meta.textContent = ""; meta.className = "meta"; }
      }
    },

    "permission.denied"(ev) {
      const live = app.live;
      if (!live) return;
      const card = el("div", "card denied");
      const values = {tool: ev.tool, role: ev.required_role, alternatives: formatList(ev.alternatives || [])};
      let text;
      if (ev.required_role && ev.alternatives && ev.alternatives.length) {
        text = gettext("Permission denied: %(tool)s needs the %(role)s role. You can use: %(alternatives)s");
      } else if (ev.required_role) {
        text = gettext("Permission denied: %(tool)s needs the %(role)s role.");
      } else if (ev.alternatives && ev.alternatives.length) {
        text = gettext("Permission denied: %(tool)s. You can use: %(alternatives)s");
      } else {
        text = gettext("Permission denied: %(tool)s.");
      }
      card.textContent = interpolate(text, values, true);
      turnOf(live).querySelector(".tools").appendChild(card);
    },

    "knowledge.saved"(ev) {
      app.showConn(interpolate(gettext("saved to knowledge: %(title)s"), {title: ev.title}, true), "ok");
    },

    "knowledge.changed"(ev) {
      if (window.BroadcastChannel) new BroadcastChannel("chatplatform-knowledge").postMessage(ev);
      const link = document.getElementById("rail-knowledge");
      if (link) link.classList.add("changed");
    },

    "message.completed"() {
      if (app.live) app.live.messageEnded = true;  // the next text.delta starts a new message
    },

    "error"(ev) {
      if (ev.code === "events_missing") { app.missed(ev); return; }
      // A refused send says why once: beside the text it keeps (the composer's note) — or, for a
      // spent budget, in the budget banner, which takes the refusal's words (usage/thread_usage.js).
      if (ev.tool_call_id) {  // a refused decision: let the person try again
        app.showConn(ev.message, "bad");
        const card = box.querySelector('.card.approval[data-id="' + CSS.escape(ev.tool_call_id) + '"]');
        if (card) card.querySelectorAll("button").forEach((b) => { b.disabled = false; });
      } else if (!app.composerRejected(ev.code === "budget_exceeded" ? {...ev, message: ""} : ev)) {
        app.showConn(ev.message, "bad");  // not the reply to a send of this page
      }
      // "service unavailable" on the label (the refusal's words in its title) goes back by
      // itself once the service answers again (live-run.js).
      if (ev.code === "service_unavailable") app.unavailable(ev.message);
    },
  };
}
