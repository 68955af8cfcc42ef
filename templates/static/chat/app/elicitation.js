// An MCP server's question in the middle of a tool call (elicitation.requested): a card with
// the server's name, its message (the server's own text: always shown as text) and a form
// built from the fields the server asked for. Accept / Decline / Cancel answer it over
// POST /api/v1/mcp/elicitations/<id>/; elicitation.resolved says how it ended. Resource links
// (resource.linked) are links under the call, opened through the platform (/mcp-resources/…).
import { api } from "./api.js";
import { el } from "./dom.js";
import { gettext, interpolate } from "./i18n.js";
import { timeLeftText } from "./tools.js";

const ENDED = {
  answered: {accept: gettext("Answered — the call goes on"), decline: gettext("Declined — the server was told no"),
             cancel: gettext("Cancelled — the server was told to stop asking")},
  expired: gettext("Expired: nobody answered in time, so the server was told to cancel."),
  unattended: gettext("Declined: nobody watches this run (API or schedule), so questions are declined."),
  limit: gettext("Declined: the server asked too many questions in one call."),
  unsupported: gettext("Declined: this question cannot be shown here."),
  cancelled: gettext("Cancelled: the run stopped waiting for the answer."),
};

function input(field) {
  let node;
  if (field.type === "boolean") {
    node = el("input");
    node.type = "checkbox";
    node.checked = field.default === true;
  } else if (field.enum) {
    node = el("select");
    if (!field.required) node.appendChild(el("option", "", ""));
    field.enum.forEach((value, i) => {
      const option = el("option", "", (field.enum_names && field.enum_names[i]) || value);
      option.value = value;
      node.appendChild(option);
    });
    if (field.default !== undefined) node.value = String(field.default);
  } else {
    node = el("input");
    if (field.type === "number" || field.type === "integer") {
      node.type = "number";
      node.step = field.type === "integer" ? "1" : "any";
      if (field.minimum !== undefined) node.min = field.minimum;
      if (field.maximum !== undefined) node.max = field.maximum;
    } else {
      // A sensitive field (a password, token, API key…) is never shown as typed.
      node.type = field.sensitive ? "password" : ({email: "email", uri: "url", date: "date"}[field.format] || "text");
      node.autocomplete = field.sensitive ? "off" : "on";
      if (field.min_length !== undefined) node.minLength = field.min_length;
      if (field.max_length !== undefined) node.maxLength = field.max_length;
    }
    if (field.default !== undefined && !field.sensitive) node.value = String(field.default);
  }
  node.name = field.name;
  node.required = !!field.required && field.type !== "boolean";
  return node;
}

function values(form, fields) {
  const content = {};
  for (const f of fields) {
    const node = form.elements.namedItem(f.name);
    if (!node) continue;
    if (f.type === "boolean") { content[f.name] = node.checked; continue; }
    if (node.value === "" && !f.required) continue;
    if (f.type === "integer") content[f.name] = parseInt(node.value, 10);
    else if (f.type === "number") content[f.name] = Number(node.value);
    else content[f.name] = node.value;
  }
  return content;
}

function expiryText(iso) {
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  if (!iso || Number.isNaN(s)) return "";
  if (s <= 0) return gettext("The question has expired.");
  return interpolate(gettext("Expires in %(time)s."), {time: timeLeftText(s)}, true);
}

function shell(ev) {
  const card = el("div", "card elicitation");
  card.dataset.id = ev.elicitation_id;
  const head = el("div", "approval-head");
  head.appendChild(el("strong", "", interpolate(gettext("%s asks"), [ev.server_name || ev.server || ""])));
  head.appendChild(el("span", "badge tone", gettext("question")));
  card.appendChild(head);
  if (ev.message) card.appendChild(el("div", "elicitation-message", ev.message));  // untrusted: text only
  return card;
}

// Each waiting question's one card: every redraw (the thread drawn again on run.started, the
// stream's replay after a reload, both racing) gets the card the person may be typing in.
const cards = new Map();

export function elicitationCard(ev, urlFor) {
  const known = cards.get(ev.elicitation_id);
  if (known && !known.dataset.state) return known;
  const card = shell(ev);
  cards.set(ev.elicitation_id, card);
  const form = el("form", "elicitation-form");
  form.noValidate = false;
  const fields = ev.fields || [];
  fields.forEach((f, i) => {
    const row = el("div", "elicitation-field" + (f.type === "boolean" ? " check" : ""));
    const id = "el-" + ev.elicitation_id + "-" + i;
    const label = el("label", "", f.title || f.name);
    label.htmlFor = id;
    if (f.required) label.appendChild(el("span", "required", " *"));
    const node = input(f);
    node.id = id;
    if (f.type === "boolean") row.append(node, label); else row.append(label, node);
    if (f.description) {
      const about = el("div", "muted elicitation-about", f.description);
      about.id = id + "-about";
      node.setAttribute("aria-describedby", about.id);
      row.appendChild(about);
    }
    form.appendChild(row);
  });
  const expiry = el("div", "approval-expiry muted", expiryText(ev.expires_at));
  const timer = setInterval(() => {
    if (card.dataset.state) { clearInterval(timer); return; }  // (a redraw detaches it for a moment)
    expiry.textContent = expiryText(ev.expires_at);
  }, 1000);
  const actions = el("div", "approval-actions");
  const accept = el("button", "approve", gettext("Accept"));
  const decline = el("button", "deny secondary", gettext("Decline"));
  const cancel = el("button", "secondary", gettext("Cancel"));
  accept.type = "submit";
  decline.type = cancel.type = "button";
  const note = el("span", "approval-note muted");
  note.setAttribute("aria-live", "polite");
  actions.append(accept, decline, cancel, note);
  form.appendChild(actions);
  card.append(form, expiry);
  const send = async (action) => {
    const buttons = [accept, decline, cancel];
    buttons.forEach((b) => { b.disabled = true; });
    note.textContent = gettext("Sending…");
    try {
      await api("POST", urlFor(ev.elicitation_id),
                action === "accept" ? {action, content: values(form, fields)} : {action});
      note.textContent = gettext("Sent — waiting for the server.");
    } catch (e) {
      note.textContent = e.message;
      if (e.code !== "not_pending") buttons.forEach((b) => { b.disabled = false; });
    }
  };
  form.addEventListener("submit", (e) => { e.preventDefault(); if (form.reportValidity()) send("accept"); });
  decline.addEventListener("click", () => send("decline"));
  cancel.addEventListener("click", () => send("cancel"));
  return card;
}

// How the question ended; a card declined at once (no requested event) is drawn here.
export function resolveElicitation(card, ev) {
  if (!card) card = shell(ev);
  cards.delete(ev.elicitation_id);
  card.dataset.state = ev.action;
  card.classList.add("resolved");
  card.querySelectorAll("form, .approval-expiry").forEach((n) => n.remove());
  const said = ev.reason === "answered" ? ENDED.answered[ev.action] : ENDED[ev.reason];
  card.appendChild(el("div", "approval-note", said || ev.action));
  return card;
}

// Resource links under a tool call: paths of this site only (the server's URIs are read
// through /mcp-resources/…, never opened directly).
export function resourceLinks(links) {
  const box = el("div", "tool-links");
  for (const link of links || []) {
    const url = String(link.url || "");
    if (!url.startsWith("/") || url.startsWith("//")) continue;
    const a = el("a", "resource-link", link.name || link.uri);
    a.href = url;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    a.title = link.uri || "";
    box.appendChild(a);
  }
  return box;
}
