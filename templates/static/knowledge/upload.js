// Knowledge upload (list page): drag-and-drop or the file picker, several files at once.
// Each file is its own POST /api/v1/knowledge/uploads/ (multipart) with an upload progress
// bar; the server answers 202 and imports in its executor, so the row then shows
// "importing…" and polls GET /api/v1/knowledge/uploads/{id}/ until the upload is done:
// a link to the new item, or the reason it failed (unsupported type, too large, unreadable,
// password-protected PDF). A failed file leaves nothing behind on the server. The list
// itself refreshes through the live feed (knowledge.js). An ES module.
import { formatList, formatNumber, formatUnit, gettext, interpolate } from "../chat/app/i18n.js";

const PARALLEL = 3, POLL_MS = 400;
// What a finished upload did to its item (the server's upload status).
const OUTCOME = {created: gettext("created"), updated: gettext("updated"), unchanged: gettext("unchanged")};

const root = document.getElementById("kb-upload");
if (root) start(root);

function mb(n) { return formatUnit(n / (1024 * 1024), "megabyte", {maximumFractionDigits: n < 10485760 ? 1 : 0}); }
function percent(n) { return formatNumber(n / 100, {style: "percent"}); }
function suffix(name) { const i = name.lastIndexOf("."); return i > 0 ? name.slice(i).toLowerCase() : ""; }

function start(root) {
  // Files go up one by one through the API; the form itself never submits (a listener, not
  // an inline onsubmit: the Content-Security-Policy allows no inline script).
  document.getElementById("kb-upload-form").addEventListener("submit", (e) => e.preventDefault());
  const drop = document.getElementById("kb-drop");
  const picker = document.getElementById("kb-file");
  const list = document.getElementById("kb-upload-list");
  const maxBytes = parseInt(root.dataset.maxBytes, 10);
  const suffixes = root.dataset.suffixes.split(",");
  const queue = [];
  let active = 0;

  function csrf() {
    const input = root.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function row(file) {
    const li = document.createElement("li");
    li.className = "kb-upload-file";
    const name = document.createElement("span"); name.className = "name"; name.textContent = file.name; name.title = file.name;
    const bar = document.createElement("progress"); bar.max = 100; bar.value = 0;
    const state = document.createElement("span"); state.className = "state"; state.textContent = gettext("waiting");
    li.append(name, bar, state);
    list.insertBefore(li, list.firstChild);
    return {li, bar, state};
  }
  function fail(r, message) {
    r.li.classList.add("failed"); r.bar.value = 0; r.bar.hidden = true;
    r.state.textContent = message;
  }
  function done(r, upload) {
    if (upload.status === "failed") { fail(r, upload.error || gettext("could not be imported")); return; }
    r.li.classList.add("done"); r.bar.value = 100;
    r.state.textContent = "";
    const a = document.createElement("a");
    a.href = "/knowledge/" + upload.item_id + "/";
    a.textContent = OUTCOME[upload.status] || upload.status;
    r.state.appendChild(a);
  }
  function poll(r, id) {
    fetch("/api/v1/knowledge/uploads/" + id + "/", {credentials: "same-origin"})
      .then((resp) => resp.json().then((d) => { if (!resp.ok) throw new Error(d.error ? d.error.message : "HTTP " + resp.status); return d; }))
      .then((upload) => { if (upload.done) done(r, upload); else setTimeout(() => poll(r, id), POLL_MS); })
      .catch((e) => fail(r, e.message));
  }
  function send(file, r) {
    active += 1;
    const form = new FormData();
    form.append("file", file);
    form.append("workspace", document.getElementById("kb-upload-workspace").value);
    form.append("tags", document.getElementById("kb-upload-tags").value);
    form.append("is_private", document.getElementById("kb-upload-private").checked ? "true" : "false");
    const xhr = new XMLHttpRequest();
    xhr.open("POST", root.dataset.url);
    xhr.setRequestHeader("X-CSRFToken", csrf());
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) { r.bar.value = Math.round(e.loaded * 100 / e.total); r.state.textContent = interpolate(gettext("uploading %(percent)s"), {percent: percent(r.bar.value)}, true); }
    };
    xhr.onload = () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
      if (xhr.status === 202 && body) {
        r.bar.removeAttribute("value");  // indeterminate while the server imports
        r.state.textContent = gettext("importing…");
        poll(r, body.id);
      } else {
        fail(r, (body && body.error && body.error.message) || interpolate(gettext("upload failed (HTTP %(status)s)"), {status: xhr.status}, true));
      }
      next();
    };
    xhr.onerror = () => { fail(r, gettext("upload failed: the connection broke")); next(); };
    r.state.textContent = interpolate(gettext("uploading %(percent)s"), {percent: percent(0)}, true);
    xhr.send(form);
  }
  function next() {
    active -= 1;
    pump();
  }
  function pump() {
    while (active < PARALLEL && queue.length) { const job = queue.shift(); send(job.file, job.row); }
  }
  function add(files) {
    for (const file of files) {
      const r = row(file);
      // The server checks the same; checking here spares a useless upload.
      const type = suffix(file.name), allowed = formatList(suffixes, "disjunction");
      if (suffixes.indexOf(type) === -1) {
        fail(r, type ? interpolate(gettext("unsupported file type %(suffix)s (use %(allowed)s)"), {suffix: type, allowed}, true)
          : interpolate(gettext("a file name without a type (use %(allowed)s)"), {allowed}, true));
        continue;
      }
      if (file.size > maxBytes) {
        fail(r, interpolate(gettext("larger than the %(limit)s limit (%(size)s)"), {limit: mb(maxBytes), size: mb(file.size)}, true));
        continue;
      }
      if (file.size === 0) { fail(r, gettext("the file is empty")); continue; }
      queue.push({file, row: r});
    }
    pump();
  }

  picker.addEventListener("change", () => { add(picker.files); picker.value = ""; });
  for (const t of ["dragenter", "dragover"]) {
    document.addEventListener(t, (e) => { e.preventDefault(); drop.classList.add("over"); });
  }
  for (const t of ["dragleave", "dragend"]) {
    document.addEventListener(t, (e) => { if (!e.relatedTarget) drop.classList.remove("over"); });
  }
  document.addEventListener("drop", (e) => {  // anywhere on the page, not only the box
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer && e.dataTransfer.files.length) add(e.dataTransfer.files);
  });
}
