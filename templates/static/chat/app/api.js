// JSON calls with the session cookie + CSRF. Errors reject with an Error carrying the
// server's {"error": {code, message}} (err.code, err.status).
import { gettext } from "./i18n.js";

export function csrf() {
  const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

export async function api(method, url, body) {
  let response;
  try {
    response = await fetch(url, {
      method, credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-CSRFToken": csrf()},
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    const err = new Error(gettext("the server cannot be reached"));
    err.code = "network";
    throw err;
  }
  if (response.status === 204) return null;
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    const err = new Error((data && data.error && data.error.message) || ("HTTP " + response.status));
    err.code = data && data.error && data.error.code;
    err.status = response.status;
    throw err;
  }
  return data;
}

// URL templates come from the page (data-url-* attributes with the placeholder "ID").
export function urlFor(template, id) {
  return template.replace("ID", encodeURIComponent(id));
}
