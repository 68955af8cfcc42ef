// Thread header controls: settings (grounded, model saves, private items) saved at once with
// PATCH, and the environment selector (the admin's environments): the production banner
// and the risk tier of tool calls follow the chosen environment (ui_context.envId).
import { api, urlFor } from "./api.js";

const panel = document.getElementById("thread-settings");
if (panel) {
  const status = panel.querySelector(".settings-status");
  const mirror = {grounded: "send-grounded", include_private_in_ai: "send-private"};
  panel.querySelectorAll("input[type=checkbox]").forEach((box) => {
    box.addEventListener("change", async () => {
      box.disabled = true;
      try {
        const t = await api("PATCH", panel.dataset.urlThread, {[box.name]: box.checked});
        box.checked = !!t[box.name];
        status.textContent = "saved";
        const other = document.getElementById(mirror[box.name] || "");
        if (other) other.checked = box.checked;
      } catch (e) {
        box.checked = !box.checked;
        status.textContent = "not saved: " + e.message;
      } finally {
        box.disabled = box.dataset.locked === "1";
      }
    });
  });
  // The panel closes like a menu: Escape or a click elsewhere.
  document.addEventListener("click", (e) => { if (panel.open && !panel.contains(e.target)) panel.open = false; });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape" && panel.open) { panel.open = false; e.preventDefault(); } });
}

const env = document.getElementById("thread-env");
if (env) {
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
      note.textContent = "not saved: " + e.message;
    } finally {
      env.disabled = false;
      paint();
    }
  });
}

export { urlFor };
