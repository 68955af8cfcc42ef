// The header's model picker: one searchable list of the models the user may use, grouped by
// provider, with badges (tools, agent, vision when the catalogue says). Data: the page's
// "model-choices" JSON ({default, providers: [{slug, name, kind, agent, models: [{id, name,
// label, supports_tools, vision, auto_tier}]}]}, GET /api/v1/models/). A combobox: type to
// filter, ↑/↓ move, Enter picks, Esc closes. On a thread page (data-url-thread) a pick is
// saved with PATCH {provider, model}; on the landing page it only sets the picker's
// data-provider / data-model, which the new chat is created with (landing.js).
// The element fires "model:changed" ({provider, model, kind, auto_tier, assistant,
// starter_prompts}) after a pick. Workspace assistants ("assistants": [{id "assistant:<uuid>",
// assistant_id, name, description, featured, shared, provider, model, starter_prompts, usable}])
// are listed first and picked like a model: PATCH {assistant} on a thread (the server sets its
// model), data-assistant on the landing page.
import { api } from "./api.js";
import { gettext, interpolate } from "./i18n.js";

// The badges' words (their class stays the code: model-badge agent / tools / vision).
const BADGE_TEXT = {agent: gettext("agent"), tools: gettext("tools"), vision: gettext("vision")};

const root = document.getElementById("model-picker");
if (root) start(root);

export function filterChoices(providers, query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  const out = [];
  for (const p of providers) {
    const models = p.models.filter((m) => {
      const hay = (p.name + " " + p.slug + " " + m.name + " " + m.label).toLowerCase();
      return words.every((w) => hay.includes(w));
    });
    if (models.length) out.push({...p, models});
  }
  return out;
}

export function filterAssistants(assistants, query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  return (assistants || []).filter((a) => {
    const hay = (a.name + " " + a.description + " " + gettext("assistant")).toLowerCase();
    return words.every((w) => hay.includes(w));
  });
}

function badges(p, m) {
  const out = [];
  if (p.agent) out.push("agent");
  if (m.supports_tools && !p.agent) out.push("tools");
  if (m.vision) out.push("vision");
  return out;
}

