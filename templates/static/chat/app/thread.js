// The conversation: draws the selected branch from GET …/messages/ and owns the message
// actions (copy, edit and resend, regenerate, ‹ n/k › versions, save to knowledge).
import { api, urlFor } from "./api.js";
import { gettext } from "./i18n.js";
import { el, button, timeElement } from "./dom.js";
import { renderInto, copyText } from "./markdown.js";
import { toolRow, approvalCard, resolveCard, setToolStatus } from "./tools.js";
import { citationList, wireCitationPreviews } from "./citations.js";
import { attachmentList } from "./attachments.js";
import { elicitationCard, resolveElicitation, resourceLinks } from "./elicitation.js";

const STATUS_LABEL = {complete: "", streaming: gettext("writing…"), truncated: gettext("truncated"), error: gettext("error"),
                      cancelled: gettext("cancelled")};

export class ThreadView {
  constructor({box, config, decide, status, options}) {
    this.box = box;
    this.config = config;
    this.decide = decide;        // (tool_call_id, decision) → bool (sent?)
    this.status = status;        // (text, kind) → void
    this.options = options;      // () → {grounded, include_private}
    this.citationsByTurn = new WeakMap();
    this.onBusy = () => {};
    wireCitationPreviews(box, (a) => {
      const turn = a.closest("article.msg");
      const list = (turn && this.citationsByTurn.get(turn)) || [];
      return list.find((c) => String(c.n) === a.dataset.n);
    }, config.urls.knowledgeItem);
  }

  async load() {
    const messages = await api("GET", urlFor(this.config.urls.messages, this.config.threadId));
    return this.render(messages);
  }

