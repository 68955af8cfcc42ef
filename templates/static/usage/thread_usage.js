// Usage on the thread page: each assistant turn shows its tokens and cost on hover, the
// header shows the thread's total, and a banner warns when a budget's soft limit is reached
// (budget.warning events; /usage/budgets/<thread>/ on load) or its hard limit stops replies.
// Listens to the page's chat:messages (thread.js) and chat:event (main.js) events on
// #messages; loaded before main.js, so it hears the first ones. An ES module.
const box = document.getElementById("messages");
if (box) start(box);

function add(sum, u) {
  for (const k of ["input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"]) {
    if (u[k] !== null && u[k] !== undefined) sum[k] = (sum[k] || 0) + u[k];
  }
  if (u.cost !== null && u.cost !== undefined && u.currency) {
    sum.cost = (sum.cost || 0) + parseFloat(u.cost);
    sum.currency = u.currency;
  }
  sum.reported = sum.reported || u.input_tokens !== null || u.output_tokens !== null;
}

function describe(sum) {
  if (!sum.reported) return "The provider reported no token usage.";
  let text = (sum.input_tokens || 0) + " input + " + (sum.output_tokens || 0) + " output tokens";
  const extra = [];
  if (sum.cached_tokens) extra.push(sum.cached_tokens + " cached");
  if (sum.reasoning_tokens) extra.push(sum.reasoning_tokens + " reasoning");
  if (extra.length) text += " (" + extra.join(", ") + ")";
  text += sum.currency ? " · " + sum.cost.toFixed(6) + " " + sum.currency : " · no price set";
  return text;
}

function start(box) {
  const total = document.getElementById("thread-usage");
  const banner = document.getElementById("budget-banner");

  box.addEventListener("chat:messages", (e) => {
    const byRun = {}, thread = {};
    for (const m of e.detail) {
      if (m.role !== "assistant" || !m.usage || !Object.keys(m.usage).length) continue;
      add(byRun[m.run_id] = byRun[m.run_id] || {}, m.usage);
      add(thread, m.usage);
    }
    for (const runId of Object.keys(byRun)) {
      const turn = box.querySelector('article.msg.assistant[data-run-id="' + runId + '"]');
      if (!turn) continue;
      turn.title = describe(byRun[runId]);
      turn.dataset.tokens = (byRun[runId].input_tokens || 0) + (byRun[runId].output_tokens || 0);
    }
    if (total) {
      const tokens = (thread.input_tokens || 0) + (thread.output_tokens || 0);
      total.textContent = tokens ? tokens + " tokens" + (thread.currency ? " · " + thread.cost.toFixed(4) + " " + thread.currency : "") : "";
      total.title = tokens ? "This chat so far: " + describe(thread) : "";
    }
  });

  function show(b) {
    if (!banner) return;
    const unit = b.metric === "cost" ? " " + b.currency : " tokens";
    const reset = new Date(b.resets_at).toLocaleString();
    const exceeded = b.state === "exceeded";
    banner.textContent = (exceeded ? "Budget used up: " : "Budget warning: ") + b.spent + unit + " of " +
      (exceeded || !b.soft_limit ? b.hard_limit : b.soft_limit) + unit + " this " + b.period +
      (exceeded ? " — replies resume at " : " — resets at ") + reset + ".";
    banner.className = "budget-banner" + (exceeded ? " exceeded" : "");
    banner.hidden = false;
  }

  box.addEventListener("chat:event", (e) => {
    const ev = e.detail;
    if (ev.type === "budget.warning") {
      const reached = ev.hard_limit !== null && parseFloat(ev.spent) >= parseFloat(ev.hard_limit);
      show({...ev, state: reached ? "exceeded" : "warning"});
    }
  });

  fetch("/usage/budgets/" + box.dataset.threadId + "/", {credentials: "same-origin"})
    .then((r) => (r.ok ? r.json() : {budgets: []}))
    .then((d) => {
      const worst = d.budgets.find((b) => b.state === "exceeded") || d.budgets.find((b) => b.state === "warning");
      if (worst) show(worst);
    });
}
