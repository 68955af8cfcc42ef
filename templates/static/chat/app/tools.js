// Tool rows and approval cards under an assistant turn.
import { el } from "./dom.js";
import { formatList, formatUnit, gettext, interpolate, ngettext } from "./i18n.js";

const STATUS_TEXT = {
  pending: gettext("pending"), running: gettext("running"), retrying: gettext("retrying"),
  succeeded: gettext("succeeded"), failed: gettext("failed"), awaiting_approval: gettext("waiting for approval"),
  approved: gettext("approved"), denied: gettext("denied"), permission_denied: gettext("not permitted"),
  timeout: gettext("timed out"), status_unknown: gettext("outcome unknown"), expired: gettext("not run"),
};

export function statusText(status) {
  return STATUS_TEXT[status] || String(status || "").replace(/_/g, " ");
}

export function toolRow({id, name, summary, status, detail}) {
  const row = el("details", "tool");
  if (id) row.dataset.id = id;
  const sum = el("summary");
  sum.appendChild(el("span", "tool-name", name));
  const args = el("span", "tool-args", summary || "");
  args.title = summary || "";
  sum.appendChild(args);
  sum.appendChild(el("span", "tool-status"));
  row.appendChild(sum);
  row.appendChild(el("div", "tool-detail", detail || ""));
  setToolStatus(row, status || "running", undefined);
  return row;
}

// Outcomes whose reason is shown on the row itself, not only folded in its details.
const FAILED = new Set(["failed", "permission_denied", "denied", "timeout", "status_unknown", "expired"]);

export function setToolStatus(row, status, detail, label) {
  row.className = "tool " + String(status).replace(/[^a-z_]/g, "_");
  row.dataset.status = status;
  row.querySelector(".tool-status").textContent = label || statusText(status);
  if (detail !== undefined && detail !== null) row.querySelector(".tool-detail").textContent = detail;
  // A failed call says why on its row (the first line of the reason; the whole text stays
  // in the details).
  let reason = row.querySelector(".tool-reason");
  const text = FAILED.has(status) ? (row.querySelector(".tool-detail").textContent || "").trim().split("\n")[0] : "";
  if (text && !reason) {
    reason = el("span", "tool-reason");
    row.querySelector("summary").appendChild(reason);
  }
  if (reason) { reason.textContent = text; reason.title = text; reason.hidden = !text; }
}

function riskTone(level, env) {
  if (level === "dangerous") return gettext("dangerous");
  if (level === "guarded") return env ? interpolate(gettext("write %(env)s"), {env}, true) : gettext("write");
  return gettext("read");
}

// How a decided card ends: [alone, with who decided (%(name)s)].
const DECISION_TEXT = {
  approve: [gettext("Approved"), gettext("Approved by %(name)s")],
  deny: [gettext("Denied — operation cancelled"), gettext("Denied — operation cancelled by %(name)s")],
  expired: [gettext("Not run: nobody decided before the request expired"),
            gettext("Not run: nobody decided before the request expired (%(name)s)")],
  superseded: [gettext("Not run: a new message was sent"), gettext("Not run: a new message was sent by %(name)s")],
  cancelled: [gettext("Not run: the run was cancelled"), gettext("Not run: the run was cancelled by %(name)s")],
};

// Seconds left → "45 sec", "12 min", "2 hr" in the page's language.
export function timeLeftText(s) {
  if (s < 90) return formatUnit(s, "second");
  if (s < 5400) return formatUnit(Math.round(s / 60), "minute");
  return formatUnit(Math.round(s / 3600), "hour");
}

// What a connect card says once it is settled ("approve": the callback connected the account).
const CONNECT_TEXT = {
  approve: gettext("Connected — the call goes on"), deny: gettext("Not connected — the call was not run"),
};

// The signed-in person (base.html's body data-user).
const ME = () => document.body.dataset.user || "";

// Whether the signed-in person may decide: they are among the approvers the server named
// (and have not approved already). The server checks again at decision time.
function mayDecide(a) {
  if (!Array.isArray(a.approver_names)) return true;  // a request from before approval rules
  return a.approver_names.includes(ME()) && !(a.approved_by || []).includes(ME());
}

function expiryText(iso) {
  if (!iso) return "";
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  if (s <= 0) return gettext("The request has expired.");
  return interpolate(gettext("Expires in %(time)s."), {time: timeLeftText(s)}, true);
}

