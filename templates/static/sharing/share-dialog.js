// The chat page's Share dialog (issue 55): make a read-only link to the branch shown now —
// for the workspace's members, or public with an expiry when the workspace allows it — copy
// it, and list and revoke the chat's links. Everything goes through
// /api/v1/threads/{id}/shares/ and /api/v1/shares/{id}/ (sharing/api.py); a workspace admin
// reading someone else's chat sees the list and may revoke, only the owner makes links.
import { api, urlFor } from "../chat/app/api.js";
import { el, button } from "../chat/app/dom.js";
import { gettext, ngettext, interpolate } from "../chat/app/i18n.js";
import { copyText } from "../chat/app/markdown.js";
import { confirmDialog } from "../chat/app/dialogs.js";

const opener = document.getElementById("share-button");
const DAY_MS = 24 * 3600 * 1000;
const dateFmt = new Intl.DateTimeFormat(undefined, {dateStyle: "medium", timeStyle: "short"});

function describe(share) {
  const who = share.visibility === "public" ? gettext("Anyone with the link") : gettext("Workspace members");
  let until;
  if (share.expired) until = gettext("expired");
  else if (share.expires_at) until = interpolate(gettext("until %(when)s"), {when: dateFmt.format(new Date(share.expires_at))}, true);
  else until = gettext("until revoked");
  return `${who} · ${until}`;
}

function expiryChoices(select, publicLink, maxDays) {
  const keep = select.value;
  select.replaceChildren();
  const choices = [];
  if (!publicLink) choices.push(["", gettext("Never (until revoked)")]);
  for (const days of [1, 7, 30, 90]) {
    if (publicLink && days > maxDays) continue;
    choices.push([String(days), interpolate(ngettext("%(n)s day", "%(n)s days", days), {n: days}, true)]);
  }
  if (publicLink && !choices.some(([v]) => Number(v) === maxDays)) {
    choices.push([String(maxDays), interpolate(ngettext("%(n)s day", "%(n)s days", maxDays), {n: maxDays}, true)]);
  }
  for (const [value, label] of choices) {
    const o = el("option", "", label);
    o.value = value;
    select.appendChild(o);
  }
  const values = choices.map(([v]) => v);
  select.value = values.includes(keep) ? keep : (publicLink ? (values.includes("7") ? "7" : values[0]) : "");
}

