// The landing page is a composer: the first send creates the chat and sends the message,
// then opens the chat, where the answer streams (main.js picks the run up). The chat starts on
// the model the header's picker shows (the user's default unless they picked another), with
// the prompt tier, environment and workspace of the ⚙ menu:
//   POST /api/v1/threads/ {workspace, provider, model, prompt_tier, grounded, include_private_in_ai, temporary}
//   PATCH /api/v1/threads/{id}/ {ui_context: {envId}}   (only when an environment is chosen)
//   POST /api/v1/threads/{id}/attachments/ (each file attached here, held until now: attachments.js)
//   POST /api/v1/threads/{id}/runs/ {content, attachments, grounded, include_private}
// A refused send (or a refused file) deletes the empty chat again and leaves the text and the
// files in the composer with the reason.
import { api, urlFor } from "./api.js";
import { Attachments } from "./attachments.js";
import { Composer } from "./composer.js";
import { gettext, interpolate } from "./i18n.js";

const landing = document.getElementById("landing");
if (landing) start(landing);

function start(landing) {
  const d = landing.dataset;
  const picker = document.getElementById("model-picker");
  const wsSel = document.getElementById("landing-workspace");
  const tierSel = document.getElementById("thread-tier");
  const envSel = document.getElementById("thread-env");
  const grounded = document.getElementById("send-grounded");
  const priv = document.getElementById("send-private");
  const temporary = document.getElementById("send-temporary");  // a temporary chat: not kept
  const temporaryNote = document.getElementById("temporary-note");
  if (temporary && temporaryNote) {
    const show = () => { temporaryNote.hidden = !temporary.checked; };
    temporary.addEventListener("change", show);
    show();  // a checked box the browser restored
  }
  let composer = null;
  const form = document.getElementById("composer");
  const attachments = document.getElementById("attach") ? new Attachments({
    form,
    chips: document.getElementById("attachment-chips"),
    picker: document.getElementById("attach-input"),
    pickButton: document.getElementById("attach"),
    input: document.getElementById("input"),
    dropTargets: [form, landing],
    say: (message) => composer && composer.say(message, "attachment"),
    onChange: () => composer && composer.update(),
  }) : null;

  async function create(text) {
    const body = {
      workspace: wsSel ? wsSel.value : d.workspace,
      prompt_tier: tierSel ? tierSel.value : "auto",
      grounded: grounded.checked, include_private_in_ai: priv.checked,
      temporary: !!(temporary && temporary.checked),
    };
    if (picker && picker.dataset.assistant) body.assistant = picker.dataset.assistant;  // its model comes with it
    else if (picker && picker.dataset.provider) { body.provider = picker.dataset.provider; body.model = picker.dataset.model; }
    let thread = null;
    try {
      thread = await api("POST", d.urlThreads, body);
      if (envSel && envSel.value) {
        await api("PATCH", urlFor(d.urlThread, thread.id), {ui_context: {envId: envSel.value}});
      }
      const files = attachments && attachments.count() ? await attachments.uploadTo(thread.id) : [];
      await api("POST", urlFor(d.urlRuns, thread.id), {content: text, attachments: files, grounded: grounded.checked,
                                                       include_private: priv.checked});
    } catch (e) {
      if (thread) await api("DELETE", urlFor(d.urlThread, thread.id)).catch(() => {});  // its uploads go with it
      if (attachments) attachments.holdAgain();
      composer.rejected(e.message, e.code || "");
      return;
    }
    composer.accepted();
    location.assign(urlFor(d.urlPage, thread.id));
  }

  composer = new Composer({
    form,
    input: document.getElementById("input"),
    sendBtn: document.getElementById("send"),
    stopBtn: document.getElementById("stop"),
    counter: document.getElementById("composer-counter"),
    limits: {maxChars: Number(d.maxChars), maxBytes: Number(d.maxFrameBytes)},
    send: (text) => { create(text); return true; },
    stop: () => {},
    attachments,
  });

  // An assistant picked: its starter prompts under the greeting; one click puts it in the composer.
  const starters = document.getElementById("starter-prompts");
  if (picker && starters) {
    picker.addEventListener("model:changed", (e) => {
      starters.textContent = "";
      const prompts = (e.detail && e.detail.starter_prompts) || [];
      starters.hidden = !prompts.length;
      for (const text of prompts) {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "starter";
        b.textContent = text;
        b.addEventListener("click", () => {
          const input = document.getElementById("input");
          input.value = text;
          input.dispatchEvent(new Event("input", {bubbles: true}));
          input.focus();
        });
        starters.appendChild(b);
      }
    });
  }

  if (wsSel && picker) {
    wsSel.addEventListener("change", async () => {
      try {
        const choices = await api("GET", d.urlModelChoices + "?workspace=" + encodeURIComponent(wsSel.value));
        document.getElementById("model-choices").textContent = JSON.stringify(choices);
        picker.dispatchEvent(new CustomEvent("model:reload", {detail: choices}));
      } catch (e) {
        composer.say(interpolate(gettext("Could not load this workspace's models: %(error)s"), {error: e.message}, true));
      }
    });
  }
}