function progressText(a) {
  const by = a.approved_by || [];
  if (!by.length) return "";
  const needed = a.approvals_needed || 1;
  return interpolate(ngettext("Approved by %(names)s — %(count)s of %(needed)s approval.",
                              "Approved by %(names)s — %(count)s of %(needed)s approvals.", needed),
                     {names: formatList(by), count: by.length, needed}, true);
}

// After one approval of two: the card says who approved, and the first approver's buttons go.
export function progressCard(card, ev) {
  const line = card.querySelector(".approval-progress");
  const mine = (ev.approved_by || []).includes(ME());
  // Who approved and how many are needed: said once, on the progress line (the rule line
  // stays the rule; the note says what is left for this person).
  if (line) line.textContent = progressText(ev);
  if (mine) {
    card.querySelectorAll(".approval-actions button").forEach((b) => b.remove());
    card.querySelector(".approval-note").textContent = gettext("It needs one more approver.");
  }
}

// An approval card; ``onDecide(decision)`` sends the decision. The server owns the countdown.
// It says in plain words why the call waits; a person who may not decide sees who can
// instead of buttons.
export function approvalCard(a, onDecide) {
  if (a.connect) return connectCard(a, onDecide);
  // Each thing once: the arguments (named by the server: a knowledge item by its title) are
  // on the card while it waits (its tool row above hides them), on the row once decided (the
  // decided card hides them); the rule is its own line only (not in the turn's status line).
  const card = el("div", "card approval " + (a.risk_level || ""));
  card.dataset.id = a.tool_call_id;
  card.dataset.tool = a.tool || "";
  const head = el("div", "approval-head");
  head.appendChild(el("strong", "", onDecide && !mayDecide(a)
    ? interpolate(gettext("%(tool)s waits for approval"), {tool: a.tool}, true)
    : interpolate(gettext("Approve %(tool)s?"), {tool: a.tool}, true)));
  head.appendChild(el("span", "badge tone", riskTone(a.risk_level, a.env_context)));
  if (a.env_context) head.appendChild(el("span", "badge env env-" + a.env_context, a.env_context));
  card.appendChild(head);
  card.appendChild(el("div", "approval-args", a.arguments_summary || gettext("(no arguments)")));
  if (a.description) card.appendChild(el("div", "approval-why muted", interpolate(gettext("Why the agent asks: %(reason)s"), {reason: a.description}, true)));
  if (a.waiting_text) card.appendChild(el("div", "approval-rule", a.waiting_text));
  if (onDecide) {
    card.appendChild(el("div", "approval-progress muted", progressText(a)));
    const expiry = el("div", "approval-expiry muted", expiryText(a.expires_at));
    card.appendChild(expiry);
    if (a.expires_at) {
      const timer = setInterval(() => {
        if (!card.isConnected || card.dataset.state) { clearInterval(timer); return; }
        expiry.textContent = expiryText(a.expires_at);
      }, 1000);
    }
  }
  const actions = el("div", "approval-actions");
  const note = el("span", "approval-note muted");
  note.setAttribute("aria-live", "polite");
  if (onDecide && !mayDecide(a)) {
    const names = (a.approver_names || []).filter((n) => n !== ME());
    const approvedByMe = (a.approved_by || []).includes(ME());
    let who;
    if (approvedByMe) who = gettext("It needs one more approver.");
    else if (names.length) {
      who = interpolate(gettext("You cannot approve this call yourself. Who can: %(names)s."), {names: formatList(names)}, true);
    } else {
      who = interpolate(gettext("You cannot approve this call yourself. Nobody can approve it right now (%(approvers)s); ask a workspace admin."),
                        {approvers: a.approvers || gettext("no approver")}, true);
    }
    card.appendChild(el("div", "approval-who", who));
  } else if (onDecide) {
    const approve = el("button", "approve", gettext("Approve"));
    const deny = el("button", "deny secondary", gettext("Deny"));
    approve.type = deny.type = "button";
    actions.append(approve, deny);
    const readyAt = (a.requested_at_ms || Date.now()) + (a.countdown_s || 0) * 1000;
    const tick = () => {
      if (card.dataset.state) return;
      const left = Math.ceil((readyAt - Date.now()) / 1000);
      if (left > 0) {
        approve.disabled = true;
        note.textContent = interpolate(gettext("Dangerous: you can approve in %(time)s"), {time: timeLeftText(left)}, true);
        setTimeout(tick, 250);
      } else {
        approve.disabled = false;
        note.textContent = a.countdown_s ? gettext("Dangerous: check the arguments before approving.") : "";
      }
    };
    tick();
    const decide = (decision) => {
      approve.disabled = deny.disabled = true;
      if (!onDecide(decision)) {
        approve.disabled = deny.disabled = false;
        note.textContent = gettext("Not connected: try again in a moment.");
        note.dataset.kind = "not_connected";  // cleared when the socket is back (live-run.js connection)
      }
    };
    approve.addEventListener("click", () => decide("approve"));
    deny.addEventListener("click", () => decide("deny"));
  }
  actions.appendChild(note);
  card.appendChild(actions);
  return card;
}

