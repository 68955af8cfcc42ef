// Keyboard shortcuts: Ctrl/⌘+Shift+O new chat, / or Ctrl/⌘+Shift+; focus the composer,
// Ctrl/⌘+K search chats, Esc stops a run (or closes a menu/preview first).
function typing(target) {
  return target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

document.addEventListener("keydown", (e) => {
  const mod = e.ctrlKey || e.metaKey;
  if (mod && e.shiftKey && (e.key === "O" || e.key === "o")) {
    e.preventDefault();
    // The landing page is the new chat: go there, or start writing when already on it.
    const landing = document.getElementById("landing");
    const input = document.getElementById("input");
    if (landing && input) input.focus();
    else { const link = document.getElementById("new-chat"); if (link) location.assign(link.href); }
    return;
  }
  if (mod && (e.key === "k" || e.key === "K")) {
    e.preventDefault();
    const search = document.getElementById("chat-search");
    if (search) { document.body.classList.add("rail-open"); search.focus(); }
    return;
  }
  if ((e.key === "/" && !typing(e.target)) || (mod && e.shiftKey && e.key === ";")) {
    const input = document.getElementById("input");
    if (input) { e.preventDefault(); input.focus(); }
    return;
  }
  if (e.key === "Escape" && !e.defaultPrevented) {
    if (document.querySelector(".thread-menu:not([hidden]), .cite-preview, .edit-form, .model-panel:not([hidden]), dialog[open]")) return;  // they close first
    const stop = document.getElementById("stop");
    if (stop && !stop.hidden) stop.click();
  }
});
