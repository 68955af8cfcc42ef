// Left rail: live search as you type, a tag filter, pinned chats first, archive, the
// person's folders (each folds, has a count and a menu: rename, delete) above the chats in no
// folder, and a per-chat menu (rename, pin, archive, move to folder, tags, export, duplicate,
// delete) that closes on Escape, on a click elsewhere and after an action; rename, delete and
// errors use the site's own dialogs (dialogs.js). With a mouse a chat is dragged onto a folder
// (or onto "Chats" to take it out); "Move to folder…" is the keyboard and touch way. With a
// search, a tag or the archive the rail is one flat list whose rows name their folder. One
// Tab stop per chat: the chat's link; ↑/↓ move between chats, → (or the menu key, Shift+F10)
// opens its actions. On phones the rail is a drawer (☰ in the header).
import { api, urlFor } from "./api.js";
import { el, button, naturalTime } from "./dom.js";
import { askChoice, askText, confirmDialog, showError } from "./dialogs.js";
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

const DRAG_TYPE = "application/x-chatplatform-thread";

function start(nav) {
  const u = nav.dataset;
  const currentId = u.currentThread || "";
  const search = document.getElementById("chat-search");
  const archivedBox = document.getElementById("show-archived");
  const tagFilter = document.getElementById("tag-filter");
  const emptyNote = document.getElementById("thread-list-empty");
  let folders = [];  // the caller's folders as last read ({id, workspace, name, collapsed, thread_count})

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
  // The ⚙ menu filed or tagged the open chat (thread-organise.js): the rail follows.
  document.addEventListener("chat:organised", (e) => { if (!e.detail || e.detail.source !== "rail") refresh(); });

  function tagChips(names) {
    const box = el("span", "t-tags");
    for (const name of names) {
      const chip = el("span", "tag-chip", "#" + name);
      chip.dir = "auto";
      chip.dataset.tag = name;
      chip.title = interpolate(gettext("Show the chats tagged #%(tag)s"), {tag: name}, true);
      box.appendChild(chip);
    }
    return box;
  }

  function item(t, flat) {
    const row = el("div", "thread-item" + (t.id === currentId ? " active" : "") + (t.pinned ? " pinned" : ""));
    row.dataset.threadId = t.id;
    row.dataset.pinned = t.pinned ? "1" : "0";
    row.dataset.archived = t.archived ? "1" : "0";
    row.dataset.workspace = t.workspace || "";
    row.dataset.folder = t.folder || "";
    row.draggable = true;
    const a = el("a");
    a.href = urlFor(u.urlPage, t.id);
    const title = el("span", "t-title", t.title || gettext("New chat"));
    title.dir = "auto";
    a.appendChild(title);
    const meta = el("span", "t-meta", (t.pinned ? gettext("pinned") + " · " : ""));
    const folder = flat && t.folder ? folders.find((f) => f.id === t.folder) : null;
    if (folder) {
      const f = el("span", "t-folder", "▸ " + folder.name);
      f.dir = "auto";
      meta.appendChild(f);
      meta.appendChild(document.createTextNode(" · "));
    }
    if (t.assistant_name) {  // a chat under a workspace assistant is named by it, not its model's provider
      const who = el("span", "t-assistant", t.assistant_name);
      who.dir = "auto";
      meta.appendChild(who);
      meta.appendChild(document.createTextNode(" · " + naturalTime(t.updated_at)));
    } else {
      meta.appendChild(document.createTextNode((t.provider || gettext("no provider")) + " · " + naturalTime(t.updated_at)));
    }
    a.appendChild(meta);
    if (t.tags && t.tags.length) a.appendChild(tagChips(t.tags));
    row.appendChild(a);
    row.appendChild(menuToggle(gettext("Chat actions")));
    row.appendChild(menu(t));
    return row;
  }

  function menuToggle(label) {
    const b = button("⋯", "menu-toggle link", null, label);
    b.tabIndex = -1;  // one Tab stop per chat (its link); → opens this menu from the keyboard
    b.setAttribute("aria-haspopup", "true");
    b.setAttribute("aria-expanded", "false");
    return b;
  }

  function menuOf(entries) {
    const m = el("div", "thread-menu");
    m.hidden = true;
    m.setAttribute("role", "menu");
    for (const [label, action, cls] of entries) {
      const b = button(label, "link" + (cls ? " " + cls : ""));
      b.dataset.action = action;
      b.setAttribute("role", "menuitem");
      m.appendChild(b);
    }
    return m;
  }

  function menu(t) {
    return menuOf([
      [gettext("Rename"), "rename"],
      [t.pinned ? gettext("Unpin") : gettext("Pin"), "pin"],
      [t.archived ? gettext("Unarchive") : gettext("Archive"), "archive"],
      [gettext("Move to folder…"), "move"],
      [gettext("Tags…"), "tags"],
      [gettext("Export as Markdown"), "export-markdown"],
      [gettext("Export as JSON"), "export-json"],
      [gettext("Duplicate"), "duplicate"],
      [gettext("Delete"), "delete", "danger"],
    ]);
  }

  function folderMenu() {
    return menuOf([[gettext("Rename folder"), "folder-rename"], [gettext("Delete folder"), "folder-delete", "danger"]]);
  }

  function folderSection(f, threads) {
    const section = el("section", "folder" + (f.collapsed ? " collapsed" : ""));
    section.dataset.folderId = f.id;
    section.dataset.workspace = f.workspace;
    section.setAttribute("aria-label", interpolate(gettext("Folder %(name)s"), {name: f.name}, true));
    const head = el("div", "folder-head drop-target");
    head.dataset.folderId = f.id;
    const toggle = el("button", "folder-toggle link");
    toggle.type = "button";
    toggle.setAttribute("aria-expanded", String(!f.collapsed));
    const caret = el("span", "caret", "▾");
    caret.setAttribute("aria-hidden", "true");
    const name = el("span", "f-name", f.name);
    name.dir = "auto";
    toggle.append(caret, name);
    if (workspaces().size > 1) toggle.appendChild(el("span", "f-workspace muted", f.workspace));
    toggle.appendChild(el("span", "f-count muted", String(f.thread_count)));
    head.appendChild(toggle);
    section.appendChild(head);
    const list = el("div", "folder-threads");
    list.hidden = !!f.collapsed;
    if (threads && threads.length) list.append(...threads.map((t) => item(t, false)));
    else list.appendChild(el("p", "folder-empty muted",
      gettext("No chats here yet: drag one onto the folder, or use a chat's Move to folder.")));
    section.appendChild(list);
    addFolderMenu(section);
    return section;
  }

  function addFolderMenu(section) {
    const head = section.querySelector(".folder-head");
    head.appendChild(menuToggle(gettext("Folder actions")));
    head.appendChild(folderMenu());
  }

  function workspaces() {
    return new Set(folders.map((f) => f.workspace));
  }

  function sectionHead(title, id, extra) {
    const head = el("div", "rail-section-head");
    if (id !== undefined) { head.id = id; head.classList.add("drop-target"); head.dataset.folderId = ""; }
    head.appendChild(el("h2", "rail-section-title", title));
    if (extra) head.appendChild(extra);
    return head;
  }

  function newFolderButton() {
    const b = button(gettext("+ Folder"), "link new-folder", null, gettext("New folder"));
    b.id = "new-folder";
    return b;
  }

  // Server-drawn rows and folders get the same menus as the ones drawn here.
  nav.querySelectorAll(".thread-item").forEach((row) => {
    const t = {id: row.dataset.threadId, pinned: row.dataset.pinned === "1", archived: row.dataset.archived === "1"};
    row.appendChild(menuToggle(gettext("Chat actions")));
    row.appendChild(menu(t));
  });
  nav.querySelectorAll("section.folder").forEach((section) => {
    folders.push({id: section.dataset.folderId, workspace: section.dataset.workspace,
                  name: section.querySelector(".f-name").textContent,
                  collapsed: section.classList.contains("collapsed")});
    addFolderMenu(section);
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
    if (e.target.closest("#new-folder")) { newFolder(); return; }
    const chip = e.target.closest(".thread-item .tag-chip[data-tag]");
    if (chip && tagFilter) {  // a chat's tag filters the rail by it (instead of opening the chat)
      e.preventDefault();
      tagFilter.value = chip.dataset.tag;
      if (tagFilter.value !== chip.dataset.tag) {  // not among the options yet
        const o = el("option", "", "#" + chip.dataset.tag);
        o.value = chip.dataset.tag;
        tagFilter.appendChild(o);
        tagFilter.value = chip.dataset.tag;
      }
      refreshShown();
      return;
    }
    const fold = e.target.closest(".folder-toggle");
    if (fold) { foldFolder(fold.closest("section.folder")); return; }
    const action = e.target.closest(".thread-menu button");
    if (!action) return;
    const section = action.closest(".folder-head") && action.closest("section.folder");
    if (section) folderAct(section, action.dataset.action);
    else act(action.closest(".thread-item"), action.dataset.action);
  });
  document.addEventListener("click", (e) => { if (!e.target.closest(".thread-item, .folder-head")) closeMenus(); });
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape" || document.querySelector("dialog[open]")) return;  // the dialog closes first
    if (nav.querySelector(".thread-menu:not([hidden])")) { closeMenus(); e.preventDefault(); }
    else if (document.body.classList.contains("rail-open")) { document.body.classList.remove("rail-open"); e.preventDefault(); }
  });

  // Keyboard in the list: ↑/↓ the previous/next chat, → / menu key / Shift+F10 its actions;
  // in a menu ↑/↓ move, Escape or ← close it and go back to the chat (or the folder).
  nav.addEventListener("keydown", (e) => {
    const link = e.target.closest(".thread-item > a, .folder-toggle");
    const links = [...nav.querySelectorAll(".thread-item > a, .folder-toggle")].filter((l) => l.offsetParent !== null);
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
    const entry = e.target.closest(".thread-menu button");
    if (!entry) return;
    const items = [...entry.parentElement.querySelectorAll("button")];
    const i = items.indexOf(entry);
    if (e.key === "ArrowDown") { e.preventDefault(); items[(i + 1) % items.length].focus(); }
    else if (e.key === "ArrowUp") { e.preventDefault(); items[(i - 1 + items.length) % items.length].focus(); }
    else if (e.key === "ArrowLeft" || e.key === "Escape") {
      e.preventDefault();
      e.stopPropagation();
      closeMenus();
      const owner = entry.closest(".thread-item") || entry.closest(".folder-head");
      owner.querySelector("a, .folder-toggle").focus();
    }
  });

  // Drag a chat onto a folder's heading (or onto "Chats": no folder).
  nav.addEventListener("dragstart", (e) => {
    const row = e.target.closest && e.target.closest(".thread-item");
    if (!row) return;
    e.dataTransfer.setData(DRAG_TYPE, row.dataset.threadId);
    e.dataTransfer.effectAllowed = "move";
    row.classList.add("dragging");
    nav.classList.add("dragging-chat");
  });
  nav.addEventListener("dragend", () => {
    nav.classList.remove("dragging-chat");
    nav.querySelectorAll(".dragging, .drop-over").forEach((n) => n.classList.remove("dragging", "drop-over"));
  });
  // Where a dragged chat would land: a folder (its heading or its chats) or the list of
  // chats in no folder (its heading or its chats); nothing in a flat list.
  function dropZone(node) {
    if (!node || !node.closest || nav.dataset.flat === "1") return null;
    const section = node.closest("section.folder");
    if (section) return {zone: section.querySelector(".folder-head"), folderId: section.dataset.folderId};
    if (node.closest("#thread-list-loose") || (node.closest(".thread-item") && !node.closest("section.folder"))) {
      return {zone: document.getElementById("thread-list-loose"), folderId: ""};
    }
    return null;
  }
  nav.addEventListener("dragover", (e) => {
    const drop = dropZone(e.target);
    if (!drop || !drop.zone || !e.dataTransfer.types.includes(DRAG_TYPE)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = "move";
    nav.querySelectorAll(".drop-over").forEach((n) => { if (n !== drop.zone) n.classList.remove("drop-over"); });
    drop.zone.classList.add("drop-over");
  });
  nav.addEventListener("dragleave", (e) => {
    if (!nav.contains(e.relatedTarget)) nav.querySelectorAll(".drop-over").forEach((n) => n.classList.remove("drop-over"));
  });
  nav.addEventListener("drop", (e) => {
    const drop = dropZone(e.target);
    const id = e.dataTransfer.getData(DRAG_TYPE);
    if (!drop || !id) return;
    e.preventDefault();
    nav.querySelectorAll(".drop-over").forEach((n) => n.classList.remove("drop-over"));
    const row = nav.querySelector('.thread-item[data-thread-id="' + CSS.escape(id) + '"]');
    if (row && (row.dataset.folder || "") === drop.folderId) return;  // already there
    moveTo(id, drop.folderId || null);
  });

  async function moveTo(id, folderId) {
    try {
      await api("PATCH", urlFor(u.urlThread, id), {folder: folderId});
      organised(id);
      await refresh();
    } catch (err) {
      await showError({title: gettext("Could not move the chat"), message: err.message});
    }
  }

  function organised(id) {
    if (id === currentId) document.dispatchEvent(new CustomEvent("chat:organised", {detail: {id, source: "rail"}}));
  }

  // The caller's workspaces ([{slug, name}]): a new folder belongs to one.
  const memberOf = JSON.parse((document.getElementById("rail-workspaces") || {}).textContent || "[]");

  async function newFolder(workspace) {
    let ws = workspace || u.currentWorkspace;
    if (!ws && memberOf.length > 1) {
      ws = await askChoice({title: gettext("New folder"), label: gettext("Workspace"), value: memberOf[0].slug,
                            options: memberOf.map((w) => ({value: w.slug, label: w.name})), confirmLabel: gettext("Next")});
      if (ws === null) return null;
    }
    const name = await askText({title: gettext("New folder"), label: gettext("Name"), confirmLabel: gettext("Create"),
                                maxLength: 100});
    if (name === null) return null;
    try {
      const body = {name};
      if (ws) body.workspace = ws;
      const folder = await api("POST", u.urlFolders, body);
      organised(currentId);
      await refresh();
      return folder;
    } catch (err) {
      await showError({title: gettext("Could not create the folder"), message: err.message});
      return null;
    }
  }

  async function foldFolder(section) {
    const collapsed = !section.classList.contains("collapsed");
    const list = section.querySelector(".folder-threads");
    section.classList.toggle("collapsed", collapsed);
    list.hidden = collapsed;
    section.querySelector(".folder-toggle").setAttribute("aria-expanded", String(!collapsed));
    const known = folders.find((f) => f.id === section.dataset.folderId);
    if (known) known.collapsed = collapsed;
    try {
      await api("PATCH", urlFor(u.urlFolder, section.dataset.folderId), {collapsed});
      if (!collapsed && !list.querySelector(".thread-item")) await refresh();  // folded when the page was drawn
    } catch (err) {
      await showError({title: gettext("Could not save the folder"), message: err.message});
    }
  }

  async function folderAct(section, action) {
    const id = section.dataset.folderId;
    const name = section.querySelector(".f-name").textContent;
    closeMenus();
    section.querySelector(".folder-toggle").focus();
    try {
      if (action === "folder-rename") {
        const value = await askText({title: gettext("Rename folder"), label: gettext("Name"), value: name,
                                     confirmLabel: gettext("Rename"), maxLength: 100});
        if (value === null) return;
        await api("PATCH", urlFor(u.urlFolder, id), {name: value});
      } else if (action === "folder-delete") {
        const message = interpolate(gettext("Delete the folder “%(name)s”? Its chats are kept: they go back to the list."),
                                    {name}, true);
        if (!await confirmDialog({title: gettext("Delete folder?"), message, confirmLabel: gettext("Delete folder"),
                                  danger: true})) return;
        await api("DELETE", urlFor(u.urlFolder, id));
      }
      organised(currentId);
      await refresh();
    } catch (err) {
      await showError({title: gettext("Could not change the folder"), message: err.message});
    }
  }

  async function chooseFolder(row) {
    const workspace = row.dataset.workspace || u.currentWorkspace;
    const here = folders.filter((f) => !workspace || f.workspace === workspace);
    const options = [{value: "", label: gettext("No folder (Chats)")},
                     ...here.map((f) => ({value: f.id, label: f.name})),
                     {value: "new", label: gettext("New folder…")}];
    const choice = await askChoice({title: gettext("Move to folder"), label: gettext("Folder"), options,
                                    value: row.dataset.folder || "", confirmLabel: gettext("Move")});
    if (choice === null) return;
    let target = choice;
    if (choice === "new") {
      const made = await newFolder(workspace);
      if (!made) return;
      target = made.id;
    }
    if ((row.dataset.folder || "") !== target) await moveTo(row.dataset.threadId, target || null);
  }

  async function editTags(id) {
    const thread = await api("GET", urlFor(u.urlThread, id));
    const value = await askText({title: gettext("Tags"), label: gettext("Tags, separated by commas"),
                                 value: thread.tags.join(", "), confirmLabel: gettext("Save"), maxLength: 1100});
    if (value === null) return;
    const tags = value.split(",").map((t) => t.trim()).filter((t) => t);
    await api("PATCH", urlFor(u.urlThread, id), {tags});
    organised(id);
    await refresh();
  }

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
      } else if (action === "move") {
        await chooseFolder(row);
      } else if (action === "tags") {
        await editTags(id);
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

  function fillTagFilter(tags) {
    if (!tagFilter) return;
    const chosen = tagFilter.value;
    const options = [el("option", "", gettext("All tags"))];
    options[0].value = "";
    for (const t of tags) {
      const o = el("option", "", "#" + t.name + " (" + t.thread_count + ")");
      o.value = t.name;
      options.push(o);
    }
    if (chosen && !tags.some((t) => t.name === chosen)) {  // still filtering by it: keep it shown
      const o = el("option", "", "#" + chosen + " (0)");
      o.value = chosen;
      options.push(o);
    }
    tagFilter.replaceChildren(...options);
    tagFilter.value = chosen;
  }

  let seq = 0;
  async function refresh() {
    const mine = ++seq;
    const q = search ? search.value.trim() : "";
    const tag = tagFilter ? tagFilter.value : "";
    const archived = !!(archivedBox && archivedBox.checked);
    const flat = !!(q || tag || archived);
    const params = new URLSearchParams();
    if (q) params.set("search", q);
    if (tag) params.set("tag", tag);
    if (archived) params.set("archived", "true");
    if (!flat) params.set("folder", "none");
    const [data, folderRows, tags] = await Promise.all([
      api("GET", u.urlThreads + "?" + params), api("GET", u.urlFolders), u.urlTags ? api("GET", u.urlTags) : []]);
    const open = flat ? [] : folderRows.filter((f) => !f.collapsed);
    const inFolders = await Promise.all(open.map((f) => api("GET", u.urlThreads + "?folder=" + encodeURIComponent(f.id))));
    if (mine !== seq) return;  // a newer refresh answered first
    folders = folderRows;
    fillTagFilter(tags);
    const nodes = [];
    if (!flat) {
      nodes.push(sectionHead(gettext("Folders"), undefined, newFolderButton()));
      const byId = new Map(open.map((f, i) => [f.id, inFolders[i].results]));
      if (folders.length) nodes.push(...folders.map((f) => folderSection(f, byId.get(f.id))));
      else { const none = el("p", "muted folder-none", gettext("No folders yet.")); none.id = "folder-none"; nodes.push(none); }
      nodes.push(sectionHead(gettext("Chats"), "thread-list-loose"));
    }
    nodes.push(...data.results.map((t) => item(t, flat)));
    nav.dataset.flat = flat ? "1" : "0";
    nav.replaceChildren(...nodes);
    if (emptyNote) {
      emptyNote.hidden = data.results.length > 0;
      emptyNote.textContent = q ? interpolate(gettext("No chats match “%(query)s”."), {query: q}, true)
        : tag ? interpolate(gettext("No chats tagged #%(tag)s."), {tag}, true)
        : archived ? gettext("No archived chats.")
        : folders.length ? gettext("No chats outside the folders.") : gettext("No chats yet.");
    }
  }
  const refreshShown = () => refresh().catch((err) => { if (emptyNote) { emptyNote.hidden = false; emptyNote.textContent = err.message; } });

  let timer = null;
  if (search) {
    search.form.addEventListener("submit", (e) => { e.preventDefault(); refreshShown(); });
    search.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(refreshShown, 200);
    });
  }
  if (archivedBox) archivedBox.addEventListener("change", refreshShown);
  if (tagFilter) tagFilter.addEventListener("change", refreshShown);

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
