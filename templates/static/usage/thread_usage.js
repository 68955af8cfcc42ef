// Usage on the thread page: each assistant turn shows its tokens and cost on hover, the
// header shows the thread's total, and a banner warns when a budget's soft limit is reached
// (budget.warning events; /usage/budgets/<thread>/ on load) or its hard limit stops replies.
(function () {
  "use strict";
  var box = document.getElementById("messages");
  if (!box) return;
  var total = document.getElementById("thread-usage");
  var banner = document.getElementById("budget-banner");

  function add(sum, u) {
    ["input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"].forEach(function (k) {
      if (u[k] !== null && u[k] !== undefined) sum[k] = (sum[k] || 0) + u[k];
    });
    if (u.cost !== null && u.cost !== undefined && u.currency) {
      sum.cost = (sum.cost || 0) + parseFloat(u.cost);
      sum.currency = u.currency;
    }
    sum.reported = sum.reported || u.input_tokens !== null || u.output_tokens !== null;
  }

  function describe(sum) {
    if (!sum.reported) return "The provider reported no token usage.";
    var text = (sum.input_tokens || 0) + " input + " + (sum.output_tokens || 0) + " output tokens";
    var extra = [];
    if (sum.cached_tokens) extra.push(sum.cached_tokens + " cached");
    if (sum.reasoning_tokens) extra.push(sum.reasoning_tokens + " reasoning");
    if (extra.length) text += " (" + extra.join(", ") + ")";
    text += sum.currency ? " · " + sum.cost.toFixed(6) + " " + sum.currency : " · no price set";
    return text;
  }

  box.addEventListener("chat:messages", function (e) {
    var byRun = {}, thread = {};
    e.detail.forEach(function (m) {
      if (m.role !== "assistant" || !m.usage || !Object.keys(m.usage).length) return;
      add(byRun[m.run_id] = byRun[m.run_id] || {}, m.usage);
      add(thread, m.usage);
    });
    Object.keys(byRun).forEach(function (runId) {
      var turn = box.querySelector('article.msg.assistant[data-run-id="' + runId + '"]');
      if (!turn) return;
      turn.title = describe(byRun[runId]);
      turn.dataset.tokens = (byRun[runId].input_tokens || 0) + (byRun[runId].output_tokens || 0);
    });
    if (total) {
      var tokens = (thread.input_tokens || 0) + (thread.output_tokens || 0);
      total.textContent = tokens ? tokens + " tokens" + (thread.currency ? " · " + thread.cost.toFixed(4) + " " + thread.currency : "") : "";
      total.title = tokens ? "This chat so far: " + describe(thread) : "";
    }
  });

  function show(b) {
    if (!banner) return;
    var unit = b.metric === "cost" ? " " + b.currency : " tokens";
    var reset = new Date(b.resets_at).toLocaleString();
    var exceeded = b.state === "exceeded";
    banner.textContent = (exceeded ? "Budget used up: " : "Budget warning: ") + b.spent + unit + " of " +
      (exceeded || !b.soft_limit ? b.hard_limit : b.soft_limit) + unit + " this " + b.period +
      (exceeded ? " — replies resume at " : " — resets at ") + reset + ".";
    banner.className = "budget-banner" + (exceeded ? " exceeded" : "");
    banner.hidden = false;
  }

  box.addEventListener("chat:event", function (e) {
    var ev = e.detail;
    if (ev.type === "budget.warning") {
      var reached = ev.hard_limit !== null && parseFloat(ev.spent) >= parseFloat(ev.hard_limit);
      show(Object.assign({}, ev, {state: reached ? "exceeded" : "warning"}));
    }
  });

  fetch("/usage/budgets/" + box.dataset.threadId + "/", {credentials: "same-origin"})
    .then(function (r) { return r.ok ? r.json() : {budgets: []}; })
    .then(function (d) {
      var worst = d.budgets.filter(function (b) { return b.state === "exceeded"; })[0] ||
        d.budgets.filter(function (b) { return b.state === "warning"; })[0];
      if (worst) show(worst);
    });
})();
