// Files attached in the composer: the paperclip, drag-and-drop and paste. Each file uploads at
// once (POST /api/v1/threads/{id}/attachments/, one request per file, with a progress bar) while
// the page stays usable; the send names the uploaded ones (message.send "attachments"). A file
// the server refuses shows the server's reason in its chip and in the composer's note; nothing
// of it is kept. Chips of a sent message leave the composer (the message shows its files).
//
// On the landing page there is no chat yet (uploads need one), so files are *held*: chosen,
// checked for size and number here, shown as chips (an image with a local preview), and
// uploaded by uploadTo(threadId) right after the send has created the chat, before the
// message is sent with their ids (landing.js). A refused upload gives every file back to the
// composer, held again, with the server's reason on the refused one's chip: nothing is lost.
import { csrf, urlFor } from "./api.js";
import { el, button } from "./dom.js";
import { formatList, formatNumber, formatUnit, gettext, interpolate, ngettext } from "./i18n.js";

// 2.5 MB, 12 kB, 300 bytes in the page's language.
export function fileSize(n) {
  if (n >= 1024 * 1024) return formatUnit(n / (1024 * 1024), "megabyte", {maximumFractionDigits: 1});
  return n >= 1024 ? formatUnit(Math.round(n / 1024), "kilobyte") : formatUnit(n, "byte", {unitDisplay: "long"});
}

// The files of a sent message, under its text: thumbnails for images (each a download link),
// a named link for documents.
export function attachmentList(files) {
  const list = el("ul", "msg-files");
  list.setAttribute("aria-label", gettext("Attached files"));
  for (const f of files) {
    const item = el("li", "msg-file " + f.kind);
    const link = el("a", "file-link");
    link.href = f.url;
    link.setAttribute("download", f.filename);
    link.title = interpolate(gettext("%(name)s (%(size)s) — download"), {name: f.filename, size: fileSize(f.size)}, true);
    if (f.kind === "image" && f.thumbnail_url) {
      const img = el("img", "file-thumb");
      img.src = f.thumbnail_url;
      img.alt = f.filename;
      img.loading = "lazy";
      link.appendChild(img);
    } else {
      link.appendChild(documentIcon());
      link.appendChild(el("span", "file-name", f.filename));
      link.appendChild(el("span", "file-size", fileSize(f.size)));
    }
    item.appendChild(link);
    list.appendChild(item);
  }
  return list;
}

export class Attachments {
  // form: the composer <form> (data-url-attachments, data-url-attachment, data-url-attachment-keep,
  // data-attach-max-bytes, data-attach-max-files, data-can-keep); say(message): the composer's note.
  // Without data-url-attachments (the landing page: data-url-attachments-template, "ID" for
  // the chat) files are held until uploadTo().
  constructor({form, chips, picker, pickButton, input, dropTargets, say, onChange}) {
    const d = form.dataset;
    Object.assign(this, {form, chips, say, onChange: onChange || (() => {})});
    this.urls = {upload: d.urlAttachments, one: d.urlAttachment, keep: d.urlAttachmentKeep,
                 template: d.urlAttachmentsTemplate};
    this.holding = !d.urlAttachments;
    this.maxBytes = Number(d.attachMaxBytes);
    this.maxFiles = Number(d.attachMaxFiles);
    this.canKeep = d.canKeep === "1";
    this.items = [];      // {file, chip, xhr, data (the server's attachment), error, held}
    this.sent = [];       // the attachments of the last send, for drawing the question at once
    if (!this.holding) this.restore();
    pickButton.addEventListener("click", () => picker.click());
    picker.addEventListener("change", () => { this.add(picker.files); picker.value = ""; });
    input.addEventListener("paste", (e) => {
      const files = e.clipboardData && e.clipboardData.files;
      if (files && files.length) { e.preventDefault(); this.add(files); }
    });
    for (const target of dropTargets) {
      target.addEventListener("dragover", (e) => {
        if (!hasFiles(e)) return;
        e.preventDefault();
        form.classList.add("dropping");
      });
      target.addEventListener("dragleave", (e) => {
        if (!target.contains(e.relatedTarget)) form.classList.remove("dropping");
      });
      target.addEventListener("drop", (e) => {
        if (!hasFiles(e)) return;
        e.preventDefault();
        form.classList.remove("dropping");
        this.add(e.dataTransfer.files);
      });
    }
  }

