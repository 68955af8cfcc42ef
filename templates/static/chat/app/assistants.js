// The settings page's workspace assistants (#assistants): list the caller's and the shared ones,
// make, edit and delete them through /api/v1/assistants/ with the session. The tools offered
// for a workspace come from GET /api/v1/assistants/tools/?workspace= (what the caller's role
// there may use); a refused save keeps the form as it was and shows the server's reason.
import { api, urlFor } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { button, el } from "./dom.js";
import { gettext, interpolate } from "./i18n.js";

const section = document.getElementById("assistants");
if (section) start(section);

function start(section) {
  const d = section.dataset;
  const list = document.getElementById("assistant-list");
  const empty = document.getElementById("assistant-empty");
  const form = document.getElementById("assistant-form");
  const title = document.getElementById("assistant-form-title");
  const error = document.getElementById("assistant-error");
  const save = document.getElementById("assistant-save");
  const cancel = document.getElementById("assistant-cancel");
  const ws = document.getElementById("assistant-workspace");
  const checks = document.getElementById("assistant-tool-checks");
  const field = (name) => document.getElementById("assistant-" + name);
  let editing = null;  // the assistant being edited, or null: a new one

  const showError = (message) => { error.textContent = message || ""; error.hidden = !message; };

  async function loadTools(selected = []) {
    checks.textContent = "";
    let tools = [];
    try {
      tools = await api("GET", d.urlTools + "?workspace=" + encodeURIComponent(ws.value));
    } catch (e) {
      showError(e.message);
    }
    for (const t of tools) {
      const label = el("label", "tool-check");
      const box = el("input");
      box.type = "checkbox";
      box.value = t.name;
      box.checked = selected.includes(t.name);
      const text = el("span", "tool-check-text");
      text.append(el("code", "", t.name));
      if (t.description) {  // its first line under the name (a phone has no hover); the whole in the tooltip
        const first = t.description.split("\n")[0].trim();
        const desc = el("span", "tool-desc muted", first.length > 140 ? first.slice(0, 139) + "…" : first);
        desc.dir = "auto";
        text.append(desc);
        label.title = t.description;
      }
      label.append(box, text);
      checks.appendChild(label);
    }
    if (!tools.length) checks.appendChild(el("p", "muted", gettext("No tools are open to your role here.")));
  }

  function item(a) {
    const li = el("li", "assistant-item");
    li.dataset.id = a.id;
    const head = el("div", "assistant-head");
    head.append(el("strong", "", a.name));
    const meta = [a.workspace, a.provider + (a.model ? "/" + a.model : ""),
                  a.visibility === "workspace" ? gettext("shared") : gettext("only me")];
    if (a.featured) meta.push(gettext("featured"));
    if (a.disabled) meta.push(gettext("disabled by an admin"));
    head.append(el("span", "muted", " · " + meta.join(" · ")));
    li.append(head);
    if (a.description) li.append(el("p", "muted", a.description));
    // The name /v1 answers to (the section's intro says to name it as the model on the API):
    // without it here a person had to list GET /v1/models to find it.
    const api_id = el("p", "muted assistant-api-id", gettext("Model on the API:") + " ");
    api_id.append(el("code", "", a.model_id));
    li.append(api_id);
    const actions = el("div", "actions");
    if (a.can_edit) {
      actions.append(button(gettext("Edit"), "link", () => edit(a)),
                     button(gettext("Delete"), "link delete", () => remove(a)));
    }
    if (a.can_moderate) {  // a workspace admin: feature it in the picker, or disable it for everyone
      actions.append(
        button(a.featured ? gettext("Unfeature") : gettext("Feature"), "link", () => moderate(a, {featured: !a.featured})),
        button(a.disabled ? gettext("Enable") : gettext("Disable"), "link", () => moderate(a, {disabled: !a.disabled})));
    }
    if (actions.childElementCount) li.append(actions);
    return li;
  }

  async function refresh() {
    const rows = await api("GET", d.urlList);
    list.textContent = "";
    for (const a of rows) list.appendChild(item(a));
    empty.hidden = rows.length > 0;
  }

  function reset() {
    editing = null;
    form.reset();  // the model goes back to the one selected by the page: a new chat's
    title.textContent = gettext("New assistant");
    save.textContent = gettext("Create assistant");
    cancel.hidden = true;
    ws.disabled = false;
    showError("");
    loadTools();
  }

  function edit(a) {
    editing = a;
    ws.value = a.workspace;
    ws.disabled = true;  // an assistant stays in its workspace
    field("name").value = a.name;
    field("description").value = a.description;
    field("model").value = a.provider + "/" + a.model;
    field("instructions").value = a.instructions;
    field("tags").value = a.knowledge_tags.join(", ");
    field("starters").value = a.starter_prompts.join("\n");
    field("visibility").value = a.visibility;
    title.textContent = interpolate(gettext("Edit %s"), [a.name]);
    save.textContent = gettext("Save changes");
    cancel.hidden = false;
    showError("");
    loadTools(a.tools);
    field("name").focus();
  }

  async function moderate(a, change) {
    try {
      await api("POST", urlFor(d.urlDetail, a.id) + "moderate/", change);
      await refresh();
    } catch (e) {
      showError(e.message);
    }
  }

  async function remove(a) {
    const ok = await confirmDialog({title: gettext("Delete assistant?"), danger: true, confirmLabel: gettext("Delete"),
      message: interpolate(gettext("%s will be deleted. Chats that use it keep their messages."), [a.name])});
    if (!ok) return;
    try {
      await api("DELETE", urlFor(d.urlDetail, a.id));
      if (editing && editing.id === a.id) reset();
      await refresh();
    } catch (e) {
      showError(e.message);
    }
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    showError("");
    const [provider, ...model] = field("model").value.split("/");
    const body = {
      name: field("name").value, description: field("description").value,
      provider: provider || null, model: model.join("/"), instructions: field("instructions").value,
      tools: [...checks.querySelectorAll("input:checked")].map((b) => b.value),
      knowledge_tags: field("tags").value.split(",").map((t) => t.trim()).filter(Boolean),
      starter_prompts: field("starters").value.split("\n").map((t) => t.trim()).filter(Boolean),
      visibility: field("visibility").value,
    };
    save.disabled = true;
    try {
      if (editing) await api("PATCH", urlFor(d.urlDetail, editing.id), body);
      else await api("POST", d.urlList, {...body, workspace: ws.value});
      reset();
      await refresh();
    } catch (err) {
      showError(err.message);  // the form keeps what was typed
    } finally {
      save.disabled = false;
    }
  });
  cancel.addEventListener("click", reset);
  ws.addEventListener("change", () => loadTools());
  reset();
  refresh().catch((e) => showError(e.message));
}
