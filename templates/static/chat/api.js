// Shared helper for the chat pages: JSON calls to /api/v1/ with the session cookie + CSRF.
window.chatApi = (function () {
  "use strict";
  function csrf() {
    var m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  return function (method, url, body) {
    return fetch(url, {
      method: method, credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-CSRFToken": csrf()},
      body: body ? JSON.stringify(body) : undefined
    }).then(function (r) {
      if (r.status === 204) return null;
      return r.json().then(function (data) {
        if (!r.ok) throw new Error((data.error && data.error.message) || ("HTTP " + r.status));
        return data;
      });
    });
  };
})();
