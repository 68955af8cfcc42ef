// The thread-settings menu (⚙): settings (grounded, model saves, private items, prompt tier)
// saved at once with PATCH, and the environment selector (the admin's environments): the
// production banner and the risk tier of tool calls follow the chosen environment
// (ui_context.envId). On the landing page (no data-url-thread) nothing is saved here: the
// values are read when the chat is created (landing.js).
import { api, urlFor } from "./api.js";
import { gettext, interpolate } from "./i18n.js";

const notSaved = (e) => interpolate(gettext("not saved: %(error)s"), {error: e.message}, true);

const panel = document.getElementById("thread-settings");
if (panel && panel.dataset.urlThread) {
  const status = panel.querySelector(".settings-status");
  const mirror = {grounded: "send-grounded", include_private_in_ai: "send-private"};
  panel.querySelectorAll("input[type=checkbox]").forEach((box) => {
    box.addEventListener("change", async () => {
      box.disabled = true;
      try {
        const t = await api("PATCH", panel.dataset.urlThread, {[box.name]: box.checked});
        box.checked = !!t[box.name];
        status.textContent = gettext("saved");
        const other = document.getElementById(mirror[box.name] || "");
        if (other) other.checked = box.checked;
      } catch (e) {
        box.checked = !box.checked;
        status.textContent = notSaved(e);
      } finally {
        box.disabled = box.dataset.locked === "1";
      }
    });
  });
}
if (panel) {
  // The panel closes like a menu: Escape or a click elsewhere.
  document.addEventListener("click", (e) => { if (panel.open && !panel.contains(e.target)) panel.open = false; });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape" && panel.open) { panel.open = false; e.preventDefault(); } });
}

const tier = document.getElementById("thread-tier");
if (tier) {
  const choices = JSON.parse((document.getElementById("model-choices") || {}).textContent || "{}");
  const picker = document.getElementById("model-picker");
  // "Auto" says what it resolves to for the chat's model.
  const hint = (autoTier) => { tier.options[0].textContent = autoTier ? interpolate(gettext("Auto (%(tier)s)"), {tier: autoTier}, true) : gettext("Auto"); };
  const autoFor = (provider, model) => {
    for (const p of (choices.providers || [])) for (const m of p.models) if (p.slug === provider && m.name === model) return m.auto_tier;
    return "";
  };
  if (picker) {
    hint(autoFor(picker.dataset.provider, picker.dataset.model));
    picker.addEventListener("model:changed", (e) => hint(e.detail.auto_tier));
  }
  const status = panel && panel.querySelector(".settings-status");
  let saved = tier.value;
  if (panel && panel.dataset.urlThread) {
    tier.addEventListener("change", async () => {
      tier.disabled = true;
      try {
        const t = await api("PATCH", panel.dataset.urlThread, {prompt_tier: tier.value});
        saved = t.prompt_tier;
        if (status) status.textContent = gettext("saved");
      } catch (e) {
        tier.value = saved;
        if (status) status.textContent = notSaved(e);
      } finally {
        tier.disabled = false;
      }
    });
  }
}

const env = document.getElementById("thread-env");
if (env && env.dataset.urlThread) {
  const banner = document.getElementById("prod-banner");
  const note = document.getElementById("thread-env-status");
  let saved = env.value;
  const paint = () => {
    const tier = env.options[env.selectedIndex].dataset.tier || "";
    env.className = "env-select" + (tier ? " env-" + tier : "");
    if (banner) banner.hidden = tier !== "prod";
  };
  paint();
  env.addEventListener("change", async () => {
    env.disabled = true;
    try {
      const thread = await api("GET", env.dataset.urlThread);
      const context = {...(thread.ui_context || {})};
      if (env.value) context.envId = env.value; else delete context.envId;
      await api("PATCH", env.dataset.urlThread, {ui_context: context});
      saved = env.value;
      note.textContent = "";
    } catch (e) {
      env.value = saved;
      note.textContent = notSaved(e);
    } finally {
      env.disabled = false;
      paint();
    }
  });
}

export { urlFor };
