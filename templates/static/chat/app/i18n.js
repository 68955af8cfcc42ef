// Translations for the page's scripts. Django's JavaScript catalogue
// (django.views.i18n.JavaScriptCatalog, loaded by base.html as a classic script before the
// modules) defines globalThis.django; on a page without it every string stays as written.
// Usage: gettext("Send"), ngettext("%(n)s file", "%(n)s files", n) with interpolate(…, {n}, true).
const catalogue = () => globalThis.django;

export function gettext(msgid) {
  const c = catalogue();
  return c ? c.gettext(msgid) : msgid;
}

export function ngettext(singular, plural, count) {
  const c = catalogue();
  if (c) return c.ngettext(singular, plural, count);
  return count === 1 ? singular : plural;
}

export function pgettext(context, msgid) {
  const c = catalogue();
  return c ? c.pgettext(context, msgid) : msgid;
}

// interpolate("%(name)s left", {name}, true) or interpolate("%s of %s", [a, b]): Django's own
// when the catalogue is loaded, the same substitution otherwise.
export function interpolate(fmt, values, named = false) {
  const c = catalogue();
  if (c) return c.interpolate(fmt, values, named);
  if (named) return fmt.replace(/%\(\w+\)s/g, (m) => String(values[m.slice(2, -2)]));
  let i = 0;
  return fmt.replace(/%s/g, () => String(values[i++]));
}

// The page's language for Intl (dates, times, numbers, lists): base.html's <html lang>, which
// Django's active language sets ("de", "zh-hans"); undefined (the browser's own) without a
// document or with a tag Intl refuses.
export function pageLanguage() {
  const lang = globalThis.document && globalThis.document.documentElement
    ? globalThis.document.documentElement.lang : "";
  if (!lang) return undefined;
  try { return Intl.getCanonicalLocales(lang)[0]; } catch (e) { return undefined; }
}

// 12345 → "12,345" / "12.345"; ``options`` as Intl.NumberFormat's (e.g. {style: "percent"}).
export function formatNumber(value, options = {}) {
  return new Intl.NumberFormat(pageLanguage(), options).format(value);
}

// A quantity with its unit, short: formatUnit(90, "second") → "90 sec" / "90 Sek." / "90秒";
// units are Intl's (second, minute, hour, kilobyte, megabyte, …).
export function formatUnit(value, unit, options = {}) {
  return formatNumber(value, {style: "unit", unit, unitDisplay: "short", ...options});
}

// ["alice", "bob"] → "alice and bob" / "alice und bob" / "alice和bob"; type "disjunction": "or".
export function formatList(items, type = "conjunction") {
  return new Intl.ListFormat(pageLanguage(), {type, style: "long"}).format(items.map(String));
}
