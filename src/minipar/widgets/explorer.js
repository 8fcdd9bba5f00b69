// minipar explorer framework: controls, redraw, error messages and small SVG charts.
//
// No imports, no dependencies, no network. Python (minipar/widgets/__init__.py) concatenates this
// file, the chapter files a chapter needs, and the chapter's own <slug>.js into ONE module:
//   * an ES module for anywidget (JupyterLab / Notebook with a kernel), whose default export is
//     {render}, and for Node.js (the parity tests);
//   * a classic <script> for the static site (the `export` keywords are stripped), inlined next
//     to the explorer's <div>, so a page opened from disk or with no network still works.
// A chapter registers each explorer with registerExplorer(name, spec), spec = {title, controls,
// draw(values, config) -> HTML/SVG string}. draw throws Error(message) for an impossible
// setting; the message is shown in the output instead of a figure.
//
// Input contract (one for every explorer, twinned in minipar/widgets/inputs.py with the same
// messages): a number box is not empty, finite, a whole number when its step is whole, at least
// its min, at most its max or MAX_INPUT; spec.divisible = [[field, by], ...] adds "field must be
// divisible by by". The field the reader changed is checked first, so the message names it; the
// chapter's draw() only ever sees values that passed, and an output with NaN or Infinity in it
// is refused instead of drawn.
//
// DOM contract (the browser test relies on it): root element class "minipar-explorer"
// (data-explorer = name), figure in class "minipar-explorer-output", a message in class
// "minipar-explorer-message"; every control change redraws and bumps root.dataset.redraws.

const REGISTRY = {};

// Every number box declares its largest accepted value (`max`, a physical bound: GPUs, tokens,
// micro-batches a real run could have) so no value the box accepts can freeze the page; an
// optional `why` says where the bound comes from (shown in the control's tooltip).
export function registerExplorer(name, spec) {
  for (const c of spec.controls || []) {
    if (c.type === "number" && !(typeof c.max === "number" && Number.isFinite(c.max))) {
      throw new Error(`explorer ${name}: number control ${c.name} needs a finite max (the largest value it accepts)`);
    }
  }
  REGISTRY[name] = spec;
}

export function explorerNames() {
  return Object.keys(REGISTRY);
}

function specFor(name) {
  const spec = REGISTRY[name];
  if (!spec) throw new Error(`explorer (${name}) is not registered; known: ${explorerNames().join(", ")}`);
  return spec;
}

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

// Default values of an explorer's controls, overridden by `values`.
export function defaultValues(name, values) {
  const out = {};
  for (const c of specFor(name).controls) out[c.name] = c.value;
  return Object.assign(out, values || {});
}

// The largest value any number box accepts unless its control sets a smaller max: more GPUs,
// tokens or hidden units than any machine has (10 million) is a typing slip, not a setting.
export const MAX_INPUT = 1e7;

// The name a message uses for a control: its label up to " (" ("a (heads)" -> "a").
export function fieldName(c) {
  return String(c.label || c.name).split(" (")[0];
}

// The rule of a number control: {integer, min, max}.
export function inputRule(c) {
  const step = c.step === undefined || c.step === "any" ? null : Number(c.step);
  return {integer: Boolean(c.integer) || (step !== null && Number.isInteger(step)),
          min: c.min === undefined ? null : c.min,
          max: c.max === undefined ? MAX_INPUT : Math.min(c.max, MAX_INPUT)};
}

// Throws Error(message) if `value` breaks the rule; the message names `field` and the value.
export function checkInput(field, value, rule) {
  if (value === "" || value === null || value === undefined) throw new Error(`${field} is empty`);
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new Error(`${field} (${value}) must be a finite number`);
  }
  if (rule.integer && !Number.isInteger(value)) throw new Error(`${field} (${value}) must be a whole number`);
  if (rule.min !== null && value < rule.min) throw new Error(`${field} (${value}) must be at least ${rule.min}`);
  if (value > rule.max) throw new Error(`${field} (${value}) must be at most ${rule.max}`);
}

// The rule of a count (t, p, m, b, heads ...) and of a time or price; checkNumbers(rule, pairs)
// checks [[field, value], ...] in order: a chapter's model function calls it first, as its Python
// twin calls minipar.widgets.inputs.check_numbers, so both refuse what the boxes refuse.
// The entry `name` of the page's config table `table` ("links", "gpus", "presets"): every
// explorer's one lookup of a link, a GPU or a preset by its control's value, or an Error that
// names the choices: "link ('x') must be one of a, b".
export function configEntry(config, table, name) {
  const entries = (config || {})[table] || {};
  if (!Object.hasOwn(entries, name)) {
    throw new Error(`${table.replace(/s$/, "")} ('${name}') must be one of ${Object.keys(entries).join(", ")}`);
  }
  return entries[name];
}

export const COUNT = {integer: true, min: 1, max: MAX_INPUT};
export const NONNEGATIVE = {integer: false, min: 0, max: MAX_INPUT};

export function checkNumbers(rule, pairs) {
  for (const [field, value] of pairs) checkInput(field, value, rule || COUNT);
}

// The whole contract for one explorer's values; `changed` (a control name) is checked first.
export function checkControls(controls, values, changed, divisible) {
  const numbers = controls.filter((c) => c.type === "number");
  const order = [...numbers.filter((c) => c.name === changed), ...numbers.filter((c) => c.name !== changed)];
  for (const c of order) checkInput(fieldName(c), values[c.name], inputRule(c));
  const byName = Object.fromEntries(controls.map((c) => [c.name, c]));
  const pairs = [...(divisible || [])].sort((x, y) => (y.includes(changed) ? 1 : 0) - (x.includes(changed) ? 1 : 0));
  for (const [field, by] of pairs) {
    if (values[field] % values[by] !== 0) {
      throw new Error(`${fieldName(byName[field])} (${values[field]}) must be divisible by ${fieldName(byName[by])} (${values[by]})`);
    }
  }
}

