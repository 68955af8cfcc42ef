// The prompt library in the composer (both: the landing page's and a thread's). Typing "/" at
// the start of the box opens the caller's prompts (GET /api/v1/prompts/?workspace=…: their
// personal ones and the chat's workspace's); what follows the "/" filters; ↑/↓ move, Enter or
// Tab pick, Escape closes. A prompt with {{variables}} then opens a small form above the box,
// one field per variable (defaults filled in): Tab moves between fields, Enter inserts the
// filled text into the box — it is not sent — and Escape goes back. Everything shown is set as
// text (textContent / value), never as markup.
import { api, urlFor } from "./api.js";
import { el } from "./dom.js";
import { gettext, interpolate } from "./i18n.js";
import { promptFill, promptMatches, promptVariables } from "./prompt-vars.js";

const CACHE_MS = 30 * 1000;  // a prompt saved on the Prompts page in another tab shows up soon
const TRIGGER = new RegExp("^/([^\\s/]*)$");  // (a literal here trips xgettext's JavaScript reader)

const form = document.getElementById("composer");
const input = document.getElementById("input");
if (form && input && form.dataset.urlPrompts) start(form, input);

function workspaceOf(form) {
  if (form.dataset.workspace) return form.dataset.workspace;  // a thread's
  const select = document.getElementById("landing-workspace");  // the landing page's choice
  if (select) return select.value;
  const landing = document.getElementById("landing");
  return landing ? landing.dataset.workspace || "" : "";
}

