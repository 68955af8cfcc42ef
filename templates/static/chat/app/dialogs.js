// The site's own dialogs instead of the browser's prompt/confirm/alert: native <dialog>
// elements opened with showModal(), so the browser traps focus inside, Escape cancels and the
// page behind is inert; each is labelled (aria-labelledby) and described (aria-describedby) for
// screen readers, and focus goes back to what had it. Each returns a Promise:
//   askText({title, label, value, confirmLabel})  → the text, or null when cancelled
//   askChoice({title, label, options: [{value, label}], value, confirmLabel}) → the chosen value, or null
//   confirmDialog({title, message, confirmLabel, danger}) → true / false
//   showError({title, message})                   → undefined once closed
import { el } from "./dom.js";
import { gettext } from "./i18n.js";

let counter = 0;

function open({title, body, actions, initial}) {
  const opener = document.activeElement;
  const id = "dialog-" + (++counter);
  const dialog = el("dialog", "app-dialog");
  dialog.setAttribute("aria-labelledby", id + "-title");
  const form = el("form");
  form.method = "dialog";
  const h = el("h2", "dialog-title", title);
  h.id = id + "-title";
  form.appendChild(h);
  for (const node of body(id)) form.appendChild(node);
  const row = el("div", "dialog-actions");
  for (const a of actions) {
    const b = el("button", a.cls || "", a.label);
    b.value = a.value;
    // Cancel is a plain button: Enter in a text field submits with the form's only submit
    // button (the confirming one), never with Cancel.
    if (a.value === "cancel") { b.type = "button"; b.addEventListener("click", () => dialog.close("cancel")); }
    else b.type = "submit";
    row.appendChild(b);
  }
  form.appendChild(row);
  dialog.appendChild(form);
  const desc = form.querySelector(".dialog-message");
  if (desc) dialog.setAttribute("aria-describedby", desc.id);
  document.body.appendChild(dialog);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const value = dialog.returnValue;
      dialog.remove();
      if (opener && opener.isConnected && typeof opener.focus === "function") opener.focus();
      resolve({value, form});
    }, {once: true});
    dialog.showModal();
    const first = initial && form.querySelector(initial);
    if (first) { first.focus(); if (first.select) first.select(); }
  });
}

export async function askText({title, label, value = "", confirmLabel = gettext("Save"), maxLength = 200}) {
  let input = null;
  const {value: choice} = await open({
    title,
    body: (id) => {
      const lab = el("label", "dialog-field", label);
      input = el("input");
      input.type = "text";
      input.value = value;
      input.maxLength = maxLength;
      input.name = "text";
      input.id = id + "-input";
      input.dir = "auto";
      lab.htmlFor = input.id;
      lab.textContent = label;
      return [lab, input];
    },
    actions: [{label: gettext("Cancel"), value: "cancel", cls: "secondary"}, {label: confirmLabel, value: "ok"}],
    initial: "input",
  });
  return choice === "ok" ? input.value : null;
}

export async function askChoice({title, label, options, value = "", confirmLabel = gettext("OK")}) {
  let select = null;
  const {value: choice} = await open({
    title,
    body: (id) => {
      const lab = el("label", "dialog-field", label);
      select = el("select");
      select.name = "choice";
      select.id = id + "-choice";
      for (const o of options) {
        const option = el("option", "", o.label);
        option.value = o.value;
        select.appendChild(option);
      }
      select.value = value;
      lab.htmlFor = select.id;
      return [lab, select];
    },
    actions: [{label: gettext("Cancel"), value: "cancel", cls: "secondary"}, {label: confirmLabel, value: "ok"}],
    initial: "select",
  });
  return choice === "ok" ? select.value : null;
}

export async function confirmDialog({title, message, confirmLabel = gettext("OK"), danger = false}) {
  const {value} = await open({
    title,
    body: (id) => { const p = el("p", "dialog-message", message); p.id = id + "-desc"; return [p]; },
    actions: [{label: gettext("Cancel"), value: "cancel", cls: "secondary"},
              {label: confirmLabel, value: "ok", cls: danger ? "danger" : ""}],
    initial: "button[value=cancel]",  // the safe choice has focus: Enter does not delete
  });
  return value === "ok";
}

export async function showError({title = gettext("Something went wrong"), message}) {
  await open({
    title,
    body: (id) => { const p = el("p", "dialog-message error", message); p.id = id + "-desc"; p.setAttribute("role", "alert"); return [p]; },
    actions: [{label: gettext("Close"), value: "close"}],
    initial: "button[value=close]",
  });
}