// The input contract of a registered explorer, for the parity test (no functions in it).
export function explorerInputs(name) {
  const spec = specFor(name);
  return {controls: spec.controls.map((c) => ({name: c.name, label: c.label || c.name, type: c.type, min: c.min, max: c.max, step: c.step, integer: c.integer})),
          divisible: spec.divisible || []};
}

// checkControls for a registered explorer: the message, or null when the values are valid.
export function inputError(name, values, changed) {
  const spec = specFor(name);
  try {
    checkControls(spec.controls, defaultValues(name, values), changed, spec.divisible);
    return null;
  } catch (e) {
    return e.message;
  }
}

const NON_FINITE = /NaN|Infinity/;

// The explorer's output for these values: {html, error}. Never throws. `changed`: the control
// the reader changed last, whose rule is checked first.
export function drawExplorer(name, values, config, changed) {
  const spec = specFor(name);
  const v = defaultValues(name, values);
  try {
    checkControls(spec.controls, v, changed, spec.divisible);
    const html = spec.draw(v, config || {});
    const bad = NON_FINITE.exec(String(html).replace(/<title>[^<]*<\/title>/g, ""));
    if (bad) throw new Error(`these values overflow the model (${bad[0]} in its output)`);
    return {html, error: null};
  } catch (e) {
    const msg = e && e.message ? e.message : String(e);
    return {html: `<p class="minipar-explorer-message"><b>Impossible setting:</b> ${escapeHtml(readerMessage(spec, msg))}</p>`, error: msg};
  }
}

// Code names the cost models' messages use (they twin Python's ValueError texts, which the
// parity tests compare), in the words the explorer's controls use. A name not listed here or
// among an explorer's controls is shown with its underscores as spaces.
export const READER_WORDS = {
  gpus_per_node: "GPUs per node", gpus: "GPUs", global_batch: "global batch", micro_batch: "micro-batch b",
  zero3_collectives: "ZeRO-3 collectives", cp_algorithm: "CP exchange", moe_imbalance: "MoE imbalance",
  grad_reduce_bytes: "gradient-reduction bytes", score_bytes: "attention-score bytes",
  gemm_efficiency: "GEMM efficiency η", kv_heads: "KV heads", mlp_matrices: "MLP matrices", top_k: "top-k",
  step_seconds: "step time", tokens_per_step: "tokens per step", bus_efficiency: "bus efficiency",
  memory_bytes: "GPU memory", peak_fp8: "FP8 peak", merge_dtype: "merge precision", accum_dtype: "accumulator precision",
};