function start(root) {
  const button = document.getElementById("model-picker-button");
  const label = document.getElementById("model-picker-label");
  const panel = document.getElementById("model-panel");
  const search = document.getElementById("model-search");
  const list = document.getElementById("model-list");
  const status = document.getElementById("model-status");
  let choices = JSON.parse(document.getElementById("model-choices").textContent);
  let options = [];   // the <li role=option> shown, in order
  let active = -1;

  const current = () => root.dataset.assistant ? "assistant:" + root.dataset.assistant
    : (root.dataset.provider || "") + "/" + (root.dataset.model || "");
  const findAssistant = (id) => (choices.assistants || []).find((a) => a.id === id) || null;
  const say = (text, kind) => { status.textContent = text || ""; status.className = "provider-status" + (kind ? " " + kind : ""); };
  const find = (id) => {
    for (const p of choices.providers) for (const m of p.models) if (m.id === id) return [p, m];
    return [null, null];
  };

  function render() {
    list.textContent = "";
    options = [];
    const groups = filterChoices(choices.providers, search.value);
    const assistants = filterAssistants(choices.assistants, search.value);
    if (assistants.length) {
      const head = document.createElement("li");
      head.className = "model-group";
      head.setAttribute("role", "presentation");
      head.id = "model-group-assistants";
      head.textContent = gettext("Assistants");
      list.appendChild(head);
      for (const a of assistants) {
        const li = document.createElement("li");
        li.setAttribute("role", "option");
        li.id = "model-opt-" + options.length;
        li.dataset.id = a.id;
        li.setAttribute("aria-selected", String(a.id === current()));
        li.setAttribute("aria-describedby", head.id);
        const name = document.createElement("span");
        name.className = "model-name";
        name.textContent = a.name;
        if (a.description) name.title = a.description;
        li.appendChild(name);
        const tags = [];
        if (a.featured) tags.push(["featured", gettext("featured")]);
        if (a.shared) tags.push(["shared", gettext("shared")]);
        if (!a.usable) tags.push(["unavailable", gettext("model not enabled for you")]);
        for (const [cls, text] of tags) {
          const tag = document.createElement("span");
          tag.className = "model-badge " + cls;
          tag.textContent = text;
          li.appendChild(tag);
        }
        li.addEventListener("mousedown", (e) => e.preventDefault());
        li.addEventListener("click", () => pick(a.id));
        list.appendChild(li);
        options.push(li);
      }
    }
    if (!groups.length && !assistants.length) {
      const li = document.createElement("li");
      li.className = "model-empty muted";
      li.setAttribute("role", "presentation");
      li.textContent = choices.providers.length ? gettext("No model matches.") : gettext("No model is set up for you.");
      list.appendChild(li);
    }
    groups.forEach((p, gi) => {
      const head = document.createElement("li");
      head.className = "model-group";
      head.setAttribute("role", "presentation");
      head.id = "model-group-" + gi;
      head.textContent = p.name;
      list.appendChild(head);
      for (const m of p.models) {
        const li = document.createElement("li");
        li.setAttribute("role", "option");
        li.id = "model-opt-" + options.length;
        li.dataset.id = m.id;
        li.setAttribute("aria-selected", String(m.id === current()));
        li.setAttribute("aria-describedby", head.id);
        const name = document.createElement("span");
        name.className = "model-name";
        name.textContent = m.label;
        li.appendChild(name);
        for (const b of badges(p, m)) {
          const tag = document.createElement("span");
          tag.className = "model-badge " + b;
          tag.textContent = BADGE_TEXT[b];
          li.appendChild(tag);
        }
        li.addEventListener("mousedown", (e) => e.preventDefault());  // keep focus in the search box
        li.addEventListener("click", () => pick(m.id));
        list.appendChild(li);
        options.push(li);
      }
    });
    const selected = options.findIndex((o) => o.dataset.id === current());
    activate(selected >= 0 ? selected : (options.length ? 0 : -1));
  }

  function activate(i) {
    options.forEach((o, j) => o.classList.toggle("active", j === i));
    active = i;
    if (i >= 0) {
      search.setAttribute("aria-activedescendant", options[i].id);
      options[i].scrollIntoView({block: "nearest"});
    } else search.removeAttribute("aria-activedescendant");
  }

  function open() {
    panel.hidden = false;
    button.setAttribute("aria-expanded", "true");
    search.value = "";
    render();
    search.focus();
  }

  function close(refocus = true) {
    if (panel.hidden) return;
    panel.hidden = true;
    button.setAttribute("aria-expanded", "false");
    if (refocus) button.focus();
  }

  function showAssistant(a) {
    root.dataset.assistant = a.assistant_id;
    root.dataset.provider = a.provider;
    root.dataset.model = a.model;
    label.textContent = a.name;
    button.title = interpolate(gettext("Assistant %s"), [a.name]);
    root.dispatchEvent(new CustomEvent("model:changed", {bubbles: true,
      detail: {provider: a.provider, model: a.model, assistant: a.assistant_id, name: a.name,
               starter_prompts: a.starter_prompts || []}}));
  }

  function show(p, m) {
    delete root.dataset.assistant;
    root.dataset.provider = p.slug;
    root.dataset.model = m.name;
    root.dataset.kind = p.kind;
    root.dataset.providerName = p.name;
    label.textContent = m.label;
    button.title = p.name + " · " + m.name;
    root.dispatchEvent(new CustomEvent("model:changed", {bubbles: true,
      detail: {provider: p.slug, model: m.name, kind: p.kind, name: p.name, auto_tier: m.auto_tier}}));
  }

  async function pickAssistant(a) {
    if (!root.dataset.urlThread) { showAssistant(a); say(a.usable ? "" : gettext("This assistant's model is not enabled for you."), a.usable ? "" : "bad"); return; }
    button.disabled = true;
    try {
      const t = await api("PATCH", root.dataset.urlThread, {assistant: a.assistant_id});
      showAssistant({...a, provider: t.provider || "", model: t.model});
      say(interpolate(gettext("Assistant set to %s."), [a.name]), "ok");
    } catch (e) {
      say(interpolate(gettext("Not switched: %s"), [e.message]), "bad");
    } finally {
      button.disabled = false;
    }
  }

  async function pick(id) {
    const a = findAssistant(id);
    if (a) { close(); if (id !== current()) await pickAssistant(a); return; }
    const [p, m] = find(id);
    if (!p) return;
    close();
    if (id === current()) return;
    if (!root.dataset.urlThread) { show(p, m); say(""); return; }
    button.disabled = true;
    try {
      const t = await api("PATCH", root.dataset.urlThread, {provider: p.slug, model: m.name});
      show(p, {...m, name: t.model});
      say(interpolate(gettext("Model set to %(model)s."), {model: m.label}, true), "ok");
    } catch (e) {
      say(interpolate(gettext("Not switched: %(error)s"), {error: e.message}, true), "bad");
    } finally {
      button.disabled = false;
    }
  }

  button.addEventListener("click", () => (panel.hidden ? open() : close()));
  search.addEventListener("input", render);
  search.addEventListener("keydown", (e) => {
    if (e.key === "ArrowDown" && options.length) { e.preventDefault(); activate((active + 1) % options.length); }
    else if (e.key === "ArrowUp" && options.length) { e.preventDefault(); activate((active - 1 + options.length) % options.length); }
    else if (e.key === "Home" && options.length && e.ctrlKey) { e.preventDefault(); activate(0); }
    else if (e.key === "Enter") { e.preventDefault(); if (active >= 0) pick(options[active].dataset.id); }
    else if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); close(); }
    else if (e.key === "Tab") close(false);
  });
  document.addEventListener("click", (e) => { if (!panel.hidden && !root.contains(e.target)) close(false); });

  // The landing page's workspace changed: its models and default (landing.js asks).
  root.addEventListener("model:reload", (e) => {
    choices = e.detail;
    delete root.dataset.assistant;
    const d = choices.default;
    const [p, m] = d ? find(d.id) : [null, null];
    if (p) show(p, m);
    else { root.dataset.provider = ""; root.dataset.model = ""; label.textContent = gettext("no model"); }
  });
  const chosen = findAssistant(current());
  const [p, m] = find(current());
  if (chosen) button.title = interpolate(gettext("Assistant %s"), [chosen.name]);
  else if (p) button.title = p.name + " · " + m.name;
  else if (root.dataset.providerName) button.title = root.dataset.providerName + " · " + root.dataset.model;
}
