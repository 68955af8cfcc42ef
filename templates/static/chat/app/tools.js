// Tool rows and approval cards under an assistant turn.
import { el } from "./dom.js";

const STATUS_TEXT = {
  pending: "pending", running: "running", retrying: "retrying", succeeded: "succeeded", failed: "failed",
  awaiting_approval: "waiting for approval", approved: "approved", denied: "denied",
  permission_denied: "not permitted", timeout: "timed out", status_unknown: "outcome unknown", expired: "not run",
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

export function setToolStatus(row, status, detail) {
  row.className = "tool " + String(status).replace(/[^a-z_]/g, "_");
  row.dataset.status = status;
  row.querySelector(".tool-status").textContent = statusText(status);
  if (detail !== undefined && detail !== null) row.querySelector(".tool-detail").textContent = detail;
}

function riskTone(level, env) {
  if (level === "dangerous") return "dangerous";
  if (level === "guarded") return "write " + (env || "");
  return "read";
}

const DECISION_TEXT = {
  approve: "Approved", deny: "Denied — operation cancelled",
  superseded: "Not run: a new message was sent", cancelled: "Not run: the run was cancelled",
};

// An approval card; ``onDecide(decision)`` sends the decision. The server owns the countdown.
export function approvalCard(a, onDecide) {
  const card = el("div", "card approval " + (a.risk_level || ""));
  card.dataset.id = a.tool_call_id;
  const head = el("div", "approval-head");
  head.appendChild(el("strong", "", "Approve " + a.tool + "?"));
  head.appendChild(el("span", "badge tone", riskTone(a.risk_level, a.env_context)));
  if (a.env_context) head.appendChild(el("span", "badge env env-" + a.env_context, a.env_context));
  card.appendChild(head);
  card.appendChild(el("div", "approval-args", a.arguments_summary || "(no arguments)"));
  if (a.description) card.appendChild(el("div", "approval-why muted", "Why the agent asks: " + a.description));
  const actions = el("div", "approval-actions");
  const note = el("span", "approval-note muted");
  note.setAttribute("aria-live", "polite");
  if (onDecide) {
    const approve = el("button", "approve", "Approve");
    const deny = el("button", "deny secondary", "Deny");
    approve.type = deny.type = "button";
    actions.append(approve, deny);
    const readyAt = (a.requested_at_ms || Date.now()) + (a.countdown_s || 0) * 1000;
    const tick = () => {
      if (card.dataset.state) return;
      const left = Math.ceil((readyAt - Date.now()) / 1000);
      if (left > 0) {
        approve.disabled = true;
        note.textContent = "Dangerous: you can approve in " + left + " s";
        setTimeout(tick, 250);
      } else {
        approve.disabled = false;
        note.textContent = a.countdown_s ? "Dangerous: check the arguments before approving." : "";
      }
    };
    tick();
    const decide = (decision) => {
      approve.disabled = deny.disabled = true;
      if (!onDecide(decision)) { approve.disabled = deny.disabled = false; note.textContent = "Not connected: try again in a moment."; }
    };
    approve.addEventListener("click", () => decide("approve"));
    deny.addEventListener("click", () => decide("deny"));
  }
  actions.appendChild(note);
  card.appendChild(actions);
  return card;
}

export function resolveCard(card, decision, by) {
  card.dataset.state = decision;
  card.classList.add("resolved");
  card.querySelectorAll("button").forEach((b) => b.remove());
  card.querySelector(".approval-note").textContent = (DECISION_TEXT[decision] || decision) + (by ? " by " + by : "");
}