// A number as a reader reads it: `digits` decimals with the thousands grouped ("12,345.68"),
// a whole number of a million or more grouped ("1,048,576"), any other number of a million or
// more in scientific notation ("2.3×10⁹"). Never a run of seven bare digits.
export function fmtNumber(x, digits = 0) {
  if (typeof x !== "number" || !Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  if (a < 1e6) return groupDigits(x.toFixed(digits));
  if (Number.isInteger(x) && a < 1e15) return groupDigits(String(x));
  return fmtTick(x);
}

function groupDigits(s) {
  const [whole, frac] = s.split(".");
  const g = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return frac === undefined ? g : `${g}.${frac}`;
}

// An error message in the reader's words: each control's code name that starts a "name (value)"
// becomes its label ("gpus (1024)" -> "GPUs N (1024)"), other code names their words
// (READER_WORDS), and long numbers are grouped ("1048576" -> "1,048,576").
export function readerMessage(spec, msg) {
  let out = String(msg);
  for (const c of (spec && spec.controls) || []) {
    const label = fieldName(c);
    if (label === c.name || !/^[A-Za-z_]\w*$/.test(c.name)) continue;
    const re = new RegExp(`(^|[\\s(,;:])${c.name}(?= \\()`, "g");
    out = out.replace(re, (whole, pre, at, str) => {
      const before = str.slice(0, at + pre.length);
      const lead = label.endsWith(` ${c.name}`) ? label.slice(0, -c.name.length) : null;
      return lead !== null && before.endsWith(lead) ? whole : `${pre}${label}`;
    });
  }
  out = out.replace(/\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b/g, (w) => READER_WORDS[w] || w.replace(/_/g, " "));
  out = out.replace(/\bgpus\b(?= \()/g, READER_WORDS.gpus);
  return out.replace(/(?<![\w.,\-])\d{5,}(?:\.\d+)?(?![\w.])/g, (n) => fmtNumber(Number(n), n.includes(".") ? 2 : 0));
}

// `.row` is also Bootstrap's grid row on the book's theme (negative side margins, padded
// children, which put a chart's left edge out of reach): its margins and padding are reset here.
const CSS = `
.minipar-explorer{border:1px solid #d0d7de;border-radius:6px;padding:.6em .8em;margin:1em 0;font-size:.9em;max-width:100%;overflow:hidden}
.minipar-explorer-title{font-weight:600;margin-bottom:.4em}
.minipar-explorer-controls{display:flex;flex-wrap:wrap;gap:.4em 1.2em;margin-bottom:.5em}
.minipar-explorer-controls label{display:flex;flex-wrap:wrap;align-items:center;gap:.2em .35em;max-width:100%;min-width:0}
.minipar-explorer-controls input[type=number]{width:7em;max-width:100%}
.minipar-explorer-controls input[type=range]{flex:1 1 8em;min-width:6em;max-width:100%}
.minipar-explorer-controls select{max-width:100%}
.minipar-explorer-controls output{min-width:4.5em;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
.minipar-explorer-output{overflow-x:auto}
.minipar-explorer-chart{overflow-x:auto;max-width:100%}
.minipar-explorer-output svg{width:100%;min-width:480px;height:auto;display:block}
.minipar-explorer-output .row{display:flex;flex-wrap:wrap;gap:.5em;margin:0}
.minipar-explorer-output .row>svg{flex:1 1 480px;min-width:480px;width:auto;padding:0;margin:0}
.minipar-explorer-output p{margin:.3em 0}
.minipar-explorer-message{color:#a40000}
.minipar-explorer-note{color:#555;font-size:.9em}
.minipar-explorer code{color:inherit;background:rgba(128,128,128,.15);padding:0 .2em;border-radius:3px}
.minipar-explorer a{color:#0b62a4}
.minipar-explorer svg text{fill:currentColor}
.minipar-explorer svg [stroke="#000"]{stroke:currentColor}
html[data-theme=dark] .minipar-explorer,body[data-jp-theme-light=false] .minipar-explorer{background:#1b1f24;color:#e6e6e6;border-color:#4a5058}
html[data-theme=dark] .minipar-explorer input,html[data-theme=dark] .minipar-explorer select,
body[data-jp-theme-light=false] .minipar-explorer input,body[data-jp-theme-light=false] .minipar-explorer select{background:#2a2f36;color:#e6e6e6;border:1px solid #5a6170;color-scheme:dark}
html[data-theme=dark] .minipar-explorer svg [stroke="#eee"],body[data-jp-theme-light=false] .minipar-explorer svg [stroke="#eee"]{stroke:#3a3f46}
html[data-theme=dark] .minipar-explorer svg [stroke="#888"],body[data-jp-theme-light=false] .minipar-explorer svg [stroke="#888"]{stroke:#9aa0a6}
html[data-theme=dark] .minipar-explorer svg [stroke="#555"],body[data-jp-theme-light=false] .minipar-explorer svg [stroke="#555"]{stroke:#b0b6bd}
html[data-theme=dark] .minipar-explorer svg [stroke="#fff"],body[data-jp-theme-light=false] .minipar-explorer svg [stroke="#fff"]{stroke:#1b1f24}
html[data-theme=dark] .minipar-explorer :disabled,body[data-jp-theme-light=false] .minipar-explorer :disabled{opacity:.55}
html[data-theme=dark] .minipar-explorer-message,body[data-jp-theme-light=false] .minipar-explorer-message{color:#ff8a80}
html[data-theme=dark] .minipar-explorer-note,body[data-jp-theme-light=false] .minipar-explorer-note{color:#b0b6bd}
html[data-theme=dark] .minipar-explorer a,body[data-jp-theme-light=false] .minipar-explorer a{color:#8ec5ff}
`;

function ensureStyle(doc) {
  if (doc.getElementById("minipar-explorer-style")) return;
  const s = doc.createElement("style");
  s.id = "minipar-explorer-style";
  s.textContent = CSS;
  (doc.head || doc.body).appendChild(s);
}

// A control's value as the reader sees it: a menu's option text, a slider's label.
function shownValue(c, value) {
  if (c.type === "select") {
    const opt = c.options.find((o) => (Array.isArray(o) ? o[1] : o) === value);
    return opt === undefined ? String(value) : (Array.isArray(opt) ? opt[0] : String(opt));
  }
  if (c.type === "range" && c.labels) {
    const i = c.values.indexOf(value);
    return i < 0 ? String(value) : c.labels[i];
  }
  return typeof value === "number" && Math.abs(value) >= 1e4 ? fmtNumber(value, Number.isInteger(value) ? 0 : 2) : String(value);
}

// A number box's tooltip: its accepted range, and why the bound is where it is.
export function boundText(c) {
  const rule = inputRule(c);
  const range = rule.min === null ? `at most ${rule.max}` : `from ${rule.min} to ${rule.max}`;
  return `${fieldName(c)}: ${range}${rule.integer ? ", whole" : ""}${c.why ? ` (${c.why})` : ""}`;
}

function makeControl(doc, c, value) {
  const label = doc.createElement("label");
  label.append(doc.createTextNode((c.label || c.name) + " "));
  let input;
  let read;
  if (c.type === "select") {
    input = doc.createElement("select");
    c.options.forEach((opt, i) => {
      const [text, val] = Array.isArray(opt) ? opt : [String(opt), opt];
      const o = doc.createElement("option");
      o.value = String(i);
      o.textContent = text;
      if (val === value) o.selected = true;
      input.append(o);
    });
    read = () => {
      const opt = c.options[Number(input.value)];
      return Array.isArray(opt) ? opt[1] : opt;
    };
  } else if (c.type === "range") {            // a slider over a list of values
    input = doc.createElement("input");
    input.type = "range";
    input.min = "0";
    input.max = String(c.values.length - 1);
    input.step = "1";
    const i0 = c.values.indexOf(value);
    input.value = String(i0 < 0 ? 0 : i0);
    const out = doc.createElement("output");
    const labelOf = (i) => (c.labels ? c.labels[i] : String(c.values[i]));
    out.textContent = labelOf(Number(input.value));
    input.addEventListener("input", () => { out.textContent = labelOf(Number(input.value)); });
    label.append(input, out);
    read = () => c.values[Number(input.value)];
    return {label, input, read};
  } else if (c.type === "checkbox") {
    input = doc.createElement("input");
    input.type = "checkbox";
    input.checked = Boolean(value);
    read = () => input.checked;
  } else {                                    // "number"
    input = doc.createElement("input");
    input.type = "number";
    if (c.min !== undefined) input.min = String(c.min);
    if (c.max !== undefined) input.max = String(c.max);
    input.step = c.step === undefined ? "any" : String(c.step);
    input.value = String(value);
    read = () => (input.value.trim() === "" ? "" : Number(input.value));
    label.title = boundText(c);
  }
  label.append(input);
  return {label, input, read};
}

// How long an explorer waits after a keystroke or a slider move before it redraws (ms).
export const REDRAW_DELAY_MS = 150;

// Build the explorer inside `container`; onChange(values) is called after each user change.
export function mountExplorer(container, name, values, config, onChange) {
  const doc = container.ownerDocument;
  ensureStyle(doc);
  const spec = specFor(name);
  const start = defaultValues(name, values);
  const cfg = config || {};
  // a control may take its options from the config (e.g. link presets that Python supplies)
  const resolved = spec.controls.map((c) => (c.configOptions && cfg[c.configOptions]
    ? {...c, options: Object.keys(cfg[c.configOptions])} : c));
  const root = doc.createElement("div");
  root.className = "minipar-explorer";
  root.dataset.explorer = name;
  root.dataset.redraws = "0";
  const title = doc.createElement("div");
  title.className = "minipar-explorer-title";
  title.textContent = spec.title;
  const controls = doc.createElement("div");
  controls.className = "minipar-explorer-controls";
  const output = doc.createElement("div");
  output.className = "minipar-explorer-output";
  output.setAttribute("aria-live", "polite");
  const made = resolved.map((c) => ({c, ...makeControl(doc, c, start[c.name])}));
  for (const m of made) controls.append(m.label);
  const current = () => {
    const v = {};
    for (const m of made) v[m.c.name] = m.read();
    return v;
  };
  // Linked controls: spec.link(values, changed, config) returns {control: value} to set after a
  // change (a number box takes the value, a checkbox its truth, a menu the option of that value);
  // spec.disabled(values, config) names the controls that do not apply.
  const setControl = (m, want) => {
    if (m.c.type === "number") m.input.value = String(want);
    else if (m.c.type === "checkbox") m.input.checked = Boolean(want);
    else if (m.c.type === "select") {
      const i = m.c.options.findIndex((o) => (Array.isArray(o) ? o[1] : o) === want);
      if (i >= 0) m.input.value = String(i);
    } else if (m.c.type === "range") {
      const i = m.c.values.indexOf(want);
      const out = m.label.querySelector("output");
      if (i >= 0) m.input.value = String(i);
      if (i >= 0 && out) out.textContent = m.c.labels ? m.c.labels[i] : String(want);
    }
  };
  // Returns the names of the controls the link set. A reader's switch to a preset (a change
  // after which the link sets other controls) also puts back the defaults of the controls in
  // spec.presetResets that the preset does not set: the settings a preset implies. A link that
  // leaves a preset (spec.presetOn(values, config) false after it) keeps the reader's settings.
  let linkOwn = [];                                  // the names the link itself set, last time
  const relink = (changed) => {
    let set = {};
    linkOwn = [];
    if (spec.link) {
      set = spec.link(current(), changed, cfg) || {};
      linkOwn = Object.keys(set);
      const onPreset = !spec.presetOn || spec.presetOn(current(), cfg);   // not a link leaving one
      if (changed !== undefined && Object.keys(set).length && spec.presetResets && onPreset) {
        const defaults = defaultValues(name, {});
        for (const k of spec.presetResets) if (!(k in set) && k !== changed) set[k] = defaults[k];
      }
      for (const m of made) if (m.c.name in set) setControl(m, set[m.c.name]);
    }
    if (spec.disabled) {
      const off = spec.disabled(current(), cfg) || [];
      for (const m of made) m.input.disabled = off.includes(m.c.name);
    }
    return Object.keys(set).filter((k) => made.some((m) => m.c.name === k));
  };
  // A preset switch (a change whose link set other controls, e.g. a model) never dead-ends: if
  // the reader's other settings make the preset impossible, they go back to their defaults, all
  // of them, then each reader value that still draws is put back; the note names what was reset.
  // Returns [values, result, note].
  const rescuePreset = (changed, setByLink) => {
    const defaults = defaultValues(name, {});
    const keep = new Set([changed, ...setByLink]);
    const mine = made.filter((m) => !keep.has(m.c.name) && m.read() !== defaults[m.c.name]);
    if (!mine.length) return null;
    const readerValue = new Map(mine.map((m) => [m, m.read()]));
    for (const m of mine) setControl(m, defaults[m.c.name]);
    relink(changed);
    if (drawExplorer(name, current(), config, changed).error) {   // not the reader's settings
      for (const m of mine) setControl(m, readerValue.get(m));
      relink(changed);
      return null;
    }
    const reset = [];
    for (const m of mine) {
      setControl(m, readerValue.get(m));
      relink(changed);
      if (drawExplorer(name, current(), config, changed).error) {
        setControl(m, defaults[m.c.name]);
        relink(changed);
        reset.push(`${fieldName(m.c)} = ${shownValue(m.c, defaults[m.c.name])}`);
      }
    }
    const v = current();
    const sw = made.find((m) => m.c.name === changed);
    const note = `<p class="minipar-explorer-note">${escapeHtml(sw ? shownValue(sw.c, v[changed]) : "This preset")} `
      + `does not work with your earlier ${reset.length > 1 ? "settings" : "setting"}: back to the default ${escapeHtml(reset.join(", "))}.</p>`;
    return [v, drawExplorer(name, v, config, changed), note];
  };
  // An impossible setting shows its message; the chart below it stays live, drawn with the
  // control that made the setting impossible (`culprit`) at its last value that worked, so the
  // other controls keep changing the picture until the reader fixes it.
  let lastGood = null;
  let culprit = null;
  const readerSet = new Set();                       // controls the reader set, not a link
  const redraw = (user, changed) => {
    const before = current();
    const setByLink = relink(changed);
    let v = current();
    let r = drawExplorer(name, v, config, changed);
    let note = "";
    if (r.error && user && setByLink.length) {
      const rescued = rescuePreset(changed, setByLink);
      if (rescued) [v, r, note] = rescued;
    } else if (user && setByLink.length) {
      // The link put settings back to their defaults: the reader's own (reset with a preset's
      // run) or any the link itself turned off (a layout a setting cannot run on). Those that
      // would not have drawn are named.
      const defaults = defaultValues(name, {});
      const reset = made.filter((m) => m.c.name !== changed && setByLink.includes(m.c.name)
        && (readerSet.has(m.c.name) || linkOwn.includes(m.c.name))
        && before[m.c.name] !== defaults[m.c.name] && v[m.c.name] === defaults[m.c.name]
        && drawExplorer(name, {...v, [m.c.name]: before[m.c.name]}, config, changed).error);
      if (reset.length) {
        const sw = made.find((m) => m.c.name === changed);
        note = `<p class="minipar-explorer-note">${escapeHtml(sw ? shownValue(sw.c, v[changed]) : "This preset")} `
          + `does not work with ${reset.every((m) => readerSet.has(m.c.name)) ? "your" : "the"} earlier `
          + `${reset.length > 1 ? "settings" : "setting"}: back to the default `
          + `${escapeHtml(reset.map((m) => `${fieldName(m.c)} = ${shownValue(m.c, defaults[m.c.name])}`).join(", "))}.</p>`;
      }
    }
    if (user) {
      for (const k of setByLink) readerSet.delete(k);
      if (changed !== undefined) readerSet.add(changed);
    }
    let html = note + r.html;
    if (!r.error) {
      lastGood = v;
      culprit = null;
    } else {
      if (culprit === null && changed !== undefined) culprit = changed;
      const named = (n) => made.find((m) => m.c.name === n);
      const tries = [];                        // [values, note, isOwn]: the first that draws is shown
      if (lastGood && named(culprit) && lastGood[culprit] !== v[culprit]) {
        const c = named(culprit).c;
        tries.push([{...v, [culprit]: lastGood[culprit]}, `${fieldName(c)} = ${shownValue(c, lastGood[culprit])}, its last value that worked`]);
      }
      if (lastGood && named(changed) && changed !== culprit) {
        const c = named(changed).c;
        tries.push([{...lastGood, [changed]: v[changed]}, `the last setting that worked and ${fieldName(c)} = ${shownValue(c, v[changed])}`, true]);
      }
      let drawn = false, own = null;
      for (const [values, note, isOwn] of tries) {   // isOwn: the reader's new value alone
        const fb = drawExplorer(name, values, config, changed);
        if (fb.error) {
          if (isOwn) own = fb.error;
          continue;
        }
        html += `<p class="minipar-explorer-note">Drawn with ${escapeHtml(note)}:</p>${fb.html}`;
        drawn = true;
        break;
      }
      // Nothing draws: the reader's new value breaks a rule of its own too; say which, so every
      // control still answers while an earlier setting is impossible.
      if (!drawn && own !== null && own !== r.error) {
        const c = named(changed).c;
        html += `<p class="minipar-explorer-message">With the last setting that worked, ${escapeHtml(fieldName(c))} = `
          + `${escapeHtml(shownValue(c, v[changed]))} is impossible too: ${escapeHtml(readerMessage(spec, own))}</p>`;
      }
    }
    output.innerHTML = html;
    // each chart scrolls in its own box (below 480 px), so the page's scroll cue sits right
    // under the chart, not under the text that follows it
    for (const chart of output.querySelectorAll(":scope > svg, :scope > .row")) {
      const box = doc.createElement("div");
      box.className = "minipar-explorer-chart";
      chart.replaceWith(box);
      box.append(chart);
    }
    root.dataset.error = r.error ? "1" : "0";
    root.dataset.redraws = String(Number(root.dataset.redraws) + 1);
    if (user && onChange) onChange(v);
  };
  // Typing or dragging (input events) redraws once the reader pauses for REDRAW_DELAY_MS; a
  // committed change (change event: Enter, leaving the box, releasing the slider, a menu)
  // redraws at once and cancels the pending one. So typing "65536" draws once, not five times.
  let pending = null;
  const now = (changed) => {
    if (pending !== null) clearTimeout(pending);
    pending = null;
    redraw(true, changed);
  };
  const later = (changed) => {
    if (pending !== null) clearTimeout(pending);
    pending = setTimeout(() => { pending = null; redraw(true, changed); }, REDRAW_DELAY_MS);
  };
  for (const m of made) {
    m.input.addEventListener("change", () => now(m.c.name));
    if (m.c.type === "number" || m.c.type === "range") m.input.addEventListener("input", () => later(m.c.name));
  }
  // spec.chartFirst: an explorer with many controls shows its chart above them (a phone would
  // otherwise scroll past the controls to reach it)
  root.append(title, ...(spec.chartFirst ? [output, controls] : [controls, output]));
  container.replaceChildren(root);
  redraw(false);
  return root;
}

// ---------------------------------------------------------------------------------------------
// SVG charts. Every function returns an <svg> string with a viewBox, so it scales to the page;
// below 480 px wide the output scrolls sideways instead of shrinking the text (phones).

const PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"];
export {PALETTE};

function fmtTick(v) {
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1e4 || a < 1e-3) {
    const e = Math.floor(Math.log10(a) + 1e-9);
    const m = v / 10 ** e;
    return (Math.abs(m - 1) < 1e-9 ? "" : `${+m.toFixed(1)}×`) + `10${supNum(e)}`;
  }
  return String(+v.toPrecision(3));
}

function supNum(e) {
  const sup = {"-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹"};
  return String(e).split("").map((ch) => sup[ch]).join("");
}

function linearTicks(lo, hi, count) {
  if (!(hi > lo)) hi = lo + 1;
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
  return ticks;
}

function logTicks(lo, hi) {
  const a = Math.floor(Math.log10(lo));
  const b = Math.ceil(Math.log10(hi));
  const every = Math.max(1, Math.ceil((b - a) / 7));
  const ticks = [];
  for (let e = a; e <= b; e += every) ticks.push(10 ** e);
  return ticks;
}

function scale(lo, hi, a, b, log) {
  if (log) {
    const l0 = Math.log10(lo);
    const l1 = Math.log10(hi);
    return (v) => a + ((Math.log10(v) - l0) / (l1 - l0 || 1)) * (b - a);
  }
  return (v) => a + ((v - lo) / (hi - lo || 1)) * (b - a);
}

function text(x, y, s, attrs) {
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" ${attrs || ""}>${escapeHtml(s)}</text>`;
}

// A chart's title, squeezed to the chart's width when it is longer (about 7 px a character at
// 12 px bold), so it is never cut at either end.
function chartTitle(W, title) {
  const s = String(title || "");
  const fit = s.length * 7 > W - 12 ? ` textLength="${W - 12}" lengthAdjust="spacingAndGlyphs"` : "";
  return text(W / 2, 16, s, `text-anchor="middle" font-size="12" font-weight="600"${fit}`);
}

function legend(items, x, y, maxWidth) {
  let out = "";
  let cx = x;
  let cy = y;
  for (const it of items) {
    const w = 22 + 6.2 * it.name.length;
    if (cx + w > x + maxWidth && cx > x) { cx = x; cy += 15; }
    const mark = it.kind === "line"
      ? `<line x1="${cx}" y1="${cy - 4}" x2="${cx + 14}" y2="${cy - 4}" stroke="${it.color}" stroke-width="2" ${it.dash ? 'stroke-dasharray="4 3"' : ""}/>`
      : `<rect x="${cx}" y="${cy - 9}" width="12" height="10" fill="${it.color}"/>`;
    out += mark + text(cx + 18, cy, it.name, 'font-size="11"');
    cx += w + 8;
  }
  return {svg: out, bottom: cy};
}

// Line chart. opts: {title, xlabel, ylabel, xlog, ylog, series: [{name, xs, ys, color, dash}],
// points: [{x, y, color, label}], hlines: [{y, label, color}], width, height}
export function lineChart(opts) {
  const W = opts.width || 460;
  const H = opts.height || 300;
  const m = {l: 64, r: 12, t: 26, b: 62};
  const xs = [];
  const ys = [];
  for (const s of opts.series) { xs.push(...s.xs); ys.push(...s.ys); }
  for (const p of opts.points || []) { xs.push(p.x); ys.push(p.y); }
  for (const h of opts.hlines || []) ys.push(h.y);
  const okX = xs.filter((v) => Number.isFinite(v) && (!opts.xlog || v > 0));
  const okY = ys.filter((v) => Number.isFinite(v) && (!opts.ylog || v > 0));
  let [x0, x1] = [Math.min(...okX), Math.max(...okX)];
  let [y0, y1] = [Math.min(...okY), Math.max(...okY)];
  if (!opts.ylog) { y0 = Math.min(0, y0); y1 = y1 * 1.08 || 1; }
  if (opts.ylog) { if (y1 === y0) { y0 /= 2; y1 *= 2; } y0 = 10 ** Math.floor(Math.log10(y0)); y1 = 10 ** Math.ceil(Math.log10(y1)); }
  if (opts.xlog) { x0 = 10 ** Math.floor(Math.log10(x0)); x1 = 10 ** Math.ceil(Math.log10(x1)); }
  const sx = scale(x0, x1, m.l, W - m.r, opts.xlog);
  const sy = scale(y0, y1, H - m.b, m.t, opts.ylog);
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" font-family="sans-serif" role="img">`;
  svg += chartTitle(W, opts.title);
  const xt = opts.xlog ? logTicks(x0, x1) : linearTicks(x0, x1, 6);
  const yt = opts.ylog ? logTicks(y0, y1) : linearTicks(y0, y1, 5);
  for (const t of xt) {
    if (t < x0 * (1 - 1e-9) || t > x1 * (1 + 1e-9)) continue;
    const X = sx(t);
    svg += `<line x1="${X}" x2="${X}" y1="${m.t}" y2="${H - m.b}" stroke="#eee"/>`;
    svg += text(X, H - m.b + 14, opts.xtickFormat ? opts.xtickFormat(t) : fmtTick(t), 'text-anchor="middle" font-size="10"');
  }
  for (const t of yt) {
    if (t < y0 * (1 - 1e-9) - 1e-300 || t > y1 * (1 + 1e-9)) continue;
    const Y = sy(t);
    svg += `<line x1="${m.l}" x2="${W - m.r}" y1="${Y}" y2="${Y}" stroke="#eee"/>`;
    svg += text(m.l - 4, Y + 3, fmtTick(t), 'text-anchor="end" font-size="10"');
  }
  svg += `<rect x="${m.l}" y="${m.t}" width="${W - m.l - m.r}" height="${H - m.t - m.b}" fill="none" stroke="#888"/>`;
  svg += text((m.l + W - m.r) / 2, H - m.b + 30, opts.xlabel || "", 'text-anchor="middle" font-size="11"');
  svg += `<text transform="translate(14 ${(m.t + H - m.b) / 2}) rotate(-90)" text-anchor="middle" font-size="11">${escapeHtml(opts.ylabel || "")}</text>`;
  const items = [];
  opts.series.forEach((s, i) => {
    const color = s.color || PALETTE[i % PALETTE.length];
    const pts = s.xs.map((x, k) => [x, s.ys[k]]).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y) && (!opts.xlog || x > 0) && (!opts.ylog || y > 0));
    if (pts.length) {
      svg += `<polyline fill="none" stroke="${color}" stroke-width="2" ${s.dash ? 'stroke-dasharray="5 3"' : ""} points="${pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ")}"/>`;
    }
    if (s.name) items.push({name: s.name, color, kind: "line", dash: s.dash});
  });
  for (const h of opts.hlines || []) {
    const Y = sy(h.y);
    svg += `<line x1="${m.l}" x2="${W - m.r}" y1="${Y}" y2="${Y}" stroke="${h.color || "#555"}" stroke-dasharray="5 3"/>`;
    if (h.label) items.push({name: h.label, color: h.color || "#555", kind: "line", dash: true});
  }
  for (const p of opts.points || []) {
    if (!Number.isFinite(p.y) || (opts.ylog && p.y <= 0)) continue;
    svg += `<circle cx="${sx(p.x).toFixed(1)}" cy="${sy(p.y).toFixed(1)}" r="4.5" fill="${p.color || "#c00"}"/>`;
    if (p.label) items.push({name: p.label, color: p.color || "#c00", kind: "box"});
  }
  const lg = legend(items, m.l, H - m.b + 48, W - m.l - m.r);
  svg += lg.svg;
  svg += "</svg>";
  return lg.bottom > H - 4 ? svg.replace(`viewBox="0 0 ${W} ${H}"`, `viewBox="0 0 ${W} ${lg.bottom + 6}"`) : svg;
}

