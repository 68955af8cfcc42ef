// The settings page's API keys (#api-keys): list, create (the secret shown once, with copy)
// and revoke, through /api/v1/api-keys/ with the session. The secret lives only in the page
// until "I have copied it" (or a reload): the server keeps its hash.
import { api, urlFor } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { button, el, timeElement } from "./dom.js";
import { copyText } from "./markdown.js";
import { gettext, interpolate, pageLanguage } from "./i18n.js";

const section = document.getElementById("api-keys");
if (section) {
  const form = document.getElementById("api-key-form");
  const nameInput = document.getElementById("api-key-name");
  const expiry = document.getElementById("api-key-expiry");
  const error = document.getElementById("api-key-error");
  const secretBox = document.getElementById("api-key-secret");
  const secretValue = document.getElementById("api-key-secret-value");
  const copy = document.getElementById("api-key-copy");
  const table = document.getElementById("api-key-list");
  const empty = document.getElementById("api-key-empty");
  const body = table.querySelector("tbody");

  const showError = (message) => { error.textContent = message || ""; error.hidden = !message; };
  const cell = (content, label) => {
    const td = el("td");
    if (label) td.dataset.label = label;
    if (content instanceof Node) td.append(content); else td.textContent = content;
    return td;
  };

  function row(key) {
    const tr = el("tr");
    tr.dataset.keyId = key.id;
    if (key.expired) tr.className = "expired";
    const expires = key.expires_at ? timeElement(key.expires_at) : gettext("never");
    if (key.expires_at) expires.textContent = new Date(Date.parse(key.expires_at)).toLocaleDateString(pageLanguage());
    tr.append(
      cell(key.name, gettext("Name")),
      cell(el("code", null, key.prefix + "…"), gettext("Key")),
      cell(timeElement(key.created_at), gettext("Created")),
      cell(key.expired ? el("span", "error", gettext("expired")) : expires, gettext("Expires")),
      cell(key.last_used_at ? timeElement(key.last_used_at) : gettext("never"), gettext("Last used")),
      cell(button(gettext("Revoke"), "deny revoke", () => revoke(key, tr),
                  interpolate(gettext("Revoke %(name)s"), {name: key.name}, true))),
    );
    return tr;
  }

  function paint(keys) {
    body.replaceChildren(...keys.map(row));
    table.hidden = keys.length === 0;
    empty.hidden = keys.length !== 0;
  }

  async function load() {
    try {
      paint(await api("GET", section.dataset.urlList));
    } catch (e) {
      showError(interpolate(gettext("Could not load your keys: %(error)s"), {error: e.message}, true));
    }
  }

  async function revoke(key, tr) {
    const ok = await confirmDialog({
      title: gettext("Revoke this key?"), confirmLabel: gettext("Revoke"), danger: true,
      message: interpolate(gettext("“%(name)s” (%(prefix)s…) stops working at once, also for programs connected with it now."),
                           {name: key.name, prefix: key.prefix}, true),
    });
    if (!ok) return;
    try {
      await api("DELETE", urlFor(section.dataset.urlDetail, key.id));
      tr.remove();
      await load();
    } catch (e) {
      showError(interpolate(gettext("Not revoked: %(error)s"), {error: e.message}, true));
    }
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    showError("");
    const payload = {name: nameInput.value.trim()};
    if (expiry.value) payload.expires_at = new Date(Date.now() + Number(expiry.value) * 864e5).toISOString();
    const submit = form.querySelector("button[type=submit]");
    submit.disabled = true;
    try {
      const created = await api("POST", section.dataset.urlList, payload);
      secretValue.textContent = created.key;
      copy.textContent = gettext("Copy");
      secretBox.hidden = false;
      form.reset();
      copy.focus();
      await load();
    } catch (err) {
      showError(err.message);
    } finally {
      submit.disabled = false;
    }
  });

  copy.addEventListener("click", () => {
    copyText(secretValue.textContent).then(
      () => { copy.textContent = gettext("Copied"); },
      () => { copy.textContent = gettext("Copy failed: select the key and copy it"); });
  });

  document.getElementById("api-key-done").addEventListener("click", () => {
    secretValue.textContent = "";
    secretBox.hidden = true;
    nameInput.focus();
  });

  load();
}