function start(form, input) {
  const cache = new Map();  // workspace → {at, prompts}
  let shown = [];           // the prompts in the menu, in order
  let active = -1;
  let loadSeq = 0;
  let fill = null;          // the open variables form, or null

  const menu = el("div", "prompt-menu");
  menu.id = "prompt-menu";
  menu.hidden = true;
  const list = el("ul", "prompt-list");
  list.id = "prompt-list";
  list.setAttribute("role", "listbox");
  list.setAttribute("aria-label", gettext("Prompts"));
  const status = el("p", "prompt-status muted");
  status.setAttribute("aria-live", "polite");
  const foot = el("div", "prompt-foot");
  foot.append(el("span", "muted", gettext("↑↓ choose · Enter insert · Esc close")));
  const manage = el("a", "prompt-manage", gettext("Manage prompts"));
  manage.href = form.dataset.urlPromptsPage;
  foot.append(manage);
  menu.append(list, status, foot);
  form.prepend(menu);
  // Clicks in the menu keep the focus in the box (the menu closes when the box loses it).
  menu.addEventListener("mousedown", (e) => { if (e.target !== manage) e.preventDefault(); });

  function isOpen() { return !menu.hidden; }

  function close() {
    if (!isOpen()) return;
    menu.hidden = true;
    active = -1;
    input.removeAttribute("aria-activedescendant");
    input.removeAttribute("aria-controls");
    input.removeAttribute("aria-autocomplete");
  }

  async function prompts() {
    const ws = workspaceOf(form);
    const hit = cache.get(ws);
    if (hit && Date.now() - hit.at < CACHE_MS) return hit.prompts;
    const url = form.dataset.urlPrompts + (ws ? "?workspace=" + encodeURIComponent(ws) : "");
    const rows = await api("GET", url);
    cache.set(ws, {at: Date.now(), prompts: rows});
    return rows;
  }

  function activate(i) {
    const options = list.children;
    if (active >= 0 && options[active]) options[active].setAttribute("aria-selected", "false");
    active = i;
    if (i >= 0 && options[i]) {
      options[i].setAttribute("aria-selected", "true");
      input.setAttribute("aria-activedescendant", options[i].id);
      options[i].scrollIntoView({block: "nearest"});
    } else input.removeAttribute("aria-activedescendant");
  }

  function render(typed, all) {
    shown = promptMatches(all, typed);
    list.replaceChildren(...shown.map((p, i) => {
      const li = el("li", "prompt-option");
      li.id = "prompt-option-" + i;
      li.setAttribute("role", "option");
      li.setAttribute("aria-selected", "false");
      li.dataset.command = p.command;
      const scope = p.scope === "workspace" ? p.workspace_name : gettext("personal");
      li.append(el("span", "prompt-cmd", "/" + p.command), el("span", "prompt-title", p.title),
                el("span", "prompt-scope", scope));
      li.addEventListener("click", () => pick(p));
      return li;
    }));
    list.hidden = !shown.length;
    if (!all.length) status.textContent = gettext("No prompts yet — make one under “Manage prompts”.");
    else if (!shown.length) status.textContent = interpolate(gettext("No prompt matches /%(typed)s."), {typed}, true);
    else status.textContent = "";
    status.hidden = !status.textContent;
    activate(shown.length ? 0 : -1);
  }

  async function open(typed) {
    menu.hidden = false;
    input.setAttribute("aria-controls", list.id);
    input.setAttribute("aria-autocomplete", "list");
    const seq = ++loadSeq;
    if (!cache.has(workspaceOf(form))) {
      list.hidden = true;
      status.hidden = false;
      status.textContent = gettext("Loading prompts…");
    }
    let all;
    try {
      all = await prompts();
    } catch (e) {
      if (seq !== loadSeq) return;
      list.hidden = true;
      status.hidden = false;
      status.textContent = interpolate(gettext("Could not load prompts: %(reason)s"), {reason: e.message}, true);
      return;
    }
    if (seq !== loadSeq || !isOpen()) return;  // typed on, or closed, meanwhile
    const m = TRIGGER.exec(input.value);
    if (!m) { close(); return; }
    render(m[1], all);
  }

  function insert(text) {
    input.value = text;
    input.focus();
    input.setSelectionRange(text.length, text.length);
    input.dispatchEvent(new Event("input", {bubbles: true}));  // the composer re-measures
  }

  function pick(p) {
    close();
    const variables = promptVariables(p.body);
    if (!variables.length) { insert(p.body); return; }
    openFill(p, variables);
  }

  function openFill(p, variables) {
    closeFill();
    const box = el("div", "prompt-fill");
    box.id = "prompt-fill";
    box.setAttribute("role", "group");
    box.setAttribute("aria-labelledby", "prompt-fill-title");
    const title = el("p", "prompt-fill-title");
    title.id = "prompt-fill-title";
    title.append(el("span", "prompt-cmd", "/" + p.command), " ", el("span", "prompt-title", p.title));
    const fields = el("div", "prompt-fields");
    const inputs = variables.map((v, i) => {
      const label = el("label", "prompt-field");
      label.append(el("span", "prompt-field-name", v.name));
      const field = el("input");
      field.type = "text";
      field.id = "prompt-var-" + i;
      field.dataset.name = v.name;
      field.value = v.default || "";
      field.required = v.default === null;
      field.autocomplete = "off";
      label.append(field);
      fields.append(label);
      return field;
    });
    const note = el("p", "prompt-fill-note muted", gettext("Tab: next field · Enter: insert into the message · Esc: cancel"));
    note.setAttribute("aria-live", "polite");
    const preview = el("pre", "prompt-preview");
    preview.setAttribute("aria-label", gettext("Preview"));
    const actions = el("div", "prompt-fill-actions");
    const ok = el("button", "", gettext("Insert"));
    ok.type = "button";
    ok.id = "prompt-insert";
    const cancel = el("button", "secondary", gettext("Cancel"));
    cancel.type = "button";
    actions.append(ok, cancel);
    box.append(title, fields, preview, note, actions);
    form.prepend(box);

    const hint = note.textContent;
    const values = () => Object.fromEntries(inputs.map((f) => [f.dataset.name, f.value]));
    const update = (e) => {
      preview.textContent = promptFill(p.body, values());
      if (e && e.target.getAttribute("aria-invalid") === "true" && e.target.value.trim()) {
        e.target.removeAttribute("aria-invalid");  // filled in now: the reproach goes
        note.textContent = hint;
        note.classList.remove("error");
      }
    };
    const done = () => {
      const missing = inputs.find((f) => f.required && !f.value.trim());
      inputs.forEach((f) => f.removeAttribute("aria-invalid"));
      if (missing) {
        missing.setAttribute("aria-invalid", "true");
        note.textContent = interpolate(gettext("Fill in “%(name)s” first."), {name: missing.dataset.name}, true);
        note.classList.add("error");
        missing.focus();
        return;
      }
      const text = promptFill(p.body, values());
      closeFill();
      insert(text);
    };
    const back = () => { closeFill(); input.focus(); };
    box.addEventListener("input", update);
    box.addEventListener("keydown", (e) => {
      // Inside the composer's <form>: Enter would submit (send) it, Escape would stop a run.
      if (e.key === "Enter" && !e.isComposing && e.target.tagName === "INPUT") { e.preventDefault(); e.stopPropagation(); done(); }
      else if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); back(); }
    });
    ok.addEventListener("click", done);
    cancel.addEventListener("click", back);
    fill = box;
    update();
    inputs[0].focus();
    inputs[0].select();
  }

  function closeFill() {
    if (fill) { fill.remove(); fill = null; }
  }

  // "Use" on the Prompts page: /chat/?prompt=<id> opens that prompt in the landing composer.
  async function useFromLink(id) {
    history.replaceState(null, "", location.pathname);  // a reload does not open it again
    let p;
    try {
      p = await api("GET", urlFor(form.dataset.urlPrompt, id));
    } catch (e) {
      menu.hidden = false;
      list.hidden = true;
      status.hidden = false;
      status.textContent = interpolate(gettext("Could not open the prompt: %(reason)s"), {reason: e.message}, true);
      return;
    }
    const select = document.getElementById("landing-workspace");
    if (p.workspace && select && select.value !== p.workspace) {
      select.value = p.workspace;  // a workspace prompt starts a chat in its workspace
      select.dispatchEvent(new Event("change"));
    }
    pick(p);
  }
  const linked = form.dataset.landing ? new URLSearchParams(location.search).get("prompt") : null;
  if (linked) useFromLink(linked);

  input.addEventListener("input", () => {
    const m = TRIGGER.exec(input.value);
    if (m && input.selectionStart === input.value.length) open(m[1]);
    else { loadSeq++; close(); }
  });
  input.addEventListener("blur", (e) => { if (!menu.contains(e.relatedTarget)) close(); });
  // Capture: before the composer's own Enter (send) and the page's Escape (stop a run).
  form.addEventListener("keydown", (e) => {
    if (e.target !== input || !isOpen() || e.isComposing) return;
    const n = shown.length;
    const stop = () => { e.preventDefault(); e.stopPropagation(); };
    if (e.key === "ArrowDown" && n) { stop(); activate((active + 1) % n); }
    else if (e.key === "ArrowUp" && n) { stop(); activate((active - 1 + n) % n); }
    else if ((e.key === "Enter" && !e.shiftKey) || e.key === "Tab") {
      if (active >= 0 && shown[active]) { stop(); pick(shown[active]); }
      else close();  // nothing to pick: "/word" is just text to send
    } else if (e.key === "Escape") { stop(); close(); }
  }, true);
}