// Stacked bars. opts: {title, ylabel, categories: [..], stacks: [{name, color, values}],
// hline: {y, label}, totals: true, width, height, valueFormat}
export function stackedBars(opts) {
  const W = opts.width || 520;
  const H = opts.height || 300;
  const m = {l: 64, r: 12, t: 26, b: 58};
  const n = opts.categories.length;
  const totals = opts.categories.map((_, i) => opts.stacks.reduce((a, s) => a + s.values[i], 0));
  let top = Math.max(...totals, opts.hline ? opts.hline.y : 0);
  top = top > 0 ? top * 1.15 : 1;
  const sy = scale(0, top, H - m.b, m.t, false);
  const slot = (W - m.l - m.r) / n;
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" font-family="sans-serif" role="img">`;
  svg += chartTitle(W, opts.title);
  for (const t of linearTicks(0, top, 5)) {
    if (t > top) continue;
    const Y = sy(t);
    svg += `<line x1="${m.l}" x2="${W - m.r}" y1="${Y}" y2="${Y}" stroke="#eee"/>`;
    svg += text(m.l - 4, Y + 3, fmtTick(t), 'text-anchor="end" font-size="10"');
  }
  svg += `<text transform="translate(14 ${(m.t + H - m.b) / 2}) rotate(-90)" text-anchor="middle" font-size="11">${escapeHtml(opts.ylabel || "")}</text>`;
  const fmt = opts.valueFormat || ((v) => fmtNumber(v, 1));
  opts.categories.forEach((cat, i) => {
    const x = m.l + slot * i + slot * 0.2;
    const w = slot * 0.6;
    let base = 0;
    opts.stacks.forEach((s, k) => {
      const v = s.values[i];
      if (v > 0) {
        svg += `<rect x="${x.toFixed(1)}" y="${sy(base + v).toFixed(1)}" width="${w.toFixed(1)}" height="${(sy(base) - sy(base + v)).toFixed(1)}" fill="${s.color || PALETTE[k % PALETTE.length]}"><title>${escapeHtml(`${cat}, ${s.name}: ${fmt(v)}`)}</title></rect>`;
      }
      base += v;
    });
    if (opts.totals !== false) svg += text(x + w / 2, sy(base) - 3, fmt(base), 'text-anchor="middle" font-size="10"');
    svg += text(x + w / 2, H - m.b + 14, cat, 'text-anchor="middle" font-size="11"');
  });
  svg += `<line x1="${m.l}" x2="${W - m.r}" y1="${H - m.b}" y2="${H - m.b}" stroke="#888"/>`;
  const items = opts.stacks.map((s, k) => ({name: s.name, color: s.color || PALETTE[k % PALETTE.length], kind: "box"}));
  if (opts.hline) {
    const Y = sy(opts.hline.y);
    svg += `<line x1="${m.l}" x2="${W - m.r}" y1="${Y}" y2="${Y}" stroke="#000" stroke-dasharray="5 3"/>`;
    items.push({name: opts.hline.label, color: "#000", kind: "line", dash: true});
  }
  const lg = legend(items, m.l, H - m.b + 34, W - m.l - m.r);
  svg += lg.svg + "</svg>";
  return lg.bottom > H - 4 ? svg.replace(`viewBox="0 0 ${W} ${H}"`, `viewBox="0 0 ${W} ${lg.bottom + 6}"`) : svg;
}

