// Knowledge pages: live refresh on `knowledge.changed` (GET /knowledge/events/, server-sent
// events; EventSource reconnects by itself). The list re-reads its results (server-rendered,
// sanitised, permission-checked) and swaps them in; the item page offers a reload when the
// item it shows changed. Chat tabs of the same browser also forward the event they receive
// over their thread websocket (BroadcastChannel "chatplatform-knowledge"). An ES module.
import { confirmDialog } from "../chat/app/dialogs.js";
import { gettext, interpolate } from "../chat/app/i18n.js";

const live = document.getElementById("kb-live");
const results = document.getElementById("kb-results");
const detail = document.getElementById("kb-detail");
let pending = null;

function status(text, cls) { if (live) { live.textContent = text; live.className = "conn " + (cls || ""); } }

function refreshList() {
  if (!results) return;
  clearTimeout(pending);
  pending = setTimeout(() => {  // a burst of changes (an import) → one refresh
    fetch(results.dataset.partialUrl, {credentials: "same-origin"})
      .then((r) => { if (!r.ok) throw new Error("HTTP " + r.status); return r.text(); })
      .then((html) => { results.innerHTML = html; status(gettext("updated just now"), "ok"); })
      .catch((e) => status(interpolate(gettext("could not refresh: %(error)s"), {error: e.message}, true), "bad"));
  }, 300);
}

function onChanged(event) {
  const ids = event.item_ids || [];
  if (results) refreshList();
  if (detail && ids.indexOf(detail.dataset.itemId) !== -1 && !document.getElementById("kb-changed")) {
    const note = document.createElement("div");
    note.className = "kb-notice";
    note.id = "kb-changed";
    note.textContent = gettext("This item was changed.") + " ";
    const a = document.createElement("a");
    a.href = location.pathname;
    a.textContent = gettext("Reload");
    note.appendChild(a);
    detail.insertBefore(note, detail.firstChild.nextSibling);
  }
}

if (window.EventSource) {
  const source = new EventSource("/knowledge/events/");
  source.addEventListener("open", () => status(gettext("live"), "ok"));
  source.addEventListener("error", () => status(gettext("reconnecting…"), "warn"));
  source.addEventListener("knowledge.changed", (m) => {
    try { onChanged(JSON.parse(m.data)); } catch (e) { console.error(e); }
  });
}
if (window.BroadcastChannel) {
  new BroadcastChannel("chatplatform-knowledge").onmessage = (m) => {
    if (m.data && m.data.type === "knowledge.changed") onChanged(m.data);
  };
}

// Forms that ask first (data-confirm="question"): e.g. deleting an item, in the site's own
// dialog (chat/app/dialogs.js). A listener, not an inline onsubmit: the
// Content-Security-Policy allows no inline script.
for (const form of document.querySelectorAll("form[data-confirm]")) {
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (await confirmDialog({title: form.dataset.confirmTitle || gettext("Are you sure?"), message: form.dataset.confirm,
                             confirmLabel: form.dataset.confirmLabel || gettext("OK"), danger: true})) form.submit();
  });
}
