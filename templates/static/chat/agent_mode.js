// "Admin mode — <agent name>": shown whenever the thread targets an agent provider (kind
// agent_runs): the agent runs commands on the servers it administers. Follows the header's
// model picker ("model:changed", chat/app/model-picker.js). An ES module.
const picker = document.getElementById("model-picker");
const badge = document.getElementById("agent-mode");
if (picker && badge) {
  picker.addEventListener("model:changed", (e) => {
    const isAgent = e.detail.kind === "agent_runs";
    badge.hidden = !isAgent;
    if (isAgent) document.getElementById("agent-mode-name").textContent = e.detail.name;
  });
}
