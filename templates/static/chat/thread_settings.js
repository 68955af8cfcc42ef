// Thread settings (grounded, model saves, private items): saved at once with PATCH; the
// per-message toggles in the composer follow the thread's defaults when these change.
(function () {
  "use strict";
  var panel = document.getElementById("thread-settings");
  if (!panel) return;
  var status = panel.querySelector(".settings-status");
  var mirror = {grounded: "send-grounded", include_private_in_ai: "send-private"};
  panel.querySelectorAll("input[type=checkbox]").forEach(function (box) {
    box.addEventListener("change", function () {
      var body = {};
      body[box.name] = box.checked;
      box.disabled = true;
      window.chatApi("PATCH", "/api/v1/threads/" + panel.dataset.threadId + "/", body).then(function (t) {
        box.checked = !!t[box.name];
        status.textContent = "saved";
        var other = document.getElementById(mirror[box.name] || "");
        if (other) other.checked = box.checked;
      }).catch(function (e) {
        box.checked = !box.checked;
        status.textContent = "not saved: " + e.message;
      }).finally(function () { box.disabled = false; });
    });
  });
})();
