// Sources under an answer: only the ones the answer cites (grouped by item); the items
// retrieved but not cited are folded into one "n more retrieved" line (a <details> that opens
// to the list) — the Markdown export says the same (chat/export.py, cited_sources). Inline [n]
// links open a preview of the quoted passage.
import { el, button } from "./dom.js";
import { urlFor } from "./api.js";
import { formatNumber, gettext, interpolate, ngettext } from "./i18n.js";

function citedNumbers(text) {
  const found = new Set();
  for (const m of (text || "").matchAll(/\[(\d{1,3})\]/g)) found.add(m[1]);
  return found;
}

function groupByItem(citations) {
  const groups = new Map();
  for (const c of citations) {
    if (!groups.has(c.item_id)) groups.set(c.item_id, {title: c.title, ns: []});
    groups.get(c.item_id).ns.push(c.n);
  }
  return groups;
}

export function citationList(citations, text, itemUrl) {
  const cited = citedNumbers(text);
  const used = citations.filter((c) => cited.has(String(c.n)));
  const citedItems = new Set(used.map((c) => c.item_id));
  const unused = citations.filter((c) => !citedItems.has(c.item_id));  // each item is listed once
  const box = el("div", "sources");
  const list = (items, cls, label, parent = box) => {
    if (!items.length) return;
    if (label) parent.appendChild(el("div", "sources-label", label));
    const ul = el("ul", "citations " + cls);
    for (const [id, g] of groupByItem(items)) {
      const li = el("li");
      li.appendChild(el("span", "cite-n", g.ns.map((n) => "[" + n + "]").join("")));
      const link = el("a", null, g.title || gettext("untitled"));
      link.href = urlFor(itemUrl, id);
      li.appendChild(link);
      ul.appendChild(li);
    }
    parent.appendChild(ul);
  };
  list(used, "cited", gettext("Sources"));
  const more = groupByItem(unused).size;
  if (more) {
    const fold = el("details", "more-retrieved");
    fold.appendChild(el("summary", null, interpolate(ngettext("%(count)s more retrieved", "%(count)s more retrieved", more),
                                                       {count: formatNumber(more)}, true)));
    list(unused, "uncited", "", fold);
    box.appendChild(fold);
  }
  return box;
}

// One floating preview per page, positioned under the [n] link that opened it.
let preview = null;

function closePreview() {
  if (preview) { preview.remove(); preview = null; }
}

export function showPreview(anchor, citation, itemUrl) {
  closePreview();
  preview = el("div", "cite-preview");
  preview.setAttribute("role", "dialog");
  preview.setAttribute("aria-label", interpolate(gettext("Source %(n)s"), {n: citation.n}, true));
  const head = el("div", "cite-preview-head");
  const link = el("a", null, "[" + citation.n + "] " + (citation.title || gettext("untitled")));
  link.href = urlFor(itemUrl, citation.item_id);
  head.appendChild(link);
  head.appendChild(button("×", "link close", closePreview, gettext("Close preview")));
  preview.appendChild(head);
  preview.appendChild(el("blockquote", "cite-passage", citation.passage || gettext("The passage is no longer available.")));
  document.body.appendChild(preview);
  const r = anchor.getBoundingClientRect();
  const width = Math.min(360, window.innerWidth - 16);
  preview.style.width = width + "px";
  preview.style.left = Math.max(8, Math.min(r.left, window.innerWidth - width - 8)) + window.scrollX + "px";
  preview.style.top = r.bottom + 6 + window.scrollY + "px";
}

// Hover (mouse), focus (keyboard) and tap (touch) all open the preview.
export function wireCitationPreviews(root, lookup, itemUrl) {
  const open = (e) => {
    const a = e.target.closest && e.target.closest("a.cite");
    if (!a || !root.contains(a)) return;
    const c = lookup(a);
    if (c) showPreview(a, c, itemUrl);
    if (e.type === "click") e.preventDefault();
  };
  root.addEventListener("mouseover", open);
  root.addEventListener("focusin", open);
  root.addEventListener("click", open);
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") closePreview(); });
  document.addEventListener("click", (e) => {
    if (preview && !preview.contains(e.target) && !(e.target.closest && e.target.closest("a.cite"))) closePreview();
  });
}