  // Files uploaded here before a reload and not sent yet come back as chips.
  restore() {
    fetch(this.urls.upload, {credentials: "same-origin"})
      .then((r) => (r.ok ? r.json() : []))
      .then((pending) => {
        for (const data of pending) {
          if (this.items.some((i) => i.data && i.data.id === data.id)) continue;
          const item = {file: {name: data.filename, size: data.size}, chip: null, xhr: null, data: null, error: ""};
          item.chip = this.chip(item);
          this.items.push(item);
          this.chips.appendChild(item.chip);
          this.done(item, data);
        }
        this.changed();
      })
      .catch(() => {});
  }

  ids() { return this.items.filter((i) => i.data).map((i) => i.data.id); }
  count() { return this.items.filter((i) => !i.error).length; }
  // Files that will go with the send: uploaded, or held for uploadTo().
  sendable() { return this.items.filter((i) => !i.error && (i.data || i.held)).length; }
  uploading() { return this.items.some((i) => !i.data && !i.error && !i.held); }

  add(fileList) {
    const skipped = [];
    for (const file of Array.from(fileList || [])) {
      if (this.count() >= this.maxFiles) { skipped.push(file.name); continue; }
      const item = {file, chip: null, xhr: null, data: null, error: ""};
      item.chip = this.chip(item);
      this.items.push(item);
      this.chips.appendChild(item.chip);
      this.changed();
      if (file.size > this.maxBytes) {
        this.fail(item, interpolate(gettext("%(name)s: larger than the %(limit)s limit (%(size)s)."),
                                    {name: file.name, limit: fileSize(this.maxBytes), size: fileSize(file.size)}, true));
      } else if (this.holding) {
        this.hold(item);
      } else {
        this.upload(item);
      }
    }
    if (skipped.length) {
      this.say(interpolate(ngettext("At most %(max)s file can be attached to one message; not added: %(names)s.",
                                    "At most %(max)s files can be attached to one message; not added: %(names)s.", this.maxFiles),
                           {max: formatNumber(this.maxFiles), names: formatList(skipped)}, true));
    }
  }

  chip(item) {
    const chip = el("li", "attachment-chip uploading");
    chip.appendChild(el("span", "chip-name", item.file.name));
    chip.appendChild(el("span", "chip-size", fileSize(item.file.size)));
    const bar = el("progress", "chip-progress");
    bar.max = 100;
    bar.value = 0;
    bar.setAttribute("aria-label", interpolate(gettext("Uploading %(name)s"), {name: item.file.name}, true));
    chip.appendChild(bar);
    chip.appendChild(el("span", "chip-status", gettext("uploading…")));
    chip.appendChild(button("×", "link chip-remove", () => this.remove(item),
                            interpolate(gettext("Remove %(name)s"), {name: item.file.name}, true)));
    return chip;
  }

  // A file kept here until the chat exists (the landing page): a chip that says it goes with
  // the message, an image previewed from the file itself.
  hold(item) {
    item.held = true;
    item.data = null;
    item.error = "";
    const chip = item.chip;
    chip.className = "attachment-chip held";
    const bar = chip.querySelector(".chip-progress");
    if (bar) bar.remove();
    const status = chip.querySelector(".chip-status");
    status.textContent = gettext("ready to send");
    status.removeAttribute("role");
    if (item.file.type && item.file.type.startsWith("image/") && item.file.type !== "image/svg+xml"
        && !chip.querySelector(".chip-thumb")) {
      const img = el("img", "chip-thumb");
      img.alt = "";
      chip.prepend(img);
      preview(item.file).then((url) => { if (url) img.src = url; else img.remove(); });
    }
    this.changed();
  }

