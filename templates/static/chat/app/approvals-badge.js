// The approvals badge in the rail, on every page: how many calls the signed-in person may
// decide now. One socket per page (/ws/approvals/, the per-user group) brings inbox.changed;
// the count is re-read from GET /api/v1/approvals/ and the page hears "approvals:changed"
// (the inbox page re-renders from it, and asks for a fresh read through ``inbox.refresh``).
import { api } from "./api.js";
import { formatNumber, interpolate, ngettext } from "./i18n.js";

const BADGE = "[data-approvals-count]";
const INBOX_URL = "/api/v1/approvals/";
let items = [];
let pending = null;

function paint() {
  for (const badge of document.querySelectorAll(BADGE)) {
    badge.textContent = String(items.length);
    badge.hidden = items.length === 0;
    badge.title = interpolate(ngettext("%(count)s approval waits for you", "%(count)s approvals wait for you", items.length),
                              {count: formatNumber(items.length)}, true);
  }
}

async function refresh(notice) {
  if (pending) return pending;
  pending = api("GET", INBOX_URL).then((data) => {
    items = Array.isArray(data) ? data : [];
    paint();
    window.dispatchEvent(new CustomEvent("approvals:changed", {detail: {items, notice}}));
  }).catch(() => {}).finally(() => { pending = null; });
  return pending;
}

let retry = 0;
function connect() {
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(scheme + location.host + "/ws/approvals/");
  ws.onopen = () => { retry = 0; refresh(null); };
  ws.onmessage = (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch (e) { return; }
    if (ev.type === "inbox.changed") refresh(ev);
  };
  ws.onclose = (e) => {
    if (e.code === 4403) return;  // signed out
    setTimeout(connect, Math.min(10000, 500 * 2 ** retry++) * (0.5 + Math.random()));  // jittered
  };
}

// The inbox page (approvals/inbox.js) imports it: the same module, so the same socket and list.
export const inbox = {refresh, get items() { return items; }};
if (document.body.dataset.user) connect();