  // Draw the branch; returns {runId, turn, openRun, openText} for the last turn and any run
  // that is still open (streaming, queued or waiting for approval) with its stored text so far,
  // the run of an unanswered last question (unanswered) and the last question (lastUser).
  render(messages) {
    // A waiting question's card is kept as it is (what the person typed so far) when the
    // thread is drawn again (the stream's run.started reloads it).
    const asking = new Map([...this.box.querySelectorAll(".card.elicitation:not(.resolved)")].map((c) => [c.dataset.id, c]));
    this.box.replaceChildren();
    let turn = null, lastRun = null, openRun = null, openText = "", waiting = false;
    for (const m of messages) {
      if (m.role === "user") {
        this.box.appendChild(this.userMessage(m));
        turn = null;
        continue;
      }
      if (m.role !== "assistant") continue;
      if (!turn || m.run_id !== lastRun) {
        turn = this.newTurn(m.run_id);
        turn.dataset.firstMessageId = m.id;
        if (m.versions && m.versions.count > 1) turn.querySelector(".msg-head").appendChild(this.versionNav(m));
      }
      lastRun = m.run_id;
      turn.dataset.lastMessageId = m.id;
      const tools = turn.querySelector(".tools");
      for (const c of m.tool_calls || []) {
        const row = toolRow({id: c.tool_call_id, name: c.name, summary: c.arguments_summary, status: c.status || "failed",
                             detail: c.summary});
        tools.appendChild(row);
        // An MCP server's questions (a pending one: its card, answered by the run that waits) and links.
        if (c.links && c.links.length) { row.dataset.links = "1"; tools.appendChild(resourceLinks(c.links)); }
        for (const q of c.elicitations || []) {
          const ev = {...q, tool_call_id: c.tool_call_id, action: q.status};
          tools.appendChild(q.status !== "pending" ? resolveElicitation(null, ev)
            : asking.get(q.elicitation_id) || elicitationCard(ev, this.config.elicitationUrl));
          if (q.status === "pending") {
            openRun = m.run_id;
            turn.dataset.asking = "1";
            setToolStatus(row, "running", undefined, gettext("waiting for your answer"));
          }
        }
        // A call still to run (back from an approval or a connect card while the page loaded):
        // its run goes on, so follow it — the answer comes on the stream, not in this list.
        if (["pending", "approved", "running"].includes(c.status)) openRun = m.run_id;
        if (c.status === "awaiting_approval") {
          if (c.approval && c.approval.connect) setToolStatus(row, "awaiting_approval", undefined, gettext("waiting for sign-in"));
          waiting = (c.approval && c.approval.waiting_text) || true;
          openRun = m.run_id;
          tools.appendChild(approvalCard({...(c.approval || {}), tool_call_id: c.tool_call_id, tool: c.name,
            arguments_summary: c.arguments_summary, risk_level: c.risk_level, env_context: c.env_context, countdown_s: c.countdown_s,
            requested_at_ms: c.requested_at ? Date.parse(c.requested_at) : Date.now()},
            (d) => this.decide(c.tool_call_id, d)));
          if (c.env_context === "prod") this.config.showProd();
        } else if (c.decided_by || ["approve", "deny", "superseded", "cancelled"].includes(c.decision)) {
          const card = approvalCard({tool_call_id: c.tool_call_id, tool: c.name, arguments_summary: c.arguments_summary,
            risk_level: c.risk_level, env_context: c.env_context}, null);
          resolveCard(card, c.decision || "approve", c.decided_by);
          tools.appendChild(card);
        }
      }
      const body = turn.querySelector(".body");
      if (m.status === "streaming") {
        openRun = m.run_id;
        openText = m.content || "";
        body.classList.add("streaming");
        renderInto(body, m.content, {citations: m.citations || []});
      } else if (m.content) {
        body.classList.remove("streaming");
        renderInto(body, m.content, {citations: m.citations || []});
        turn.dataset.text = m.content;
      }
      const meta = turn.querySelector(".meta");
      const bits = [];
      if (STATUS_LABEL[m.status]) bits.push(STATUS_LABEL[m.status]);
      if (m.error && m.error.message) bits.push(m.error.message);
      meta.textContent = bits.join(" — ");
      meta.className = "meta " + m.status;
      turn.dataset.status = m.status;
      if (turn.dataset.asking) { meta.textContent = ""; meta.className = "meta awaiting"; }  // its card says what it waits for
      if (m.citations && m.citations.length) {
        this.citationsByTurn.set(turn, m.citations);
        const old = turn.querySelector(".sources");
        if (old) old.remove();
        turn.querySelector(".body").after(citationList(m.citations, m.content, this.config.urls.knowledgeItem));
      }
      if (m.status !== "streaming") body.classList.remove("streaming");
    }
    for (const t of this.box.querySelectorAll("article.msg.assistant")) this.finishTurn(t);
    if (waiting) {
      const last = this.box.querySelector("article.msg.assistant:last-of-type .meta");
      if (last) {
        last.textContent = "";  // its approval card says what it waits for, once
        last.className = "meta awaiting";
      }
    }
    this.box.scrollTop = this.box.scrollHeight;
    // Listeners (usage/thread_usage.js: tokens and cost per turn and thread) read the list.
    this.box.dispatchEvent(new CustomEvent("chat:messages", {detail: messages}));
    // A question with no answer under it: its run may still wait for a worker (live-run.js pickUp asks).
    const tail = messages.filter((m) => m.role === "user" || m.role === "assistant").pop();
    const unanswered = tail && tail.role === "user" && tail.run_id ? tail.run_id : null;
    const you = messages.filter((m) => m.role === "user").pop();
    const lastUser = you ? {id: you.id, content: you.content || ""} : null;
    // The last turn ended on tool calls with no answer yet: its run may be between a tool's
    // result and the model's answer (e.g. right after a connect card's callback) — live-run.js
    // pickUp asks whether it still runs.
    const lastAnswer = messages.filter((m) => m.role === "assistant").pop();
    const toolTail = !openRun && lastAnswer && !lastAnswer.content && (lastAnswer.tool_calls || []).length
      ? lastAnswer.run_id : null;
    return {turn, runId: lastRun, openRun, openText, waiting, unanswered, lastUser, toolTail};
  }

  userMessage(m) {
    const u = el("article", "msg user");
    u.dataset.messageId = m.id;
    const head = el("div", "msg-head");
    head.appendChild(el("span", "who", gettext("You")));
    head.appendChild(timeElement(m.created_at));
    if (m.versions && m.versions.count > 1) head.appendChild(this.versionNav(m));
    u.appendChild(head);
    const body = el("div", "body", m.content);
    body.dir = "auto";
    body.hidden = !m.content && !!(m.attachments && m.attachments.length);
    u.appendChild(body);
    if (m.attachments && m.attachments.length) u.appendChild(attachmentList(m.attachments));
    const actions = el("div", "msg-actions");
    actions.appendChild(this.copyAction(() => m.content));
    if (this.config.canWrite) actions.appendChild(button(gettext("Edit"), "link act-edit", () => this.startEdit(u, m), gettext("Edit and resend")));
    if (this.config.canSaveKnowledge) actions.appendChild(this.saveAction(m.id));
    u.appendChild(actions);
    return u;
  }

