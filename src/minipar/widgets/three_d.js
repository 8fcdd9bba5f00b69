// minipar-requires: three_d_model
// Putting-them-together chapter's view: the layout explorer ("plan"), drawn from the model's
// planEvaluate and the term table's parts (TIME_GROUPS, planGroupSeconds) in three_d_model.js,
// which twins minipar.cost.planner term by term; here only controls, links and the chart.

const GIB_3D = 2 ** 30;
const COLORS_3D = ["#4c72b0", "#8172b3", "#dd8452", "#55a868", "#c44e52", "#937860", "#da8bc3", "#8c8c8c"];

// The stacked chart's stacks: one per part of the step (TIME_GROUPS, the term table's group
// column), each bar one planEvaluate result; every term is in a part, so a bar is its step.
export function planStacks(rows) {
  const parts = rows.map(planGroupSeconds);
  return TIME_GROUPS.map((name, i) => ({name, color: COLORS_3D[i % COLORS_3D.length], values: parts.map((p) => p[name])}));
}

function positiveInteger(name, x) {                    // Python: breakdown.check_layout's rule
  if (!Number.isInteger(x) || x < 1) throw new Error(`${name} (${x}) must be a positive integer`);
}

// A preset fixes the run's layout and settings: the controls show them (planLink) and are
// disabled (planDisabled), so no control is left on screen that the chart ignores.
const PRESET_FIXED = ["gpus", "batch", "t", "p"];
function presetOf(values, config) {
  const m = ((config || {}).models || {})[values.model];
  return values.layout === "preset" && m && m.layout ? m.layout : null;
}

// Python: the preset's values for every control it fixes, set when the model or the layout
// changes (and when the explorer opens).
export function planLink(values, changed, config) {
  const preset = presetOf(values, config);
  // Leaving a preset for "custom" keeps its layout, unless the model's own layer count refuses
  // its p (a preset may count the embedding as layers: bloom-176b's 12 stages over 70 layers):
  // then p becomes the divisor of the layers nearest the preset's (at the largest chunks v that
  // still divides them, interleaving needing m a multiple of p), and N follows p at the same t,
  // cp and d, so the micro-batches stay as they were; the DualPipe schedule goes off when the
  // new p cannot run it.
  const shape = ((config || {}).models || {})[values.model];
  if (changed === "layout" && values.layout === "custom" && shape) {
    const [N, t, p, cp, v] = [values.gpus, values.t, values.p, Number(values.cp ?? 1), Number(values.v ?? 1)];
    if (!Number.isInteger(p) || p < 1 || shape.layers % (p * v) === 0) return {};
    const d = N / (t * cp * p), m = values.batch / (d * values.b);   // micro-batches, kept
    const fits = (k, x) => shape.layers % (k * x) === 0 && (x === 1 || (k > 1 && m % k === 0));
    for (const vv of [4, 2, 1].filter((x) => x <= v)) {
      let q = 0;
      for (let k = 1; k * vv <= shape.layers; k += 1) if (fits(k, vv) && (!q || Math.abs(k - p) < Math.abs(q - p))) q = k;
      // DualPipe (a preset's, DeepSeek-V3's) runs only on p and m even and v = 1: off otherwise
      const dual = values.dualpipe && (q % 2 || m % 2 || vv !== 1) ? {dualpipe: false} : {};
      if (q) return {p: q, ...(vv !== v ? {v: vv} : {}), ...(Number.isInteger(d) ? {gpus: t * cp * q * d} : {}), ...dual};
    }
    return {};
  }
  if (!preset || !(changed === undefined || changed === "model" || changed === "layout")) return {};
  return {gpus: preset.gpus, batch: preset.batch, t: preset.t, p: preset.p, ...(preset.controls || {})};
}

// The controls that do not apply: those a preset fixes, ep for a dense model, the ZeRO-3
// algorithm below ZeRO-3, the CP exchange without cp.
export function planDisabled(values, config) {
  const preset = presetOf(values, config);
  const v = preset ? {...values, ...(preset.controls || {})} : values;
  const m = ((config || {}).models || {})[values.model] || {};
  const off = preset ? [...PRESET_FIXED, ...Object.keys(preset.controls || {})] : [];
  if (!(m.experts > 1)) off.push("ep");
  if (!(m.experts > 1) || !(Number(v.ep) > 1)) off.push("ep_overlap", "dualpipe");   // no all-to-all to overlap
  else if (!v.ep_overlap) off.push("dualpipe");                        // DualPipe overlaps the all-to-alls
  if (Number(v.zero) !== 3) off.push("z3");
  if (!(Number(v.cp) > 1)) off.push("cpalg");
  return [...new Set(off)];
}

