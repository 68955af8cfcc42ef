// The approval inbox page: every call the signed-in person may decide now, across threads
// and workspaces, live (approvals-badge.js re-reads the list on each inbox.changed notice).
import { api } from "../app/api.js";
import { el } from "../app/dom.js";
import { inbox } from "../app/approvals-badge.js";
import { formatList, formatNumber, gettext, interpolate, ngettext } from "../app/i18n.js";
import { connectHref, timeLeftText } from "../app/tools.js";

const root = document.getElementById("inbox");
const empty = document.getElementById("inbox-empty");
const status = document.getElementById("inbox-status");
const cards = new Map();  // tool_call_id → card element

function timeLeft(iso) {
  if (!iso) return gettext("does not expire");
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  if (s <= 0) return gettext("expired");
  return interpolate(gettext("expires in %(time)s"), {time: timeLeftText(s)}, true);
}

function field(dl, label, value, cls) {
  dl.appendChild(el("dt", "", label));
  const dd = el("dd", cls || "", value);
  dl.appendChild(dd);
  return dd;
}

function card(item) {
  const a = item.approval || {};
  const c = el("article", "card approval inbox-item " + (item.risk_level || ""));
  c.dataset.id = item.id;
  const head = el("div", "approval-head");
  head.appendChild(el("strong", "", item.tool_name));
  // Each fact once: the risk and environment are badges here, the rule sentence says how many
  // approvals it needs, and the facts below add only what those do not say.
  head.appendChild(el("span", "badge tone", (item.risk || "") + (item.risk_level ? " (" + item.risk_level + ")" : "")));
  if (item.env_context) head.appendChild(el("span", "badge env env-" + item.env_context, item.env_context));
  c.appendChild(head);
  c.appendChild(el("p", "approval-rule", a.waiting_text || ""));
  const dl = el("dl", "inbox-facts");
  const chat = field(dl, gettext("Chat"), "");
  if (item.thread_visible) {  // an approver by role may decide without seeing the chat itself
    const thread = el("a", "", item.thread_title || gettext("Untitled chat"));
    thread.href = "/chat/" + encodeURIComponent(item.thread_id) + "/";
    chat.appendChild(thread);
  } else {
    chat.textContent = interpolate(gettext("%(title)s (not shared with you)"), {title: item.thread_title || gettext("Untitled chat")}, true);
  }
  field(dl, gettext("Workspace"), item.workspace);
  field(dl, gettext("Requested by"), a.requester || "");
  if (a.approvals_so_far) {
    const values = {count: a.approvals_so_far, needed: a.approvals_needed || 1, names: formatList(a.approved_by || [])};
    field(dl, gettext("Approvals"), interpolate(a.approved_by && a.approved_by.length
      ? gettext("%(count)s of %(needed)s — approved by %(names)s") : gettext("%(count)s of %(needed)s"), values, true));
  }
  const left = field(dl, gettext("Time left"), timeLeft(a.expires_at), "inbox-left");
  left.dataset.expiresAt = a.expires_at || "";
  c.appendChild(dl);
  const args = el("pre", "approval-args inbox-args");
  args.textContent = JSON.stringify(item.arguments_shown || item.arguments || {}, null, 2);  // items by title
  c.appendChild(args);
  if (a.connect) return connectItem(c, item, a);
  const actions = el("div", "approval-actions");
  const approve = el("button", "approve", gettext("Approve"));
  const deny = el("button", "deny secondary", gettext("Deny"));
  approve.type = deny.type = "button";
  const note = el("span", "approval-note muted");
  note.setAttribute("aria-live", "polite");
  actions.append(approve, deny, note);
  c.appendChild(actions);
  const readyAt = (item.requested_at ? Date.parse(item.requested_at) : Date.now()) + (item.countdown_s || 0) * 1000;
  const tick = () => {
    if (c.dataset.state || !c.isConnected && cards.get(item.id) !== c) return;
    const wait = Math.ceil((readyAt - Date.now()) / 1000);
    if (wait > 0) {
      approve.disabled = true;
      note.textContent = interpolate(gettext("Dangerous: you can approve in %(time)s"), {time: timeLeftText(wait)}, true);
      setTimeout(tick, 250);
    } else if (!c.dataset.busy) {
      approve.disabled = false;
      if (item.countdown_s) note.textContent = gettext("Dangerous: check the arguments before approving.");
    }
  };
  tick();
  const decide = async (decision) => {
    c.dataset.busy = "1";
    approve.disabled = deny.disabled = true;
    note.textContent = decision === "approve" ? gettext("Approving…") : gettext("Denying…");
    try {
      const out = await api("POST", "/api/v1/tool-calls/" + encodeURIComponent(item.id) + "/decision/", {decision});
      c.dataset.state = out.status;
      note.textContent = out.status === "awaiting_approval"
        ? gettext("Approved — waiting for a second approver") : (decision === "approve" ? gettext("Approved") : gettext("Denied"));
      inbox.refresh(null);
    } catch (err) {
      delete c.dataset.busy;
      approve.disabled = deny.disabled = false;
      note.textContent = err.message;
      note.classList.add("error");
      tick();
    }
  };
  approve.addEventListener("click", () => decide("approve"));
  deny.addEventListener("click", () => decide("deny"));
  return c;
}

// A call of an unattended run (API, no browser) parked until its person connects their own
// account: the link opens the consent page here; the run goes on by itself afterwards.
function connectItem(c, item, a) {
  c.classList.add("connect");
  const actions = el("div", "approval-actions");
  const href = connectHref(a.connect, "/chat/approvals/");
  if (href && a.requester === (document.body.dataset.user || "")) {
    const link = el("a", "button connect-link", interpolate(gettext("Connect %s"), [a.connect.name || ""]));
    link.href = href;
    actions.appendChild(link);
  }
  const deny = el("button", "deny secondary", gettext("Cancel"));
  deny.type = "button";
  const note = el("span", "approval-note muted");
  note.setAttribute("aria-live", "polite");
  deny.addEventListener("click", async () => {
    deny.disabled = true;
    try {
      await api("POST", "/api/v1/tool-calls/" + encodeURIComponent(item.id) + "/decision/", {decision: "deny"});
      c.dataset.state = "denied";
      note.textContent = gettext("Not connected — the call was not run");
      inbox.refresh(null);
    } catch (err) {
      deny.disabled = false;
      note.textContent = err.message;
      note.classList.add("error");
    }
  });
  actions.append(deny, note);
  c.appendChild(actions);
  return c;
}

function render(items) {
  const ids = new Set(items.map((i) => i.id));
  for (const [id, c] of cards) {
    if (!ids.has(id)) { c.remove(); cards.delete(id); }  // decided, expired or no longer yours
  }
  for (const item of items) {
    const old = cards.get(item.id);
    const fresh = card(item);
    if (old) { if (old.dataset.busy) continue; old.replaceWith(fresh); } else root.appendChild(fresh);
    cards.set(item.id, fresh);
  }
  empty.hidden = items.length > 0;
  status.textContent = interpolate(ngettext("%(count)s request waits for you", "%(count)s requests wait for you", items.length),
                                   {count: formatNumber(items.length)}, true);
}

window.addEventListener("approvals:changed", (e) => render(e.detail.items));
setInterval(() => {
  for (const dd of root.querySelectorAll(".inbox-left")) dd.textContent = timeLeft(dd.dataset.expiresAt);
}, 1000);
inbox.refresh(null);