// The most segments a timeline draws one by one (each a <rect> with its tooltip); above it, each
// row is drawn in TIMELINE_CELLS / rows columns (at most one per pixel), each column a small
// stack of the share of its time each colour fills, so a chart costs the same at p·m = 4096 as
// at 400 and still shows the mix (1F1B's steady state: a third F, two thirds B).
export const TIMELINE_SEGMENTS = 1500;
export const TIMELINE_CELLS = 4000;

// Each row's segments binned into `cols` columns over [0, x1]: runs of columns with the same
// shares, [{start, end, shares: [[color, fraction], ...]}] (shares in order of first appearance).
function binnedRows(rows, x1, cols) {
  const w = x1 / cols;
  return rows.map((r) => {
    const cover = new Map();                     // color -> Float64Array of time per column
    for (const s of r.segments) {
      if (!(s.end > s.start)) continue;
      if (!cover.has(s.color)) cover.set(s.color, new Float64Array(cols));
      const c = cover.get(s.color);
      const a = Math.max(0, Math.floor(s.start / w)), b = Math.min(cols - 1, Math.floor(s.end / w));
      for (let k = a; k <= b; k++) c[k] += Math.max(0, Math.min(s.end, (k + 1) * w) - Math.max(s.start, k * w));
    }
    const colors = [...cover.keys()], arrays = [...cover.values()];
    const tenths = (c, k) => Math.min(10, Math.round((10 * c[k]) / w));   // shares in tenths
    const runs = [];
    let lastKey = -1;
    for (let k = 0; k < cols; k++) {
      let key = 0;
      for (const c of arrays) key = key * 11 + tenths(c, k);
      if (key === lastKey) { runs[runs.length - 1].end = (k + 1) * w; continue; }
      lastKey = key;
      if (key > 0) runs.push({start: k * w, end: (k + 1) * w, shares: colors.map((color, i) => [color, tenths(arrays[i], k) / 10])});
      else runs.push({start: k * w, end: (k + 1) * w, shares: []});
    }
    return runs.filter((u) => u.shares.some(([, f]) => f > 0));
  });
}

