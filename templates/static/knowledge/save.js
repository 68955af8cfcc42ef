// "Save to knowledge" on chat messages: chat.js draws a button per message
// (.kb-save[data-message-id]); this opens a small form (type, optional title and tags) and
// POSTs /api/v1/messages/{id}/save-to-knowledge/. Works whatever provider the thread uses:
// the server saves the stored message text. On failure the form stays filled and says why;
// drafts survive the message list being redrawn.
(function () {
  "use strict";
  var box = document.getElementById("messages");
  if (!box) return;
  var TYPES = ["note", "fact", "decision", "howto", "reference", "snippet"];
  var drafts = {};  // messageId → {type, title, tags}

  var me = document.currentScript;
  if (me && me.src) {
    var css = document.createElement("link");
    css.rel = "stylesheet";
    css.href = me.src.replace(/save\.js(\?.*)?$/, "save.css");
    document.head.appendChild(css);
  }

  function csrfToken() {
    var m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  function node(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function openForm(button) {
    var id = button.dataset.messageId;
    var slot = button.parentNode;
    if (slot.querySelector("form")) return;
    var draft = drafts[id] || {type: "note", title: "", tags: ""};
    var form = node("form", {"class": "kb-save-form", "aria-label": "Save to knowledge"});
    var type = node("select", {name: "type", "aria-label": "Type"});
    TYPES.forEach(function (t) { var o = node("option", {value: t}, t); if (t === draft.type) o.selected = true; type.appendChild(o); });
    var title = node("input", {name: "title", placeholder: "Title (optional)", maxlength: "300", "aria-label": "Title"});
    title.value = draft.title;
    var tags = node("input", {name: "tags", placeholder: "tags, comma-separated", "aria-label": "Tags"});
    tags.value = draft.tags;
    var save = node("button", {type: "submit"}, "Save");
    var cancel = node("button", {type: "button", "class": "link"}, "Cancel");
    var status = node("span", {"class": "kb-save-status", role: "status"});
    [type, title, tags, save, cancel, status].forEach(function (e) { form.appendChild(e); });
    button.hidden = true;
    slot.appendChild(form);
    title.focus();

    function remember() { drafts[id] = {type: type.value, title: title.value, tags: tags.value}; }
    form.addEventListener("input", remember);
    cancel.addEventListener("click", function () { remember(); form.remove(); button.hidden = false; });
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      remember();
      save.disabled = true;
      status.className = "kb-save-status";
      status.textContent = "saving…";
      var body = {type: type.value, title: title.value.trim(),
                  tags: tags.value.split(",").map(function (t) { return t.trim(); }).filter(Boolean)};
      fetch("/api/v1/messages/" + encodeURIComponent(id) + "/save-to-knowledge/", {
        method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRFToken": csrfToken()},
        body: JSON.stringify(body)
      }).then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (data) { return {ok: r.ok, status: r.status, data: data}; });
      }).then(function (res) {
        if (!res.ok) {
          var msg = (res.data.error && res.data.error.message) || ("HTTP " + res.status);
          throw new Error(msg);
        }
        delete drafts[id];
        form.remove();
        var done = node("span", {"class": "kb-saved"}, "Saved to knowledge: ");
        var link = node("a", {href: "/knowledge/" + res.data.id + "/"}, res.data.title);
        done.appendChild(link);
        slot.appendChild(done);
      }).catch(function (err) {
        save.disabled = false;  // the form keeps what was typed
        status.className = "kb-save-status error";
        status.textContent = "Not saved: " + err.message;
      });
    });
  }

  box.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest(".kb-save");
    if (button && box.contains(button)) openForm(button);
  });
})();