async function openDialog() {
  const urls = {shares: opener.dataset.urlShares, share: opener.dataset.urlShare,
                workspaceSharing: opener.dataset.urlWorkspaceSharing};
  const dialog = el("dialog", "app-dialog share-dialog");
  dialog.id = "share-dialog";
  dialog.setAttribute("aria-labelledby", "share-dialog-title");
  const title = el("h2", "dialog-title", gettext("Share this chat"));
  title.id = "share-dialog-title";
  const intro = el("p", "muted dialog-message", gettext(
    "A read-only snapshot of the conversation as it is shown now; messages added later are not included. Tool inputs and results are never shown, and sources only to people who may open them."));
  intro.id = "share-dialog-desc";
  dialog.setAttribute("aria-describedby", intro.id);
  const status = el("p", "share-status");
  status.id = "share-status";
  status.setAttribute("role", "status");
  const body = el("div");
  const listHead = el("h3", "", gettext("Links to this chat"));
  const list = el("ul", "share-list");
  list.id = "share-list";
  const empty = el("p", "muted", gettext("No links yet."));
  empty.id = "share-empty";
  const close = button(gettext("Close"), "secondary", () => dialog.close());
  const actions = el("div", "dialog-actions");
  actions.appendChild(close);
  dialog.append(title, intro, body, status, listHead, list, empty, actions);
  document.body.appendChild(dialog);
  dialog.addEventListener("close", () => { dialog.remove(); opener.focus(); }, {once: true});
  dialog.showModal();

  const say = (text, bad = false) => { status.textContent = text; status.classList.toggle("error", bad); };
  let state;
  try {
    state = await api("GET", urls.shares);
  } catch (e) {
    say(e.message, true);
    return;
  }

  const renderList = () => {
    list.replaceChildren();
    for (const share of state.shares) {
      const li = el("li");
      li.dataset.shareId = share.id;
      li.appendChild(el("span", "share-what", describe(share)));
      if (!share.expired) {
        li.appendChild(button(gettext("Copy link"), "secondary share-copy", () => copy(share.url)));
      }
      li.appendChild(button(gettext("Revoke"), "deny share-revoke", async () => {
        const ok = await confirmDialog({
          title: gettext("Revoke this link?"),
          message: gettext("Whoever opens it from now on sees that it is no longer available."),
          confirmLabel: gettext("Revoke"), danger: true});
        if (!ok) return;
        try {
          await api("DELETE", urlFor(urls.share, share.id));
          state.shares = state.shares.filter((s) => s.id !== share.id);
          renderList();
          say(gettext("Link revoked."));
        } catch (e) { say(e.message, true); }
      }));
      list.appendChild(li);
    }
    list.hidden = !state.shares.length;
    empty.hidden = !!state.shares.length;
  };

  const copy = (url) => copyText(url).then(() => say(gettext("Link copied.")),
                                             () => say(gettext("Could not copy: select the link and copy it."), true));

  if (state.may_create) {
    const fieldset = el("fieldset");
    fieldset.appendChild(el("legend", "", gettext("Who can open the link")));
    const choice = (value, label, note, disabled) => {
      const row = el("label", "share-choice");
      const input = el("input");
      input.type = "radio";
      input.name = "share-visibility";
      input.value = value;
      input.id = "share-visibility-" + value;
      input.disabled = disabled;
      const text = el("span", "", label);
      text.appendChild(el("small", "", note));
      row.append(input, text);
      fieldset.appendChild(row);
      return input;
    };
    const workspace = choice("workspace", gettext("Workspace members"),
                             gettext("Signed-in members of this chat's workspace."), false);
    const publicLink = choice("public", gettext("Anyone with the link"), state.public_links_allowed
      ? gettext("No sign-in needed; the link must expire.")
      : gettext("Turned off for this workspace: an administrator can allow public links."), !state.public_links_allowed);
    workspace.checked = true;
    if (!state.public_links_allowed && state.may_allow_public) {
      // A workspace admin may allow public links right here (PATCH /api/v1/workspaces/{id}/sharing/).
      const allow = button(gettext("Allow public links in this workspace"), "secondary share-allow", async () => {
        allow.disabled = true;
        try {
          await api("PATCH", urlFor(urls.workspaceSharing, state.workspace_id), {public_links: true});
          state.public_links_allowed = true;
          publicLink.disabled = false;
          publicLink.parentElement.querySelector("small").textContent = gettext("No sign-in needed; the link must expire.");
          allow.remove();
          say(gettext("Public links are now allowed in this workspace."));
        } catch (e) {
          allow.disabled = false;
          say(e.message, true);
        }
      });
      allow.id = "share-allow-public";
      publicLink.parentElement.querySelector("span").appendChild(allow);
    }
    const expiryRow = el("label", "share-expiry", gettext("Expires"));
    const expiry = el("select");
    expiry.id = "share-expiry";
    expiryRow.appendChild(expiry);
    fieldset.appendChild(expiryRow);
    expiryChoices(expiry, false, state.public_max_days);
    for (const input of [workspace, publicLink]) {
      input.addEventListener("change", () => expiryChoices(expiry, publicLink.checked, state.public_max_days));
    }
    const create = button(gettext("Create link"), "", null);
    create.id = "share-create";
    const made = el("div", "share-new");
    made.hidden = true;
    const linkBox = el("input");
    linkBox.id = "share-link";
    linkBox.readOnly = true;
    linkBox.setAttribute("aria-label", gettext("Share link"));
    const copyNew = button(gettext("Copy"), "", () => copy(linkBox.value));
    copyNew.id = "share-copy";
    made.append(linkBox, copyNew);
    create.addEventListener("click", async () => {
      create.disabled = true;
      say("");
      const days = expiry.value ? Number(expiry.value) : null;
      const body = {visibility: publicLink.checked ? "public" : "workspace",
                    expires_at: days ? new Date(Date.now() + days * DAY_MS).toISOString() : null};
      try {
        const share = await api("POST", urls.shares, body);
        state.shares.unshift(share);
        renderList();
        linkBox.value = share.url;
        made.hidden = false;
        linkBox.focus();
        linkBox.select();
        say(gettext("Link created: copy it and send it."));
      } catch (e) {
        say(e.message, true);
      } finally {
        create.disabled = false;
      }
    });
    body.append(fieldset, create, made);
  } else {
    body.appendChild(el("p", "muted", gettext("Only the chat's owner can make links; you can revoke them.")));
  }
  renderList();
}

if (opener) opener.addEventListener("click", openDialog);
