// The schedules page (templates/schedules/schedules.html) works without this script; with it,
// deleting asks first in the site's own dialog, and each time shows the reader's local time
// on hover (the page prints UTC, the zone cron expressions are read in).
import { confirmDialog } from "../chat/app/dialogs.js";
import { gettext, interpolate } from "../chat/app/i18n.js";

for (const form of document.querySelectorAll("form.schedule-actions")) {
  form.addEventListener("submit", async (event) => {
    if (event.submitter?.value !== "delete") return;
    event.preventDefault();
    const name = form.closest(".schedule-card")?.querySelector(".schedule-name")?.textContent ?? "";
    const ok = await confirmDialog({
      title: gettext("Delete this schedule?"),
      message: interpolate(gettext("“%(name)s” stops firing and its history is deleted. The runs it started stay in the chat."),
                           {name}, true),
      confirmLabel: gettext("Delete"),
      danger: true,
    });
    if (!ok) return;
    const action = document.createElement("input");
    action.type = "hidden";
    action.name = "action";
    action.value = "delete";
    form.appendChild(action);
    form.submit();
  });
}

for (const time of document.querySelectorAll(".schedules-page time[datetime]")) {
  const when = new Date(time.getAttribute("datetime"));
  if (!Number.isNaN(when.getTime())) {
    time.title = interpolate(gettext("Your time: %(when)s"), {when: when.toLocaleString()}, true);
  }
}
