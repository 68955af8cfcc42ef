// Small DOM helpers shared by the chat modules.
import { gettext, pageLanguage } from "./i18n.js";

export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}

export function button(label, cls, onClick, title) {
  const b = el("button", cls, label);
  b.type = "button";
  if (title) { b.title = title; b.setAttribute("aria-label", title); }
  if (onClick) b.addEventListener("click", onClick);
  return b;
}

const minute = 60 * 1000, day = 24 * 60 * minute;
// In the page's language (<html lang>), not the browser's: the words around them are.
const lang = pageLanguage();
const timeFmt = new Intl.DateTimeFormat(lang, {hour: "numeric", minute: "2-digit"});
const dayFmt = new Intl.DateTimeFormat(lang, {weekday: "short", hour: "numeric", minute: "2-digit"});
const dateFmt = new Intl.DateTimeFormat(lang, {month: "short", day: "numeric", hour: "numeric", minute: "2-digit"});
const fullFmt = new Intl.DateTimeFormat(lang, {dateStyle: "medium", timeStyle: "medium"});
const rel = new Intl.RelativeTimeFormat(lang, {numeric: "auto"});

// "just now", "5 minutes ago", "14:02", "Tue 09:15", "Mar 3, 09:15" — and the exact time on hover.
export function naturalTime(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "";
  const ago = now - t;
  if (ago < minute) return gettext("just now");
  if (ago < 60 * minute) return rel.format(-Math.round(ago / minute), "minute");
  const d = new Date(t), today = new Date(now);
  if (d.toDateString() === today.toDateString()) return timeFmt.format(d);
  if (ago < 6 * day) return dayFmt.format(d);
  return dateFmt.format(d);
}

export function timeElement(iso) {
  const t = el("time", "when", naturalTime(iso));
  t.dateTime = iso;
  const d = new Date(Date.parse(iso));
  t.title = Number.isNaN(d.getTime()) ? "" : fullFmt.format(d);
  return t;
}
