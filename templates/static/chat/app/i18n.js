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
