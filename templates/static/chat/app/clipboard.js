// Copy text to the clipboard: the Clipboard API where the page is a secure context, the
// selection fallback on plain-HTTP deployments (where the API is unavailable).
export function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  return new Promise((resolve, reject) => {
    const area = document.createElement("textarea");
    area.value = text;
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    if (ok) resolve(); else reject(new Error("copy refused"));
  });
}
