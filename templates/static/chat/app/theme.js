// Light/dark: follows the system until the person picks one with the toggle (remembered).
import { gettext } from "./i18n.js";

const KEY = "chatplatform-theme";
const root = document.documentElement;

function apply(choice) {
  if (choice === "light" || choice === "dark") root.dataset.theme = choice;
  else delete root.dataset.theme;
}

function effective() {
  if (root.dataset.theme) return root.dataset.theme;
  return window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

let stored = null;
try { stored = localStorage.getItem(KEY); } catch (e) { stored = null; }
apply(stored);

const toggle = document.getElementById("theme-toggle");
function label() {
  if (!toggle) return;
  const next = effective() === "dark" ? "light" : "dark";
  toggle.textContent = next === "dark" ? "☾" : "☀";
  toggle.title = next === "dark" ? gettext("Switch to dark mode") : gettext("Switch to light mode");
  toggle.setAttribute("aria-label", toggle.title);
}
if (toggle) {
  toggle.addEventListener("click", () => {
    const next = effective() === "dark" ? "light" : "dark";
    apply(next);
    try { localStorage.setItem(KEY, next); } catch (e) { /* private mode: this page only */ }
    label();
  });
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", label);
  label();
}
