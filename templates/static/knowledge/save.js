// "Save to knowledge" on chat messages: the thread view draws a button per message
// (.kb-save[data-message-id]); this opens a small form (type, optional title and tags) and
// POSTs /api/v1/messages/{id}/save-to-knowledge/. Works whatever provider the thread uses:
// the server saves the stored message text. On failure the form stays filled and says why;
// drafts survive the message list being redrawn. An ES module; its stylesheet (save.css,
// beside it) is added when it loads.
import { gettext, interpolate, pgettext } from "../chat/app/i18n.js";

const TYPES = ["note", "fact", "decision", "howto", "reference", "snippet"];
// The types' names as the knowledge pages say them (knowledge.models.ItemType's labels).
const TYPE_LABEL = {
  note: pgettext("knowledge item type", "note"), fact: pgettext("knowledge item type", "fact"),
  decision: pgettext("knowledge item type", "decision"), howto: pgettext("knowledge item type", "how-to"),
  reference: pgettext("knowledge item type", "reference"), snippet: pgettext("knowledge item type", "snippet"),
};

const box = document.getElementById("messages");
if (box) start(box);

function csrfToken() {
  const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

function node(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function start(box) {
  const drafts = {};  // messageId → {type, title, tags}

  const css = document.createElement("link");
  css.rel = "stylesheet";
  css.href = new URL("save.css", import.meta.url).href;
  document.head.appendChild(css);

  function openForm(button) {
    const id = button.dataset.messageId;
    const slot = button.parentNode;
    if (slot.querySelector("form")) return;
    const draft = drafts[id] || {type: "note", title: "", tags: ""};
    const form = node("form", {"class": "kb-save-form", "aria-label": gettext("Save to knowledge")});
    const type = node("select", {name: "type", "aria-label": gettext("Type")});
    for (const t of TYPES) { const o = node("option", {value: t}, TYPE_LABEL[t] || t); if (t === draft.type) o.selected = true; type.appendChild(o); }
    const title = node("input", {name: "title", placeholder: gettext("Title (optional)"), maxlength: "300", "aria-label": gettext("Title")});
    title.value = draft.title;
    const tags = node("input", {name: "tags", placeholder: gettext("tags, comma-separated"), "aria-label": gettext("Tags")});
    tags.value = draft.tags;
    const save = node("button", {type: "submit"}, gettext("Save"));
    const cancel = node("button", {type: "button", "class": "link"}, gettext("Cancel"));
    const status = node("span", {"class": "kb-save-status", role: "status"});
    form.append(type, title, tags, save, cancel, status);
    button.hidden = true;
    slot.appendChild(form);
    title.focus();

    const remember = () => { drafts[id] = {type: type.value, title: title.value, tags: tags.value}; };
    form.addEventListener("input", remember);
    cancel.addEventListener("click", () => { remember(); form.remove(); button.hidden = false; });
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      remember();
      save.disabled = true;
      status.className = "kb-save-status";
      status.textContent = gettext("saving…");
      const body = {type: type.value, title: title.value.trim(),
                    tags: tags.value.split(",").map((t) => t.trim()).filter(Boolean)};
      fetch("/api/v1/messages/" + encodeURIComponent(id) + "/save-to-knowledge/", {
        method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRFToken": csrfToken()},
        body: JSON.stringify(body),
      }).then((r) => r.json().catch(() => ({})).then((data) => ({ok: r.ok, status: r.status, data})))
        .then((res) => {
          if (!res.ok) throw new Error((res.data.error && res.data.error.message) || ("HTTP " + res.status));
          delete drafts[id];
          form.remove();
          const done = node("span", {"class": "kb-saved"}, gettext("Saved to knowledge:") + " ");
          done.appendChild(node("a", {href: "/knowledge/" + res.data.id + "/"}, res.data.title));
          slot.appendChild(done);
        }).catch((err) => {
          save.disabled = false;  // the form keeps what was typed
          status.className = "kb-save-status error";
          status.textContent = interpolate(gettext("Not saved: %(error)s"), {error: err.message}, true);
        });
    });
  }

  box.addEventListener("click", (e) => {
    const button = e.target.closest && e.target.closest(".kb-save");
    if (button && box.contains(button)) openForm(button);
  });
}
