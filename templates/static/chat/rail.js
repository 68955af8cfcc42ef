// Left rail: rename / duplicate / delete a chat (REST API with the session cookie + CSRF).
(function () {
  "use strict";
  var api = window.chatApi;
  document.querySelectorAll(".thread-item").forEach(function (item) {
    var id = item.dataset.threadId;
    var menu = item.querySelector(".thread-menu");
    item.querySelector(".menu-toggle").addEventListener("click", function (e) {
      e.preventDefault();
      menu.hidden = !menu.hidden;
    });
    menu.querySelector('[data-action="rename"]').addEventListener("click", function () {
      var current = item.querySelector(".t-title").textContent;
      var title = window.prompt("Rename chat", current);
      if (title === null) return;
      api("PATCH", "/api/v1/threads/" + id + "/", {title: title}).then(function (t) {
        item.querySelector(".t-title").textContent = t.title || "New chat";
        var head = document.getElementById("thread-title");
        if (head && location.pathname.indexOf(id) >= 0) head.textContent = t.title || "New chat";
        menu.hidden = true;
      }).catch(function (e) { window.alert("Rename failed: " + e.message); });
    });
    menu.querySelector('[data-action="duplicate"]').addEventListener("click", function () {
      api("POST", "/api/v1/threads/" + id + "/duplicate/").then(function (t) {
        location.href = "/chat/" + t.id + "/";
      }).catch(function (e) { window.alert("Duplicate failed: " + e.message); });
    });
    menu.querySelector('[data-action="delete"]').addEventListener("click", function () {
      var name = item.querySelector(".t-title").textContent;
      if (!window.confirm("Delete “" + name + "” and all its messages? This cannot be undone.")) return;
      api("DELETE", "/api/v1/threads/" + id + "/").then(function () {
        if (location.pathname.indexOf(id) >= 0) location.href = "/chat/"; else item.remove();
      }).catch(function (e) { window.alert("Delete failed: " + e.message); });
    });
  });
})();
