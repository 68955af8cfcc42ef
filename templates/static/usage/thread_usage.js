// Usage on the thread page: each assistant turn shows its tokens and cost on hover, the
// header shows the thread's total, and a banner warns when a budget's soft limit is reached
// (budget.warning events; /usage/budgets/<thread>/ on load) or its hard limit stops replies.
// Listens to the page's chat:messages (thread.js) and chat:event (main.js) events on
// #messages; loaded before main.js, so it hears the first ones. An ES module.
import { formatNumber, gettext, interpolate, ngettext, pageLanguage } from "../chat/app/i18n.js";

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

// "120 input + 45 output tokens (30 cached) · 0.000210 USD": one line per turn and thread.
function describe(sum) {
  if (!sum.reported) return gettext("The provider reported no token usage.");
  const n = (k) => formatNumber(sum[k] || 0);
  let text = interpolate(gettext("%(input)s input + %(output)s output tokens"), {input: n("input_tokens"), output: n("output_tokens")}, true);
  const cached = sum.cached_tokens, reasoning = sum.reasoning_tokens;
  if (cached && reasoning) {
    text = interpolate(gettext("%(usage)s (%(cached)s cached, %(reasoning)s reasoning)"),
                       {usage: text, cached: n("cached_tokens"), reasoning: n("reasoning_tokens")}, true);
  } else if (cached) {
    text = interpolate(gettext("%(usage)s (%(cached)s cached)"), {usage: text, cached: n("cached_tokens")}, true);
  } else if (reasoning) {
    text = interpolate(gettext("%(usage)s (%(reasoning)s reasoning)"), {usage: text, reasoning: n("reasoning_tokens")}, true);
  }
  return text + " · " + (sum.currency ? price(sum.cost, sum.currency, 6) : gettext("no price set"));
}

// An amount in its currency with ``digits`` decimals: "0.000210 USD" / "0,000210 USD".
function price(cost, currency, digits) {
  return formatNumber(cost, {minimumFractionDigits: digits, maximumFractionDigits: digits}) + " " + currency;
}

function tokensText(count) {
  return interpolate(ngettext("%(count)s token", "%(count)s tokens", count), {count: formatNumber(count)}, true);
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
      total.textContent = tokens ? tokensText(tokens) + (thread.currency ? " · " + price(thread.cost, thread.currency, 4) : "") : "";
      total.title = tokens ? interpolate(gettext("This chat so far: %(usage)s"), {usage: describe(thread)}, true) : "";
    }
  });

  // One banner, the worst budget's state, in the words and formats of the server's refusal
  // ("200,000 tokens", "resets at 2027-01-01 00:00 UTC"); it is read again after every turn and
  // goes by itself when its window resets (it stayed up, stale, before).
  let hideAt = null;
  function show(b) {
    if (!banner) return;
    const exceeded = b.state === "exceeded";
    const values = {spent: amount(b.spent, b), limit: amount(exceeded || !b.soft_limit ? b.hard_limit : b.soft_limit, b),
                    time: utcText(b.resets_at)};
    banner.textContent = interpolate(bannerText(exceeded, b.period), values, true);
    banner.className = "budget-banner" + (exceeded ? " exceeded" : "");
    banner.hidden = false;
    clearTimeout(hideAt);
    const wait = Date.parse(b.resets_at) - Date.now();
    if (wait > 0 && wait < 2 ** 31) hideAt = setTimeout(refresh, wait + 1000);
  }

  function refresh() {
    return fetch("/usage/budgets/" + box.dataset.threadId + "/", {credentials: "same-origin"})
      .then((r) => (r.ok ? r.json() : null))
      .then((d) => {
        if (!d || !banner) return;
        const worst = d.budgets.find((b) => b.state === "exceeded") || d.budgets.find((b) => b.state === "warning");
        if (worst) show(worst); else banner.hidden = true;
      })
      .catch(() => {});
  }

  box.addEventListener("chat:event", (e) => {
    const ev = e.detail;
    if (ev.type === "error" && ev.code === "budget_exceeded" && banner) {
      // A send refused by a spent budget: the banner says the refusal's words, the one place
      // it is said (chat/app/handlers.js leaves the composer's note and the label alone).
      banner.textContent = ev.message;
      banner.className = "budget-banner exceeded";
      banner.hidden = false;
    } else if (ev.type === "budget.warning") {
      const reached = ev.hard_limit !== null && parseFloat(ev.spent) >= parseFloat(ev.hard_limit);
      show({...ev, state: reached ? "exceeded" : "warning"});
    } else if (ev.type === "run.completed" || ev.type === "run.failed" || ev.type === "run.cancelled") {
      refresh();
    }
  });
  refresh();
}

// The banner's sentence for a budget's state and period (usage.models.Period: day, month).
function bannerText(exceeded, period) {
  if (period === "day") {
    return exceeded ? gettext("Budget used up: %(spent)s of %(limit)s today — replies resume at %(time)s.")
      : gettext("Budget warning: %(spent)s of %(limit)s today — resets at %(time)s.");
  }
  return exceeded ? gettext("Budget used up: %(spent)s of %(limit)s this month — replies resume at %(time)s.")
    : gettext("Budget warning: %(spent)s of %(limit)s this month — resets at %(time)s.");
}

const tokenCount = new Intl.NumberFormat(pageLanguage(), {maximumFractionDigits: 0});
const money = new Intl.NumberFormat(pageLanguage(), {maximumFractionDigits: 4});

// "200,000 tokens" / "12.5 USD" from the API's decimal strings ("200000.000000"), in the
// page's language ("200.000 Tokens").
export function amount(value, b) {
  const n = parseFloat(value);
  if (!Number.isFinite(n)) return "?";
  if (b.metric === "cost") return money.format(n) + " " + b.currency;
  return interpolate(ngettext("%(count)s token", "%(count)s tokens", n), {count: tokenCount.format(n)}, true);
}

// The server's format for a reset time (usage/services.py): "2027-01-01 00:00 UTC" — the
// same in every language (ISO digits), as the server's refusal says it.
export function utcText(iso) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? "?" : new Date(t).toISOString().slice(0, 16).replace("T", " ") + " UTC";
}