// Timeline (Gantt). opts: {title, xlabel, rows: [{label, segments: [{start, end, color, name}]}],
// legend: [{name, color}], width}. Above TIMELINE_SEGMENTS segments it is drawn binned (the
// x-axis label says into how many columns).
export function timeline(opts) {
  const W = opts.width || 640;
  const rowH = 26;
  const m = {l: 90, r: 14, t: 26, b: 50};
  const H = m.t + rowH * opts.rows.length + m.b;
  let x1 = 0;
  let count = 0;
  for (const r of opts.rows) for (const s of r.segments) { x1 = Math.max(x1, s.end); count += 1; }
  x1 = x1 > 0 ? x1 : 1;
  const cols = Math.max(1, Math.min(W - m.l - m.r, Math.floor(TIMELINE_CELLS / Math.max(1, opts.rows.length))));
  const binned = count > TIMELINE_SEGMENTS ? binnedRows(opts.rows, x1, cols) : null;
  const sx = scale(0, x1, m.l, W - m.r, false);
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" font-family="sans-serif" role="img">`;
  svg += chartTitle(W, opts.title);
  for (const t of linearTicks(0, x1, 6)) {
    if (t > x1 * (1 + 1e-9)) continue;
    const X = sx(t);
    svg += `<line x1="${X}" x2="${X}" y1="${m.t}" y2="${H - m.b}" stroke="#eee"/>`;
    svg += text(X, H - m.b + 14, fmtTick(t), 'text-anchor="middle" font-size="10"');
  }
  const paths = new Map();                       // binned: one <path> per colour
  opts.rows.forEach((r, i) => {
    const y = m.t + i * rowH + 3;
    svg += text(m.l - 6, y + rowH / 2 + 1, r.label, 'text-anchor="end" font-size="11"');
    if (binned) {
      for (const u of binned[i]) {
        const x = sx(u.start), w = Math.max(0.5, sx(u.end) - x);
        let top = y;
        for (const [color, f] of u.shares) {
          const h = f * (rowH - 6);
          if (h <= 0) continue;
          paths.set(color, (paths.get(color) || "") + `M${x.toFixed(1)} ${top.toFixed(1)}h${w.toFixed(1)}v${h.toFixed(1)}h${(-w).toFixed(1)}z`);
          top += h;
        }
      }
      return;
    }
    for (const s of r.segments) {
      const w = Math.max(0.5, sx(s.end) - sx(s.start));
      svg += `<rect x="${sx(s.start).toFixed(2)}" y="${y}" width="${w.toFixed(2)}" height="${rowH - 6}" fill="${s.color}" stroke="#fff" stroke-width="0.4"><title>${escapeHtml(s.name || "")}</title></rect>`;
    }
  });
  for (const [color, d] of paths) svg += `<path d="${d}" fill="${color}"/>`;
  const xlabel = (opts.xlabel || "") + (binned ? `; ${count} segments in ${cols} columns per row, by share` : "");
  svg += text((m.l + W - m.r) / 2, H - m.b + 30, xlabel, 'text-anchor="middle" font-size="11"');
  const lg = legend((opts.legend || []).map((l) => ({...l, kind: "box"})), m.l, H - m.b + 44, W - m.l - m.r);
  svg += lg.svg + "</svg>";
  return lg.bottom > H - 4 ? svg.replace(`viewBox="0 0 ${W} ${H}"`, `viewBox="0 0 ${W} ${lg.bottom + 6}"`) : svg;
}

// Readable numbers for captions.
export function fmtBytes(x, binary = true) {
  const [base, names] = binary ? [1024, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]] : [1000, ["B", "kB", "MB", "GB", "TB", "PB"]];
  let v = Math.abs(x);
  for (const name of names) {
    if (v < base || name === names[names.length - 1]) return (x < 0 ? "-" : "") + (name === "B" ? `${v.toFixed(0)} B` : `${fmtNumber(v, 2)} ${name}`);
    v /= base;
  }
  return String(x);
}

export function fmtSeconds(x) {
  const v = Math.abs(x);
  if (v === 0) return "0 s";
  for (const [s, name] of [[1, "s"], [1e-3, "ms"], [1e-6, "µs"]]) if (v >= s) return `${fmtNumber(x / s, 2)} ${name}`;
  return `${(x / 1e-9).toFixed(2)} ns`;
}

// anywidget entry point: the Python Explorer widget syncs `explorer`, `values` and `config`.
export default {
  render({model, el}) {
    const draw = () => mountExplorer(el, model.get("explorer"), model.get("values"), model.get("config"), (v) => {
      model.set("values", v);
      model.save_changes();
    });
    draw();
    model.on("change:config", draw);
  },
};
