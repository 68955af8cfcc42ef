// Artifact previews (issue 55; chat.artifacts on the server). An answer's HTML, SVG and Mermaid
// code blocks get a Preview button; it opens the panel (templates/chat/_artifact_panel.html: a
// side panel beside the chat on a wide screen, a full-screen sheet on a phone) with a fresh
// <iframe sandbox="allow-scripts"> of the platform's preview document. The page hands the
// block's text to that frame by postMessage once the frame says it is ready; the frame's own
// CSP keeps the artifact off the network, forms, storage and the top window.
//
// Trust: the frame is untrusted (it runs the model's code). From it the page takes exactly one
// message — {type: "artifact-ready"} from the frame it opened, once — and answers it with the
// source; every other message, a second "ready" included, is ignored.
import { copyText } from "./clipboard.js";
import { gettext, interpolate } from "./i18n.js";

const LANGUAGES = {__proto__: null, html: "html", htm: "html", xhtml: "html", svg: "svg", mermaid: "mermaid", mmd: "mermaid"};
const SVG_START = /^\s*(?:<\?xml[^>]*>\s*)?(?:<!--[\s\S]*?-->\s*)*<svg[\s>]/i;

const FILES = {
  html: {name: "artifact.html", type: "text/html"},
  svg: {name: "image.svg", type: "image/svg+xml"},
  mermaid: {name: "diagram.mmd", type: "text/plain"},
};

export function artifactLabel(kind) {
  return {html: gettext("HTML"), svg: gettext("SVG"), mermaid: gettext("Mermaid diagram")}[kind];
}

// The preview document's URL when this page's workspace allows previews, else "".
function frameUrl() {
  const panel = document.getElementById("artifact-panel");
  return (panel && panel.dataset.frameUrl) || "";
}

// "html" | "svg" | "mermaid" for a code block that can be previewed here (this page's
// workspace allows previews), else null.
export function artifactKind(lang, text) {
  return frameUrl() ? codeKind(lang, text) : null;
}

// "html" | "svg" | "mermaid" for a fenced code block's language and text, else null. The
// fence's language decides; an ``xml`` or unlabelled block is SVG when it is an <svg> element.
export function codeKind(lang, text) {
  const name = (lang || "").toLowerCase();
  if (LANGUAGES[name]) return LANGUAGES[name];
  if ((name === "" || name === "xml") && SVG_START.test(text || "")) return "svg";
  return null;
}

export function previewButton(kind, source) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "preview-code";
  b.textContent = gettext("Preview");
  b.setAttribute("aria-label", interpolate(gettext("Preview %(kind)s"), {kind: artifactLabel(kind)}, true));
  b.addEventListener("click", () => open(kind, source, b));
  return b;
}

let current = null;  // {frame, kind, source, sent, opener}

function open(kind, source, opener) {
  const panel = document.getElementById("artifact-panel");
  const url = frameUrl();
  if (!panel || !url) return;
  wire(panel);
  // A fresh frame for every preview: nothing of the previous artifact survives.
  const frame = document.createElement("iframe");
  frame.className = "artifact-frame";
  frame.setAttribute("sandbox", "allow-scripts");  // never allow-same-origin, -top-navigation, -popups, -forms
  frame.setAttribute("referrerpolicy", "no-referrer");
  frame.title = interpolate(gettext("%(kind)s preview"), {kind: artifactLabel(kind)}, true);
  current = {frame, kind, source, sent: false, opener};
  panel.querySelector(".artifact-title").textContent = frame.title;
  const copy = panel.querySelector(".artifact-copy");
  if (copy.dataset.label) copy.textContent = copy.dataset.label;  // not "Copied" from the last one
  panel.querySelector(".artifact-body").replaceChildren(frame);
  frame.src = url;
  panel.hidden = false;
  document.querySelector(".app")?.classList.add("with-artifact");
  panel.querySelector(".artifact-close").focus();
}

function close() {
  const panel = document.getElementById("artifact-panel");
  if (!panel || panel.hidden) return;
  panel.hidden = true;
  panel.querySelector(".artifact-body").replaceChildren();
  document.querySelector(".app")?.classList.remove("with-artifact");
  const opener = current && current.opener;
  current = null;
  if (opener && opener.isConnected) opener.focus();
}

function download() {
  if (!current) return;
  const file = FILES[current.kind];
  const url = URL.createObjectURL(new Blob([current.source], {type: `${file.type};charset=utf-8`}));
  const a = document.createElement("a");
  a.href = url;
  a.download = file.name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

function flash(button, text) {
  const label = button.dataset.label || button.textContent;
  button.dataset.label = label;
  button.textContent = text;
  setTimeout(() => { button.textContent = label; }, 1500);
}

function onMessage(event) {
  // Only the frame this page opened, only its first "ready"; the artifact may post anything.
  if (!current || current.sent || event.source !== current.frame.contentWindow) return;
  if (!event.data || event.data.type !== "artifact-ready") return;
  current.sent = true;
  // "*": the sandboxed frame's origin is opaque, so it cannot be named; the message goes to
  // this frame's window only, and only the text the person asked to preview is in it.
  current.frame.contentWindow.postMessage({
    type: "artifact-render", kind: current.kind, source: current.source,
    labels: {diagramError: gettext("This diagram has an error:"),
      loadFailed: gettext("Could not load the diagram renderer.")},
  }, "*");
}

let wired = false;

function wire(panel) {
  if (wired) return;
  wired = true;
  window.addEventListener("message", onMessage);
  panel.querySelector(".artifact-close").addEventListener("click", close);
  panel.querySelector(".artifact-download").addEventListener("click", download);
  const copy = panel.querySelector(".artifact-copy");
  copy.addEventListener("click", () => {
    if (!current) return;
    copyText(current.source).then(() => flash(copy, gettext("Copied")), () => flash(copy, gettext("Copy failed")));
  });
  panel.addEventListener("keydown", (e) => {
    if (e.key === "Escape") { e.stopPropagation(); close(); }
  });
}
