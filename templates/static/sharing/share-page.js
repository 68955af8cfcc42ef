// The share page's code blocks as the chat shows them (chat/app/markdown.js): highlighted by
// highlight.js — on HTML the server already sanitised (chat.rendering); highlighting only
// re-reads the code's text and adds spans — and each with a Copy button. Without this script
// the page reads the same, unhighlighted.
import { hljs } from "../vendor/chat-vendor.js";
import { copyText } from "../chat/app/markdown.js";
import { gettext } from "../chat/app/i18n.js";

for (const pre of document.querySelectorAll("#share-messages .body pre")) {
  const code = pre.querySelector("code");
  const lang = code && (code.className.match(/language-([\w+-]+)/) || [])[1];
  if (lang && hljs.getLanguage(lang)) {
    code.innerHTML = hljs.highlight(code.textContent, {language: lang, ignoreIllegals: true}).value;
    code.classList.add("hljs");
  }
  const wrap = document.createElement("div");
  wrap.className = "code-block";
  const copy = document.createElement("button");
  copy.type = "button";
  copy.className = "copy-code";
  copy.textContent = gettext("Copy");
  copy.setAttribute("aria-label", gettext("Copy code"));
  copy.addEventListener("click", () => {
    copyText((code || pre).textContent).then(
      () => { copy.textContent = gettext("Copied"); setTimeout(() => { copy.textContent = gettext("Copy"); }, 1500); },
      () => { copy.textContent = gettext("Copy failed"); });
  });
  // In a .code-tools row as the chat's blocks have it (chat.css places it: over the code's
  // corner on wide screens, above the code on narrow ones); bare, the button stretched across
  // the block on a phone and sat above the code at its start on wide screens.
  const tools = document.createElement("div");
  tools.className = "code-tools";
  tools.appendChild(copy);
  pre.replaceWith(wrap);
  wrap.append(tools, pre);
}
