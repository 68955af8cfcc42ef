// The {{variables}} of a prompt's body — the same grammar as the server's prompts/variables.py
// (the cases are tested on both sides: tests/prompts/test_variables.py, tests/js/prompt_vars.test.mjs).
// {{name}} or {{name|default}}: a name is a letter or _ then up to 39 letters, digits, spaces,
// _ or -, trimmed; a default is up to 200 characters without braces, trimmed. Anything else
// between braces ({{<script>}}, {{}}) is text. Filling is one pass: a value is never expanded.
const VARIABLE = /\{\{\s*([\p{L}_][\p{L}\p{N}_ \-]{0,39}?)\s*(?:\|([^{}]{0,200}))?\}\}/gu;

// [{name, default}] in order of first use; default null when none is given.
export function promptVariables(body) {
  const seen = new Map();
  for (const m of (body || "").matchAll(VARIABLE)) {
    const name = m[1].trim();
    const given = m[2] === undefined ? null : m[2].trim();
    if (!seen.has(name)) seen.set(name, {name, default: given});
    else if (seen.get(name).default === null && given !== null) seen.set(name, {name, default: given});
  }
  return [...seen.values()];
}

// The body with each variable replaced by values[name], else its default, else left as written.
export function promptFill(body, values) {
  const defaults = new Map(promptVariables(body).map((v) => [v.name, v.default]));
  return (body || "").replace(VARIABLE, (whole, raw) => {
    const name = raw.trim();
    if (Object.prototype.hasOwnProperty.call(values, name)) return values[name];
    const given = defaults.get(name);
    return given === null || given === undefined ? whole : given;
  });
}

// The menu's order for what was typed after "/": commands starting with it, then commands
// containing it, then titles containing it; others are left out.
export function promptMatches(prompts, typed) {
  const q = (typed || "").toLowerCase();
  const rank = (p) => {
    if (p.command.startsWith(q)) return 0;
    if (p.command.includes(q)) return 1;
    if (p.title.toLowerCase().includes(q)) return 2;
    return -1;
  };
  return prompts.map((p) => [rank(p), p]).filter(([r]) => r >= 0)
    .sort((a, b) => a[0] - b[0] || a[1].command.localeCompare(b[1].command)).map(([, p]) => p);
}