  // Upload the held files to the chat ``threadId`` just created (one request per file, with
  // progress, in order). Resolves with their ids. When the server refuses any, every file is
  // still tried, so each refused one says why at once (not one per send); it rejects with an
  // Error (code attachment_refused: the one refusal's words, or how many were refused) and the
  // accepted files are held again for another try.
  async uploadTo(threadId) {
    this.urls.upload = urlFor(this.urls.template, threadId);
    const held = this.items.filter((i) => i.held && !i.error);
    const ids = [];
    const refused = [];
    for (const item of held) {
      item.held = false;
      const chip = item.chip;
      chip.className = "attachment-chip uploading";
      const bar = el("progress", "chip-progress");
      bar.max = 100;
      bar.value = 0;
      bar.setAttribute("aria-label", interpolate(gettext("Uploading %(name)s"), {name: item.file.name}, true));
      chip.insertBefore(bar, chip.querySelector(".chip-status"));
      chip.querySelector(".chip-status").textContent = gettext("uploading…");
      this.changed();
      const data = await new Promise((resolve) => {
        this.upload(item, resolve);
      });
      if (data) ids.push(data.id);
      else refused.push(item);
    }
    if (refused.length) {
      for (const other of held) if (!refused.includes(other)) this.hold(other);
      const error = new Error(refused.length === 1 ? refused[0].error
        : interpolate(ngettext("%(count)s file can't be sent; it says why. Remove it (×) and send again.",
                               "%(count)s files can't be sent; each says why. Remove them (×) and send again.", refused.length),
                      {count: formatNumber(refused.length)}, true));
      error.code = "attachment_refused";
      throw error;
    }
    return ids;
  }

  // The send failed after the files were uploaded to the chat it made (now deleted again):
  // they are held again for the next try.
  holdAgain() {
    if (!this.holding) return;
    for (const item of this.items) if (item.data) this.hold(item);
  }

  upload(item, settled = () => {}) {
    const body = new FormData();
    body.append("file", item.file, item.file.name);
    const xhr = new XMLHttpRequest();
    item.xhr = xhr;
    xhr.open("POST", this.urls.upload);
    xhr.setRequestHeader("X-CSRFToken", csrf());
    xhr.responseType = "json";
    const status = item.chip.querySelector(".chip-status");
    const bar = item.chip.querySelector(".chip-progress");
    xhr.upload.addEventListener("progress", (e) => {
      if (!e.lengthComputable) return;
      const pct = Math.round((e.loaded / e.total) * 100);
      bar.value = pct;
      status.textContent = pct < 100 ? formatNumber(pct / 100, {style: "percent"}) : gettext("checking…");
    });
    xhr.addEventListener("load", () => {
      item.xhr = null;
      const data = xhr.response;
      if (xhr.status === 201 && data && data.id) { this.done(item, data); settled(data); return; }
      const message = (data && data.error && data.error.message)
        || interpolate(gettext("%(name)s: upload failed (HTTP %(status)s)."), {name: item.file.name, status: xhr.status}, true);
      this.fail(item, message);
      settled(null);
    });
    xhr.addEventListener("error", () => {
      item.xhr = null;
      this.fail(item, interpolate(gettext("%(name)s: the server cannot be reached."), {name: item.file.name}, true));
      settled(null);
    });
    xhr.addEventListener("abort", () => settled(null));
    xhr.send(body);
  }

  done(item, data) {
    item.data = data;
    const chip = item.chip;
    chip.classList.remove("uploading");
    chip.classList.add("ready", data.kind);
    chip.dataset.attachmentId = data.id;
    chip.querySelector(".chip-progress").remove();
    chip.querySelector(".chip-status").textContent = data.kind === "image" ? `${data.width}×${data.height}` : gettext("ready");
    if (data.thumbnail_url && !chip.querySelector(".chip-thumb")) {
      const img = el("img", "chip-thumb");
      img.src = data.thumbnail_url;
      img.alt = "";
      chip.prepend(img);
    }
    if (data.kind === "document" && this.canKeep && !this.holding) {
      const keep = button(gettext("Keep in knowledge"), "link chip-keep", () => this.keep(item, keep),
                          interpolate(gettext("Also add %(name)s to the workspace's knowledge base"), {name: data.filename}, true));
      chip.insertBefore(keep, chip.querySelector(".chip-remove"));
    }
    this.changed();
  }

