// Left rail: live search as you type, pinned chats first, archive, and a per-chat menu
// (rename, pin, archive, export, duplicate, delete) that closes on Escape, on a click
// elsewhere and after an action; rename, delete and errors use the site's own dialogs
// (dialogs.js). One Tab stop per chat: the chat's link; ↑/↓ move between chats, → (or the
// menu key, Shift+F10) opens its actions. On phones the rail is a drawer (☰ in the header).
import { api, urlFor } from "./api.js";
import { el, button, naturalTime } from "./dom.js";
import { askText, confirmDialog, showError } from "./dialogs.js";
import { gettext, interpolate } from "./i18n.js";

// The error dialog's title when a menu action fails.
const FAILED = {
  rename: gettext("Could not rename the chat"), pin: gettext("Could not pin or unpin the chat"),
  archive: gettext("Could not archive or unarchive the chat"), "export-markdown": gettext("Could not export the chat"),
  "export-json": gettext("Could not export the chat"), duplicate: gettext("Could not duplicate the chat"),
  delete: gettext("Could not delete the chat"),
};

const nav = document.getElementById("thread-list");
if (nav) start(nav);

function start(nav) {
  const u = nav.dataset;
  const currentId = u.currentThread || "";
  const search = document.getElementById("chat-search");
  const archivedBox = document.getElementById("show-archived");
  const emptyNote = document.getElementById("thread-list-empty");

  function closeMenus(except) {
    nav.querySelectorAll(".thread-menu:not([hidden])").forEach((m) => {
      if (m !== except) { m.hidden = true; m.previousElementSibling.setAttribute("aria-expanded", "false"); }
    });
  }

  function setTitle(id, title) {
    nav.querySelectorAll('.thread-item[data-thread-id="' + id + '"] .t-title').forEach((t) => { t.textContent = title; });
    if (id === currentId) {
      const head = document.getElementById("thread-title");
      if (head) { head.textContent = title; head.title = title; }
      document.title = title + " · chatplatform";
    }
  }
  document.addEventListener("chat:renamed", (e) => setTitle(e.detail.id, e.detail.title));

  function item(t) {
    const row = el("div", "thread-item" + (t.id === currentId ? " active" : "") + (t.pinned ? " pinned" : ""));
    row.dataset.threadId = t.id;
    row.dataset.pinned = t.pinned ? "1" : "0";
    row.dataset.archived = t.archived ? "1" : "0";
    const a = el("a");
    a.href = urlFor(u.urlPage, t.id);
    const title = el("span", "t-title", t.title || gettext("New chat"));
    title.dir = "auto";
    a.appendChild(title);
    const meta = [t.provider || gettext("no provider"), naturalTime(t.updated_at)];
    if (t.pinned) meta.unshift(gettext("pinned"));
    a.appendChild(el("span", "t-meta", meta.join(" · ")));
    row.appendChild(a);
    row.appendChild(menuToggle());
    row.appendChild(menu(t));
    return row;
  }

  function menuToggle() {
    const b = button("⋯", "menu-toggle link", null, gettext("Chat actions"));
    b.tabIndex = -1;  // one Tab stop per chat (its link); → opens this menu from the keyboard
    b.setAttribute("aria-haspopup", "true");
    b.setAttribute("aria-expanded", "false");
    return b;
  }

  function menu(t) {
    const m = el("div", "thread-menu");
    m.hidden = true;
    m.setAttribute("role", "menu");
    const add = (label, action, cls) => {
      const b = button(label, "link" + (cls ? " " + cls : ""));
      b.dataset.action = action;
      b.setAttribute("role", "menuitem");
      m.appendChild(b);
    };
    add(gettext("Rename"), "rename");
    add(t.pinned ? gettext("Unpin") : gettext("Pin"), "pin");
    add(t.archived ? gettext("Unarchive") : gettext("Archive"), "archive");
    add(gettext("Export as Markdown"), "export-markdown");
    add(gettext("Export as JSON"), "export-json");
    add(gettext("Duplicate"), "duplicate");
    add(gettext("Delete"), "delete", "danger");
    return m;
  }

  // Server-drawn rows get the same menu as searched ones.
  nav.querySelectorAll(".thread-item").forEach((row) => {
    const t = {id: row.dataset.threadId, pinned: row.dataset.pinned === "1", archived: row.dataset.archived === "1"};
    row.appendChild(menuToggle());
    row.appendChild(menu(t));
  });

  nav.addEventListener("click", (e) => {
    const toggle = e.target.closest(".menu-toggle");
    if (toggle) {
      e.preventDefault();
      const m = toggle.nextElementSibling;
      closeMenus(m);
      m.hidden = !m.hidden;
      toggle.setAttribute("aria-expanded", String(!m.hidden));
      if (!m.hidden) m.querySelector("button").focus();
      return;
    }
    const action = e.target.closest(".thread-menu button");
    if (action) act(action.closest(".thread-item"), action.dataset.action);
  });
  document.addEventListener("click", (e) => { if (!e.target.closest(".thread-item")) closeMenus(); });
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape" || document.querySelector("dialog[open]")) return;  // the dialog closes first
    if (nav.querySelector(".thread-menu:not([hidden])")) { closeMenus(); e.preventDefault(); }
    else if (document.body.classList.contains("rail-open")) { document.body.classList.remove("rail-open"); e.preventDefault(); }
  });

  // Keyboard in the list: ↑/↓ the previous/next chat, → / menu key / Shift+F10 its actions;
  // in a menu ↑/↓ move, Escape or ← close it and go back to the chat.
  nav.addEventListener("keydown", (e) => {
    const link = e.target.closest(".thread-item > a");
    const links = [...nav.querySelectorAll(".thread-item > a")];
    if (link) {
      const i = links.indexOf(link);
      if (e.key === "ArrowDown" && i < links.length - 1) { e.preventDefault(); links[i + 1].focus(); }
      else if (e.key === "ArrowUp" && i > 0) { e.preventDefault(); links[i - 1].focus(); }
      else if (e.key === "ArrowRight" || e.key === "ContextMenu" || (e.shiftKey && e.key === "F10")) {
        e.preventDefault();
        link.parentElement.querySelector(".menu-toggle").click();
      }
      return;
    }
    const item = e.target.closest(".thread-menu button");
    if (!item) return;
    const items = [...item.parentElement.querySelectorAll("button")];
    const i = items.indexOf(item);
    if (e.key === "ArrowDown") { e.preventDefault(); items[(i + 1) % items.length].focus(); }
    else if (e.key === "ArrowUp") { e.preventDefault(); items[(i - 1 + items.length) % items.length].focus(); }
    else if (e.key === "ArrowLeft" || e.key === "Escape") {
      e.preventDefault();
      e.stopPropagation();
      closeMenus();
      item.closest(".thread-item").querySelector("a").focus();
    }
  });

  async function act(row, action) {
    const id = row.dataset.threadId;
    const name = row.querySelector(".t-title").textContent;
    closeMenus();
    row.querySelector("a").focus();  // the dialogs give focus back to the chat, not to a hidden menu
    try {
      if (action === "rename") {
        const title = await askText({title: gettext("Rename chat"), label: gettext("Name"), value: name, confirmLabel: gettext("Rename")});
        if (title === null) return;
        const t = await api("PATCH", urlFor(u.urlThread, id), {title});
        setTitle(id, t.title || gettext("New chat"));
      } else if (action === "pin" || action === "archive") {
        const field = action === "pin" ? "pinned" : "archived";
        await api("PATCH", urlFor(u.urlThread, id), {[field]: row.dataset[field] !== "1"});
        await refresh();
      } else if (action === "export-markdown" || action === "export-json") {
        const link = el("a");
        link.href = urlFor(u.urlExport, id) + (action === "export-json" ? "?as=json" : "?as=markdown");
        link.download = "";
        document.body.appendChild(link);
        link.click();
        link.remove();
      } else if (action === "duplicate") {
        const t = await api("POST", urlFor(u.urlDuplicate, id));
        location.href = urlFor(u.urlPage, t.id);
      } else if (action === "delete") {
        if (!await confirmDialog({title: gettext("Delete chat?"),
                                  message: interpolate(gettext("Delete “%(name)s” and all its messages? This cannot be undone."), {name}, true),
                                  confirmLabel: gettext("Delete"), danger: true})) return;
        await api("DELETE", urlFor(u.urlThread, id));
        if (id === currentId) location.href = u.urlIndex; else row.remove();
      }
    } catch (err) {
      await showError({title: FAILED[action] || gettext("Something went wrong"), message: err.message});
    }
  }

  let seq = 0;
  async function refresh() {
    const mine = ++seq;
    const params = new URLSearchParams();
    const q = search ? search.value.trim() : "";
    if (q) params.set("search", q);
    if (archivedBox && archivedBox.checked) params.set("archived", "true");
    const data = await api("GET", u.urlThreads + (params.toString() ? "?" + params : ""));
    if (mine !== seq) return;  // a newer search answered first
    nav.replaceChildren(...data.results.map(item));
    if (emptyNote) {
      emptyNote.hidden = data.results.length > 0;
      if (q) emptyNote.textContent = interpolate(gettext("No chats match “%(query)s”."), {query: q}, true);
      else emptyNote.textContent = archivedBox && archivedBox.checked ? gettext("No archived chats.") : gettext("No chats yet.");
    }
  }

  let timer = null;
  if (search) {
    search.form.addEventListener("submit", (e) => { e.preventDefault(); refresh(); });
    search.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => refresh().catch((err) => { if (emptyNote) { emptyNote.hidden = false; emptyNote.textContent = err.message; } }), 200);
    });
  }
  if (archivedBox) archivedBox.addEventListener("change", () => refresh());

  // Phones: the rail is a drawer.
  const railToggle = document.getElementById("rail-toggle");
  if (railToggle) {
    railToggle.addEventListener("click", () => {
      const open = document.body.classList.toggle("rail-open");
      railToggle.setAttribute("aria-expanded", String(open));
    });
  }
  const scrim = document.getElementById("rail-scrim");
  if (scrim) scrim.addEventListener("click", () => document.body.classList.remove("rail-open"));
}
