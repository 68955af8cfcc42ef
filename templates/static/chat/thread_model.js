// Thread header: provider / model / prompt-tier selectors. Saves with PATCH
// /api/v1/threads/{id}/ (session cookie + CSRF); model suggestions come from the catalogue
// (GET /api/v1/providers/{slug}/models/?workspace=: the models the user's role may use); a name
// can be typed, and one not enabled for the role is refused with the reason (model_not_allowed).
// Saving sets the form's data-provider, which agent_mode.js follows. An ES module.
import { api } from "./app/api.js";

const form = document.getElementById("thread-model");
if (form) start(form);

// A provider the catalogue says cannot serve now (its <option>'s data-status).
function notConfigured(opt) {
  const s = opt && opt.dataset.status || "";
  return s.indexOf("not configured") === 0 || s === "disabled" || s.indexOf("not available") === 0;
}

// The note for a provider's status from the catalogue: [text, kind] ("" when it is fine).
function describe(provider) {
  if (provider.status === "ok") return ["", ""];
  if (!provider.configured) return [provider.name + " is not configured: " + provider.setup_hint, "bad"];
  return [provider.name + ": " + provider.status, "bad"];
}

function start(form) {
  const providerSel = document.getElementById("thread-provider");
  const modelInput = document.getElementById("thread-model-name");
  const options = document.getElementById("thread-model-options");
  const tierSel = document.getElementById("thread-tier");
  const status = document.getElementById("thread-provider-status");
  let saved = {provider: form.dataset.provider, model: form.dataset.model, tier: form.dataset.tier};
  let autoTiers = {};

  form.addEventListener("submit", (e) => e.preventDefault());

  function say(text, kind) {
    status.textContent = text || "";
    status.className = "provider-status" + (kind ? " " + kind : "");
  }

  const selectedOption = () => providerSel.options[providerSel.selectedIndex];

  function showTierHint() {
    const auto = autoTiers[modelInput.value];
    tierSel.options[0].textContent = auto ? "Auto (" + auto + ")" : "Auto";
  }

  function loadModels(slug) {
    options.textContent = "";
    autoTiers = {};
    if (!slug) return Promise.resolve(null);
    return api("GET", form.dataset.urlModels.replace("ID", encodeURIComponent(slug))).then((data) => {
      for (const m of data.models) {
        const o = document.createElement("option");
        o.value = m.name;
        o.label = (m.label || m.name) + (m.parameter_size ? " · " + m.parameter_size : "") + " · " + m.auto_tier;
        options.appendChild(o);
        autoTiers[m.name] = m.auto_tier;
      }
      modelInput.placeholder = data.provider.lists_models ? "pick or type a model" : "type a model name";
      say(...describe(data.provider));
      showTierHint();
      return data;
    }).catch((e) => {
      say("Could not load models: " + e.message, "bad");
      // The server could not answer (a backing service away, a restart): the chat's own
      // provider's list is asked again every 5 s until it comes (the note stayed for good).
      if ((e.status === 503 || e.code === "network") && slug === saved.provider) {
        setTimeout(() => { if (providerSel.value === slug) loadModels(slug); }, 5000);
      }
      return null;
    });
  }

  function save(changes, note) {
    return api("PATCH", form.dataset.urlThread, changes).then((t) => {
      saved = {provider: t.provider || "", model: t.model, tier: t.prompt_tier};
      form.dataset.provider = saved.provider; form.dataset.model = saved.model; form.dataset.tier = saved.tier;
      if (note) say(note, "ok");
      return t;
    }).catch((e) => say("Not saved: " + e.message, "bad"));
  }

  providerSel.addEventListener("change", () => {
    const opt = selectedOption();
    if (notConfigured(opt)) {
      // Say what to set, and keep the thread on its working provider.
      say(opt.textContent.split(" — ")[0] + " is " + opt.dataset.status + ". This chat stays on its current provider.", "bad");
      providerSel.value = saved.provider;
      return;
    }
    let model = opt.dataset.defaultModel || "";
    loadModels(opt.value).then((data) => {
      if (!model && data && data.models.length) model = data.models[0].name;
      modelInput.value = model;
      showTierHint();
      return save({provider: opt.value, model}, "Switched to " + opt.textContent.split(" — ")[0] + ".");
    });
  });

  modelInput.addEventListener("change", () => {
    const model = modelInput.value.trim();
    if (model === saved.model) return;
    showTierHint();
    save({model}, "Model set to " + (model || "the provider default") + ".");
  });

  tierSel.addEventListener("change", () => {
    save({prompt_tier: tierSel.value}, "Prompt tier: " + tierSel.options[tierSel.selectedIndex].textContent + ".");
  });

  const current = selectedOption();
  if (current && notConfigured(current)) {
    say(current.textContent.split(" — ")[0] + " is " + current.dataset.status + ".", "bad");
  }
  loadModels(saved.provider);
}