  newTurn(runId) {
    const turn = el("article", "msg assistant");
    if (runId) turn.dataset.runId = runId;
    const head = el("div", "msg-head");
    head.appendChild(el("span", "who", gettext("Assistant")));
    turn.appendChild(head);
    turn.appendChild(el("div", "tools"));
    const body = el("div", "body streaming");
    body.dir = "auto";
    turn.appendChild(body);
    turn.appendChild(el("div", "meta"));
    turn.appendChild(el("div", "msg-actions"));
    this.box.appendChild(turn);
    return turn;
  }

  // Actions once a turn is finished: copy its answer, regenerate it, save it.
  finishTurn(turn) {
    const actions = turn.querySelector(".msg-actions");
    actions.replaceChildren();
    if (turn.dataset.status === "streaming") return;
    if (turn.dataset.text) actions.appendChild(this.copyAction(() => turn.dataset.text));
    if (this.config.canWrite && turn.dataset.lastMessageId) {
      const retry = ["error", "truncated", "cancelled"].includes(turn.dataset.status);
      actions.appendChild(button(retry ? gettext("Retry") : gettext("Regenerate"), "link act-regenerate",
        () => this.regenerate(turn.dataset.lastMessageId),
        retry ? gettext("Run this turn again") : gettext("Answer the same question again")));
    }
    if (this.config.canSaveKnowledge && turn.dataset.text) actions.appendChild(this.saveAction(turn.dataset.lastMessageId));
  }

  copyAction(text) {
    const b = button(gettext("Copy"), "link act-copy", () => copyText(text()).then(
      () => { b.textContent = gettext("Copied"); setTimeout(() => { b.textContent = gettext("Copy"); }, 1500); },
      () => { b.textContent = gettext("Copy failed"); }), gettext("Copy message"));
    return b;
  }

  saveAction(messageId) {  // the form and the request live in knowledge/save.js
    const slot = el("span", "kb-save-slot");
    const b = button(gettext("Save to knowledge"), "link kb-save");
    b.dataset.messageId = messageId;
    slot.appendChild(b);
    return slot;
  }

  versionNav(m) {
    const nav = el("span", "versions");
    nav.setAttribute("role", "group");
    nav.setAttribute("aria-label", gettext("Versions"));
    const {index, count, ids} = m.versions;
    const go = (i) => () => this.selectVersion(ids[i - 1]);
    const prev = button("‹", "link ver-prev", go(index - 1), gettext("Previous version"));
    const next = button("›", "link ver-next", go(index + 1), gettext("Next version"));
    prev.disabled = index <= 1 || !this.config.canWrite;
    next.disabled = index >= count || !this.config.canWrite;
    nav.append(prev, el("span", "ver-label", index + "/" + count), next);
    return nav;
  }

  async selectVersion(messageId) {
    try {
      await api("POST", urlFor(this.config.urls.branch, this.config.threadId), {message_id: messageId});
      await this.load();
    } catch (e) {
      this.status(e.message, "bad");
    }
  }

  async regenerate(messageId) {
    try {
      this.onBusy(true);
      await api("POST", urlFor(this.config.urls.regenerate, messageId), this.options());
      this.status(gettext("regenerating…"), "ok");
    } catch (e) {
      this.onBusy(false);
      this.status(e.message, "bad");
    }
  }

  startEdit(article, m) {
    if (article.querySelector(".edit-form")) return;
    const form = el("form", "edit-form");
    const area = el("textarea");
    area.value = m.content;
    area.rows = Math.min(12, Math.max(2, m.content.split("\n").length));
    area.dir = "auto";
    area.setAttribute("aria-label", gettext("Edit message"));
    const note = el("span", "edit-note muted");
    note.setAttribute("role", "status");
    const send = el("button", "", gettext("Save & send"));
    send.type = "submit";
    const cancel = button(gettext("Cancel"), "secondary", () => { form.remove(); article.classList.remove("editing"); });
    form.append(area, send, cancel, note);
    article.classList.add("editing");
    article.querySelector(".body").after(form);
    area.focus();
    form.addEventListener("keydown", (e) => { if (e.key === "Escape") cancel.click(); });
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      send.disabled = true;
      try {
        this.onBusy(true);
        await api("POST", urlFor(this.config.urls.edit, m.id), {content: area.value, ...this.options()});
        note.textContent = gettext("sent");
      } catch (err) {
        this.onBusy(false);
        note.textContent = err.message;  // the edited text stays in the box
        send.disabled = false;
      }
    });
  }
}
