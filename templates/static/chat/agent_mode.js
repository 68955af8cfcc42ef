// "Admin mode — <agent name>": shown whenever the thread targets an agent provider (kind
// agent_runs). Follows the provider picker: #thread-model's data-provider changes after a
// successful save (thread_model.js). An ES module.
const form = document.getElementById("thread-model");
const badge = document.getElementById("agent-mode");
if (form && badge && window.MutationObserver) {
  new MutationObserver(() => {
    const opt = form.querySelector(`#thread-provider option[value="${CSS.escape(form.dataset.provider || "")}"]`);
    const isAgent = !!opt && opt.dataset.kind === "agent_runs";
    badge.hidden = !isAgent;
    if (isAgent) document.getElementById("agent-mode-name").textContent = opt.textContent.split(" — ")[0];
  }).observe(form, {attributes: true, attributeFilter: ["data-provider"]});
}