// config (Python: minipar.widgets.three_d.plan_config): {models: {name: {layers, ..., layout:
//   {t, p, gpus, batch, controls}}}, gpus: {name: {memory_bytes, peak, hbm_bandwidth, sms,
//   gemm_efficiency, intra, inter}}, links: {name: {name, alpha, bandwidth}}}
registerExplorer("plan", {
  title: "One layout's step time against the pipeline depth (minipar plan's model)",
  chartFirst: true,   // about 25 controls: on a phone the chart comes before them
  link: planLink,
  disabled: planDisabled,
  // a model's preset is its run: these go back to their defaults unless the preset sets them
  presetOn: (v, config) => presetOf(v, config) !== null,   // "custom" keeps the preset's run
  presetResets: ["gpn", "intra", "inter", "cp", "ep", "b", "v", "recompute", "sp", "zero", "z3", "cpalg", "gpu", "fp8", "ep_overlap", "dualpipe", "kv", "ffn", "mlp"],
  controls: [
    {name: "model", label: "model", type: "select", options: ["gpt3-175b"], value: "gpt3-175b", configOptions: "models"},
    {name: "layout", label: "layout", type: "select", options: ["preset", "custom"], value: "preset"},
    {name: "gpus", label: "GPUs N (custom)", type: "number", min: 1, max: 1048576, why: "2^20, more than any cluster", step: 1, value: 1024},
    {name: "gpn", label: "GPUs per node", type: "number", min: 1, max: 72, why: "an NVL72 rack is one NVLink domain of 72", step: 1, value: 8},
    {name: "gpu", label: "GPU", type: "select", options: ["A100-80GB"], value: "A100-80GB", configOptions: "gpus"},
    {name: "intra", label: "in a node", type: "select", options: ["GPU's own"], value: "GPU's own", configOptions: "intra_links"},
    {name: "inter", label: "between nodes", type: "select", options: ["GPU's own"], value: "GPU's own", configOptions: "inter_links"},
    {name: "batch", label: "global batch B (custom)", type: "number", min: 1, max: 65536, why: "sequences per step; published runs use up to a few thousand", step: 1, value: 1536},
    {name: "t", label: "t (custom)", type: "number", min: 1, max: 256, why: "t divides the heads", step: 1, value: 8},
    {name: "p", label: "p (custom)", type: "number", min: 1, max: 256, why: "p divides the layers", step: 1, value: 16},
    {name: "cp", label: "context parallel cp", type: "number", min: 1, max: 1024, why: "2·cp divides the sequence (zigzag chunks)", step: 1, value: 1},
    {name: "ep", label: "expert parallel ep (MoE models)", type: "number", min: 1, max: 1024, why: "ep divides the experts", step: 1, value: 1},
    {name: "b", label: "micro-batch b", type: "number", min: 1, max: 4096, why: "b·d divides the global batch", step: 1, value: 1},
    {name: "v", label: "chunks v", type: "select", options: [1, 2, 4, 8], value: 1},
    {name: "recompute", label: "recompute", type: "select", options: RECOMPUTE, value: "selective"},
    {name: "sp", label: "sequence parallel", type: "checkbox", value: true},
    {name: "zero", label: "ZeRO", type: "select", options: [0, 1, 2, 3], value: 1},
    {name: "z3", label: "ZeRO-3 collectives across nodes", type: "select", options: ZERO3_COLLECTIVES, value: "hierarchical"},
    {name: "cpalg", label: "CP exchange", type: "select", options: CP_ALGORITHMS, value: "ring"},
    {name: "attention", label: "attention kernel", type: "select", options: ["the era's", ...ATTENTION], value: "the era's"},
    {name: "precision", label: "precision recipe", type: "select", options: ["the era's", ...Object.keys(RECIPES)], value: "the era's"},
    {name: "fp8", label: "FP8 GEMMs (scaling)", type: "select", options: ["none", ...FP8_SCALING], value: "none"},
    {name: "compiled", label: "compiled step (fused kernels)", type: "checkbox", value: false},
    {name: "tp_overlap", label: "TP overlapped with GEMMs (async TP; the era's: on from the H100)", type: "select", options: ["the era's", "on", "off"], value: "the era's"},
    {name: "ep_overlap", label: "EP all-to-alls under another micro-batch's compute", type: "checkbox", value: false},
    {name: "dualpipe", label: "DualPipe schedule (with the EP overlap; p and m even, v = 1)", type: "checkbox", value: false},
    {name: "kv", label: "KV heads (0 = the model's)", type: "number", min: 0, max: 1024, why: "KV heads divide the heads", step: 1, value: 0},
    {name: "ffn", label: "MLP width f (0 = the model's)", type: "number", min: 0, max: 1048576, why: "2^20, about 20 times the widest published MLP", step: 1, value: 0},
    {name: "mlp", label: "MLP", type: "select", options: ["the model's", "gelu", "swiglu"], value: "the model's"},
    {name: "eff", label: "GEMM efficiency η (0 = the GPU's)", type: "number", min: 0, max: 1, step: 0.01, value: 0},
    {name: "price", label: "$ per GPU-hour", type: "number", min: 0, max: 1000, step: 0.01, value: 2.0},
  ],
  draw(v, config) {
    const models = config.models || {}, gpus = config.gpus || {}, links = config.links || {};
    if (!(v.model in models)) throw new Error(`model ('${v.model}') must be one of ${Object.keys(models).join(", ")}`);
    const preset = presetOf(v, config);
    if (preset) v = {...v, ...(preset.controls || {})};  // the published run's other settings
    if (!(v.gpu in gpus)) throw new Error(`gpu ('${v.gpu}') must be one of ${Object.keys(gpus).join(", ")}`);
    let model = {...models[v.model], ...(preset && preset.layers ? {layers: preset.layers} : {})};
    const mlp = {gelu: 2, swiglu: 3}[v.mlp];           // shape fields over the preset's
    model = {...model, ...(Number(v.kv) ? {kv_heads: Number(v.kv)} : {}), ...(Number(v.ffn) ? {ffn: Number(v.ffn)} : {}), ...(mlp ? {mlp_matrices: mlp} : {})};
    const [N, B, t, p] = preset ? [preset.gpus, preset.batch, preset.t, preset.p] : [v.gpus, v.batch, v.t, v.p];
    if (!(v.price >= 0)) throw new Error(`price ($ per GPU-hour) (${v.price}) must be >= 0`);
    positiveInteger("t", t);
    positiveInteger("p", p);
    const [cp, ep] = [Number(v.cp ?? 1), Number(v.ep ?? 1)];
    positiveInteger("global batch", B);
    const own = (k) => (v[k] === "GPU's own" ? null : v[k]);
    const cluster = planCluster(N, v.gpn, gpus[v.gpu], links, own("intra"), own("inter"), v.eff === 0 ? null : v.eff);
    if (N % (t * cp * p)) {
      throw new Error(cp > 1 ? `gpus (${N}) must be divisible by t·cp·p (${t}·${cp}·${p})` : `gpus (${N}) must be divisible by t·p (${t}·${p})`);
    }
    const extra = {...(ATTENTION.includes(v.attention) ? {attention: v.attention} : {}), ...(v.precision in RECIPES ? {precision: v.precision} : {}), ...(FP8_SCALING.includes(v.fp8) ? {fp8: v.fp8} : {}), compiled: Boolean(v.compiled), tp_overlap: ({on: true, off: false, true: true, false: false})[v.tp_overlap] ?? null, ep_overlap: Boolean(v.ep_overlap), dualpipe: Boolean(v.dualpipe) && Boolean(v.ep_overlap), cp_algorithm: v.cpalg ?? "ring"};
    const opts = {zero3_collectives: v.z3, ...extra};   // the recipe's bytes and headroom; ZeRO-3's algorithm, kernel, recipe
    const split = (preset && preset.split) || "even";   // a preset may put its layers on uneven stages
    const layOf = (q, chunks, zero) => ({global_batch: B, tp: t, pp: q, dp: N / (t * cp * q), micro_batch: v.b, chunks, recompute: v.recompute, sp: v.sp, zero, cp, ep, split});
    const chosen = planEvaluate(model, cluster, layOf(p, Number(v.v), Number(v.zero)), opts);
    const rows = [];                                     // every valid p at this t, cp and ep
    for (let q = 1; q <= model.layers; q += 1) {
      if ((split === "even" && model.layers % q) || N % (t * cp * q)) continue;
      try {
        rows.push(planEvaluate(model, cluster, layOf(q, q > 1 ? Number(v.v) : 1, q > 1 && Number(v.zero) === 2 ? 1 : Number(v.zero)), opts));
      } catch (e) { /* this p breaks a rule: left out */ }
    }
    const svg = stackedBars({
      title: `${v.model}, ${N} GPUs, t = ${t}${cp > 1 ? `, cp = ${cp}` : ""}${ep > 1 ? `, ep = ${ep}` : ""}: step per p`,
      ylabel: "seconds per step",
      categories: rows.map((c) => `p=${c.pp}${c.pp === chosen.pp ? "★" : ""}${c.fits ? "" : "✗"}`),
      stacks: planStacks(rows),
      valueFormat: (x) => x.toFixed(x < 10 ? 2 : 1),
    });
    const usd = dollarsPerMillionTokens(chosen.step_seconds, N, B * model.seq, v.price);
    const att = extra.attention || attentionFor(model, cluster.gpu.name), prec = extra.precision || precisionFor(cluster.gpu.name);
    const bw = (lk) => `${escapeHtml(lk.name)} ${(lk.bandwidth / 1e9).toFixed(2)} GB/s per direction`;
    return svg + `<p>t = ${chosen.tp}, cp = ${chosen.cp}, p = ${chosen.pp}, d = ${chosen.dp}, ep = ${chosen.ep}, b = ${chosen.micro_batch}, m = ${chosen.microbatches}, B = ${B}${preset ? " (the preset's layout)" : ""}${split === "units" ? ", uneven stages (the embedding and the head each in a layer's place)" : ""}: `
      + `<b>${fmtBytes(chosen.bytes_per_gpu)}</b> per GPU (${chosen.fits ? "fits" : "<b>does not fit</b>"} in ${(chosen.memory_limit / GIB_3D).toFixed(1)} GiB, ${(cluster.gpu.memory_bytes / GIB_3D).toFixed(0)} GiB less ${(100 * (1 - chosen.memory_limit / cluster.gpu.memory_bytes)).toFixed(0)} % headroom; ${escapeHtml(att)} attention, ${escapeHtml(prec)} precision), `
      + `bubble ${(100 * chosen.bubble).toFixed(1)} % of the step, step <b>${fmtSeconds(chosen.step_seconds)}</b>, MFU <b>${(100 * chosen.mfu).toFixed(1)} %</b>, `
      + `${fmtNumber(usd, 3)} $ per million tokens at ${v.price} $/GPU-hour. Links: in a node ${bw(cluster.intra)}, between nodes ${bw(cluster.inter)} per GPU; `
      + `GEMMs at η = ${Number(cluster.gpu.gemm_efficiency.toPrecision(3))} of ${(cluster.peak / 1e12).toFixed(0)} TFLOP/s. TP on ${escapeHtml(chosen.tp_link)}, PP on ${escapeHtml(chosen.pp_link)}, DP on ${escapeHtml(chosen.dp_link)}; `
      + `ring K/V exposed ${fmtSeconds(chosen.cp_seconds)}, EP all-to-alls ${fmtSeconds(chosen.ep_seconds)} per step.</p>`
      + `<p class="minipar-explorer-note">One bar per pipeline depth p, with d = N/(t·cp·p); ★ marks the chosen p, ✗ a layout that does not fit. TP and PP sit on the critical path; DP runs after the pipeline flush (p > 1) or under the last backward (p = 1); ZeRO-2 needs p = 1, so other p are shown with ZeRO-1 then; ZeRO-3 composes with PP. cp splits each sequence (N = t·cp·p·d, weights replicated over cp); ep splits the experts over ep of the t·cp·d ranks of a stage (MoE parallel folding; MoE models only). The era's attention and precision: flash and Megatron's 18-byte recipe on H100/H200, unfused and the 2021 recipe on A100. The full search: <code>minipar plan</code>.</p>`;
  },
});