  fail(item, message) {
    item.error = message;
    const chip = item.chip;
    chip.classList.remove("uploading");
    chip.classList.add("failed");
    const bar = chip.querySelector(".chip-progress");
    if (bar) bar.remove();
    const status = chip.querySelector(".chip-status");
    status.textContent = message;
    status.setAttribute("role", "alert");
    this.changed();  // first: the composer's update() replaces its note
    this.say(message);
  }

  keep(item, keepButton) {
    keepButton.disabled = true;
    fetch(urlFor(this.urls.keep, item.data.id), {method: "POST", credentials: "same-origin",
                                                   headers: {"X-CSRFToken": csrf()}})
      .then((r) => r.json().then((body) => ({ok: r.ok, body})))
      .then(({ok, body}) => {
        if (ok) { keepButton.textContent = gettext("✓ kept in knowledge"); return; }
        keepButton.disabled = false;
        this.say((body && body.error && body.error.message) || gettext("Could not add it to the knowledge base."));
      })
      .catch(() => { keepButton.disabled = false; this.say(gettext("The server cannot be reached.")); });
  }

  remove(item) {
    if (item.xhr) item.xhr.abort();
    if (item.data && !this.holding) {
      fetch(urlFor(this.urls.one, item.data.id), {method: "DELETE", credentials: "same-origin",
                                                  headers: {"X-CSRFToken": csrf()}}).catch(() => {});
    }
    item.chip.remove();
    this.items = this.items.filter((i) => i !== item);
    this.changed();
  }

  // The send was accepted: the files went with it.
  accepted() {
    this.sent = this.items.filter((i) => i.data).map((i) => i.data);
    for (const item of this.items) item.chip.remove();
    this.items = [];
    this.changed();
    return this.sent;
  }

  changed() {
    this.chips.hidden = this.items.length === 0;
    this.onChange();
  }
}

// A small preview of a held image, drawn here (a data: URL: the page's CSP allows no blob:
// images); null when the browser cannot decode it (the server will say why at the send).
async function preview(file) {
  try {
    const bitmap = await createImageBitmap(file);
    const scale = 64 / Math.max(bitmap.width, bitmap.height, 1);
    const canvas = document.createElement("canvas");
    canvas.width = Math.max(1, Math.round(bitmap.width * Math.min(scale, 1)));
    canvas.height = Math.max(1, Math.round(bitmap.height * Math.min(scale, 1)));
    canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
    bitmap.close();
    return canvas.toDataURL("image/png");
  } catch (e) {
    return null;
  }
}

function hasFiles(e) {
  return !!e.dataTransfer && Array.from(e.dataTransfer.types || []).includes("Files");
}

const SVG = "http://www.w3.org/2000/svg";

// A page outline (no emoji: not every system has an emoji font).
function documentIcon() {
  const svg = document.createElementNS(SVG, "svg");
  for (const [k, v] of Object.entries({viewBox: "0 0 24 24", width: "16", height: "16", fill: "none",
    stroke: "currentColor", "stroke-width": "2", "stroke-linecap": "round", "stroke-linejoin": "round",
    "aria-hidden": "true", class: "file-icon"})) svg.setAttribute(k, v);
  for (const d of ["M14 2H6a2 2 0 0 0-2 2v16a2 2 0 0 0 2 2h12a2 2 0 0 0 2-2V8z", "M14 2v6h6", "M8 13h8", "M8 17h6"]) {
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("d", d);
    svg.appendChild(path);
  }
  return svg;
}