// The path a connect card's link opens: the server's consent door (a path of this site, never
// another origin), returning to this page afterwards.
export function connectHref(connect, back) {
  const url = String((connect && connect.url) || "");
  if (!url.startsWith("/") || url.startsWith("//")) return "";
  return url + (url.includes("?") ? "&" : "?") + "next=" + encodeURIComponent(back || location.pathname);
}

// A call parked until its person connects their own account to an OAuth MCP server: a link to
// the consent page (the run goes on by itself when the sign-in comes back) and Cancel.
function connectCard(a, onDecide) {
  const card = el("div", "card approval connect");
  card.dataset.id = a.tool_call_id;
  card.dataset.tool = a.tool || "";
  const name = a.connect.name || a.connect.server || "";
  const head = el("div", "approval-head");
  head.appendChild(el("strong", "", interpolate(gettext("Connect %s to continue"), [name])));
  head.appendChild(el("span", "badge tone", gettext("sign-in")));
  card.appendChild(head);
  if (a.arguments_summary) card.appendChild(el("div", "approval-args", a.arguments_summary));
  card.appendChild(el("div", "approval-rule", interpolate(
    gettext("%s uses your own %s account. Connect it once: the call then runs and the answer goes on."),
    [a.tool || "", name])));
  const expiry = el("div", "approval-expiry muted", expiryText(a.expires_at));
  card.appendChild(expiry);
  const actions = el("div", "approval-actions");
  const note = el("span", "approval-note muted");
  note.setAttribute("aria-live", "polite");
  const mine = !Array.isArray(a.approver_names) || a.approver_names.includes(ME());
  if (onDecide && mine) {
    const href = connectHref(a.connect);
    if (href) {
      const link = el("a", "button connect-link", interpolate(gettext("Connect %s"), [name]));
      link.href = href;
      actions.appendChild(link);
    }
    const cancel = el("button", "deny secondary", gettext("Cancel"));
    cancel.type = "button";
    cancel.addEventListener("click", () => {
      cancel.disabled = true;
      if (!onDecide("deny")) {
        cancel.disabled = false;
        note.textContent = gettext("Not connected: try again in a moment.");
      }
    });
    actions.appendChild(cancel);
  } else {
    card.appendChild(el("div", "approval-who", interpolate(gettext("Waits for %s to connect their account."),
                                                           [a.requester || ""])));
  }
  actions.appendChild(note);
  card.appendChild(actions);
  return card;
}

export function resolveCard(card, decision, by) {
  card.dataset.state = decision;
  card.classList.add("resolved");
  const head = card.querySelector(".approval-head strong");
  if (head && card.dataset.tool) head.textContent = card.dataset.tool;  // no longer a question
  card.querySelectorAll(".approval-progress, .approval-rule, .approval-why").forEach((n) => n.remove());
  card.querySelectorAll("button").forEach((b) => b.remove());
  card.querySelectorAll(".approval-who, .approval-expiry").forEach((n) => n.remove());
  if (card.classList.contains("connect")) {
    card.querySelectorAll(".connect-link").forEach((n) => n.remove());
    card.querySelector(".approval-note").textContent = CONNECT_TEXT[decision] || (DECISION_TEXT[decision] || [decision])[0];
    return;
  }
  const [alone, withName] = DECISION_TEXT[decision] || [decision, decision + " (%(name)s)"];
  card.querySelector(".approval-note").textContent = by ? interpolate(withName, {name: by}, true) : alone;
}
