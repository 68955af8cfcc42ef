// Model output → safe DOM, in the browser, as strictly as the server (chat/rendering.py):
// markdown-it with the same options (no raw HTML, breaks, tables, strikethrough), then
// DOMPurify with nh3's allow-list (same tags, same per-tag attributes, http/https/mailto or
// relative URLs only). Code is highlighted after sanitising (highlight.js only adds spans
// from text), every code block gets a copy button (HTML, SVG and Mermaid blocks also a
// Preview, when the workspace allows it: artifacts.js), links open in a new tab with
// rel="noopener noreferrer nofollow", and [n] markers become citation links.
import { MarkdownIt, DOMPurify, hljs } from "../../vendor/chat-vendor.js";
import { gettext, interpolate } from "./i18n.js";
import { artifactKind, artifactLabel, previewButton } from "./artifacts.js";
import { copyText } from "./clipboard.js";

export { copyText };

const md = new MarkdownIt("commonmark", {html: false, linkify: false, breaks: true})
  .enable("table").enable("strikethrough");

const ALLOWED_TAGS = ["p", "br", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li", "a",
  "h1", "h2", "h3", "h4", "h5", "h6", "hr", "table", "thead", "tbody", "tr", "th", "td", "sup"];
const ATTRIBUTES = {a: ["href", "title"], code: ["class"], th: ["align"], td: ["align"], ol: ["start"]};
const ALL_ATTRIBUTES = [...new Set(Object.values(ATTRIBUTES).flat())];
const SAFE_URL = /^(?:(?:https?|mailto):|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i;

const purify = DOMPurify(window);
purify.addHook("uponSanitizeAttribute", (node, data) => {
  const allowed = ATTRIBUTES[node.nodeName.toLowerCase()] || [];
  if (!allowed.includes(data.attrName)) data.keepAttr = false;
});

export function sanitize(html) {
  return purify.sanitize(html, {
    ALLOWED_TAGS, ALLOWED_ATTR: ALL_ATTRIBUTES, ALLOWED_URI_REGEXP: SAFE_URL,
    RETURN_DOM_FRAGMENT: true, ALLOW_DATA_ATTR: false, ALLOW_ARIA_ATTR: false,
  });
}

function copyButton(pre) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "copy-code";
  b.textContent = gettext("Copy");
  b.setAttribute("aria-label", gettext("Copy code"));
  b.addEventListener("click", () => {
    const code = pre.querySelector("code");
    copyText(code ? code.textContent : pre.textContent).then(
      () => { b.textContent = gettext("Copied"); setTimeout(() => { b.textContent = gettext("Copy"); }, 1500); },
      () => { b.textContent = gettext("Copy failed"); });
  });
  return b;
}

const CITE = /\[(\d{1,3})\]/g;

// Wrap "[n]" in text (not inside code or links) in <a class="cite"> for the citations given.
function linkCitations(root, citations) {
  const known = new Set(citations.map((c) => String(c.n)));
  if (!known.size) return;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const hits = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement && n.parentElement.closest("code, pre, a")) continue;
    if (CITE.test(n.nodeValue)) hits.push(n);
    CITE.lastIndex = 0;
  }
  for (const node of hits) {
    const frag = document.createDocumentFragment();
    let last = 0;
    node.nodeValue.replace(CITE, (whole, num, at) => {
      frag.appendChild(document.createTextNode(node.nodeValue.slice(last, at)));
      if (known.has(num)) {
        const a = document.createElement("a");
        a.className = "cite";
        a.href = "#";
        a.dataset.n = num;
        a.textContent = whole;
        a.setAttribute("aria-label", interpolate(gettext("Source %(n)s"), {n: num}, true));
        frag.appendChild(a);
      } else {
        frag.appendChild(document.createTextNode(whole));
      }
      last = at + whole.length;
      return whole;
    });
    frag.appendChild(document.createTextNode(node.nodeValue.slice(last)));
    node.replaceWith(frag);
  }
}

// Render ``text`` into ``target`` (replacing its content). ``highlight``: false while a
// long answer streams fast is fine, but the default highlights every time.
// ``artifacts``: false for a block still being written (a streamed answer's open tail) — an
// HTML, SVG or Mermaid block gets its Preview button (artifacts.js) once it is complete.
export function renderInto(target, text, {citations = [], highlight = true, artifacts = true} = {}) {
  const frag = sanitize(md.render(text || ""));
  frag.querySelectorAll("a[href]").forEach((a) => {
    a.target = "_blank";
    a.rel = "noopener noreferrer nofollow";
  });
  frag.querySelectorAll("pre").forEach((pre) => {
    const code = pre.querySelector("code");
    const lang = code ? (code.className.match(/language-([\w+-]+)/) || [])[1] : undefined;
    const kind = artifacts && code ? artifactKind(lang, code.textContent) : null;
    const source = code ? code.textContent : "";
    if (code && highlight) {
      if (lang && hljs.getLanguage(lang)) {
        code.innerHTML = hljs.highlight(code.textContent, {language: lang, ignoreIllegals: true}).value;
        code.classList.add("hljs");
      }
    }
    const wrap = document.createElement("div");
    wrap.className = "code-block";
    pre.replaceWith(wrap);
    const tools = document.createElement("div");
    tools.className = "code-tools";
    if (kind) {
      // A block that can be previewed gets a header row (its kind, Preview, Copy) above the code:
      // two buttons floating over the code would cover its first line.
      wrap.classList.add("previewable");
      const label = document.createElement("span");
      label.className = "code-lang";
      label.textContent = artifactLabel(kind);
      tools.append(label, previewButton(kind, source));
    }
    tools.appendChild(copyButton(pre));
    wrap.appendChild(tools);
    wrap.appendChild(pre);
  });
  frag.querySelectorAll("table").forEach((table) => {
    const wrap = document.createElement("div");
    wrap.className = "table-wrap";
    table.replaceWith(wrap);
    wrap.appendChild(table);
  });
  linkCitations(frag, citations);
  target.replaceChildren(frag);
}
