// The open chat's folder and tags, in the ⚙ menu (templates/chat/_thread_settings.html):
// the folder is saved when picked, a tag is added with Enter or "Add" and removed with its ×
// (PATCH /api/v1/threads/{id}/ {folder} / {tags: the whole list}). The header shows the tags.
// The rail is told (chat:organised) and tells back when it filed or tagged this chat.
import { api } from "./api.js";
import { el } from "./dom.js";
import { gettext, interpolate } from "./i18n.js";

const box = document.getElementById("thread-organise");
const panel = document.getElementById("thread-settings");
if (box && panel && panel.dataset.urlThread) start(box, panel.dataset.urlThread);

function start(box, urlThread) {
  const folder = document.getElementById("thread-folder");
  const list = document.getElementById("thread-tag-list");
  const input = document.getElementById("thread-tag-input");
  const add = document.getElementById("thread-tag-add");
  const header = document.getElementById("thread-tags");
  const status = panel.querySelector(".settings-status");
  let tags = [...list.querySelectorAll(".tag-chip")].map((chip) => chip.dataset.name);
  let savedFolder = folder.value;

  function say(text) { if (status) status.textContent = text; }

  function paint(thread) {
    tags = thread.tags;
    list.replaceChildren(...tags.map((name) => {
      const chip = el("li", "tag-chip");
      chip.dataset.name = name;
      const label = el("span", "", "#" + name);
      label.dir = "auto";
      const remove = el("button", "tag-remove link", "×");
      remove.type = "button";
      remove.setAttribute("aria-label", interpolate(gettext("Remove tag %(name)s"), {name}, true));
      chip.append(label, remove);
      return chip;
    }));
    if (header) {
      header.replaceChildren(...tags.map((name) => { const c = el("span", "tag-chip", "#" + name); c.dir = "auto"; return c; }));
      header.hidden = tags.length === 0;
    }
    if (thread.folder !== undefined) {
      const id = thread.folder || "";
      if (id && ![...folder.options].some((o) => o.value === id)) {
        const o = el("option", "", gettext("(another folder)"));
        o.value = id;
        folder.appendChild(o);
      }
      folder.value = savedFolder = id;
    }
  }

  async function save(change) {
    const thread = await api("PATCH", urlThread, change);
    paint(thread);
    say(gettext("saved"));
    document.dispatchEvent(new CustomEvent("chat:organised", {detail: {id: thread.id, source: "settings"}}));
  }

  folder.addEventListener("change", async () => {
    folder.disabled = true;
    try { await save({folder: folder.value || null}); }
    catch (e) { folder.value = savedFolder; say(interpolate(gettext("not saved: %(why)s"), {why: e.message}, true)); }
    finally { folder.disabled = false; }
  });

  async function addTag() {
    const name = input.value.trim();
    if (!name) return;
    add.disabled = true;
    try { await save({tags: [...tags, name]}); input.value = ""; }
    catch (e) { say(interpolate(gettext("not saved: %(why)s"), {why: e.message}, true)); }
    finally { add.disabled = false; input.focus(); }
  }
  add.addEventListener("click", addTag);
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); addTag(); }
  });
  list.addEventListener("click", async (e) => {
    const remove = e.target.closest(".tag-remove");
    if (!remove) return;
    const name = remove.closest(".tag-chip").dataset.name;
    try { await save({tags: tags.filter((t) => t !== name)}); input.focus(); }
    catch (err) { say(interpolate(gettext("not saved: %(why)s"), {why: err.message}, true)); }
  });

  async function reloadFolders() {
    const rows = await api("GET", folder.dataset.urlFolders + "?workspace=" + encodeURIComponent(folder.dataset.workspace));
    const none = el("option", "", gettext("No folder"));
    none.value = "";
    folder.replaceChildren(none, ...rows.map((f) => { const o = el("option", "", f.name); o.value = f.id; return o; }));
  }

  // The rail filed or tagged this chat, or changed the folders: read them again.
  document.addEventListener("chat:organised", async (e) => {
    if (!e.detail || e.detail.source !== "rail") return;
    try { await reloadFolders(); paint(await api("GET", urlThread)); } catch (err) { /* the next change says it */ }
  });
}
