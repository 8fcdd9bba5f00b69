// Memory chapter: JavaScript twins of minipar.cost.model.param_count, minipar.cost.chapters.memory_time
// (model_state_bytes, activation_bytes_per_layer, pipeline_first_stage_activation_bytes) and
// minipar.cost.planner.breakdown (check_layout, per_gpu_memory), and the memory calculator explorer.
// Sources: Narayanan et al. 2021 Eq. 2; Rajbhandari et al. 2020 (ZeRO) §5; Korthikanti et al.
// 2022 Table 2 and §4.2.3. Parity with Python: tests/test_explorer_parity.py.

export const RECOMPUTE = ["none", "selective", "full"];

// Python: param_count(L, h, V, s)
export function paramCount(L, h, V, s) {
  for (const [k, v] of [["L", L], ["h", h], ["V", V], ["s", s]]) if (v <= 0) throw new Error(`${k} (${v}) must be > 0`);
  return 12 * L * h ** 2 + 13 * L * h + (V + s) * h;
}

// Python: model_state_bytes(psi, d, t, p, zero, weight_bytes, grad_bytes, optimizer_bytes)
export function modelStateBytes(psi, d = 1, t = 1, p = 1, zero = 0, weightBytes = 2, gradBytes = 2, optimizerBytes = 12) {
  if (![0, 1, 2, 3].includes(zero)) throw new Error(`ZeRO stage (${zero}) must be 0, 1, 2 or 3`);
  for (const [k, v] of [["psi", psi], ["d", d], ["t", t], ["p", p]]) if (v <= 0) throw new Error(`${k} (${v}) must be > 0`);
  for (const [k, v] of [["weight_bytes", weightBytes], ["grad_bytes", gradBytes], ["optimizer_bytes", optimizerBytes]]) {
    if (v < 0) throw new Error(`${k} (${v}) must be >= 0`);
  }
  const local = psi / (t * p);
  const w = (weightBytes * local) / (zero >= 3 ? d : 1);
  const g = (gradBytes * local) / (zero >= 2 ? d : 1);
  const o = (optimizerBytes * local) / (zero >= 1 ? d : 1);
  return {weights: w, gradients: g, optimizer: o, total: w + g + o};
}

// Python: activation_bytes_per_layer(s, b, h, a, t, sp, recompute)
export function activationBytesPerLayer(s, b, h, a, t = 1, sp = false, recompute = "none") {
  for (const [k, v] of [["s", s], ["b", b], ["h", h], ["a", a], ["t", t]]) if (v <= 0) throw new Error(`${k} (${v}) must be > 0`);
  if (a % t) throw new Error(`heads (${a}) must be divisible by t (${t})`);
  if (!RECOMPUTE.includes(recompute)) throw new Error(`recompute ('${recompute}') must be one of ${RECOMPUTE.join(", ")}`);
  const sbh = s * b * h;
  if (recompute === "full") return (2 * sbh) / (sp ? t : 1);
  const scores = recompute === "selective" ? 0.0 : (5 * a * s) / (h * t);
  if (sp) return sbh * (34 / t + scores);
  return sbh * (10 + 24 / t + scores);
}

// Python: pipeline_first_stage_activation_bytes(s, b, h, a, L, p, m, t, sp, recompute, schedule, v)
export function pipelineFirstStageActivationBytes(s, b, h, a, L, p, m = null, t = 1, sp = false, recompute = "none", schedule = "1f1b", v = 1) {
  if (L <= 0 || p <= 0 || L % p) throw new Error(`layers (${L}) must be divisible by p (${p})`);
  const perLayer = activationBytesPerLayer(s, b, h, a, t, sp, recompute);
  const inFlight = m === null || m === undefined ? p : m;
  if (inFlight <= 0) throw new Error(`microbatches m (${m === null || m === undefined ? "None" : m}) must be >= 1`);
  const layers = Math.floor(L / p);
  if (schedule === "gpipe") return perLayer * layers * inFlight;
  if (schedule === "1f1b") return perLayer * layers * Math.min(p, inFlight);
  if (schedule === "interleaved") {
    if (v < 1 || L % (p * v)) throw new Error(`layers (${L}) must be divisible by p·v (${p}·${v})`);
    return perLayer * L * (1 + (p - 1) / (p * v));
  }
  throw new Error(`schedule ('${schedule}') must be one of gpipe, 1f1b, interleaved`);
}

// Python: minipar.widgets.memory_time.check_inputs(s, b, V)
export function checkInputs(s, b, V) {
  for (const [k, v] of [["s", s], ["b", b], ["V", V]]) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${k} (${v}) must be a positive integer`);
  }
  return null;
}

// Python: check_layout(L, h, a, d, t, p, zero)
export function checkLayout(L, h, a, d = 1, t = 1, p = 1, zero = 0) {
  for (const [k, v] of [["L", L], ["h", h], ["a", a], ["d", d], ["t", t], ["p", p]]) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${k} (${v}) must be a positive integer`);
  }
  if (h % a) throw new Error(`hidden size (${h}) must be divisible by heads (${a})`);
  if (a % t) throw new Error(`heads (${a}) must be divisible by t (${t})`);
  if (L % p) throw new Error(`layers (${L}) must be divisible by p (${p})`);
  if (![0, 1, 2, 3].includes(zero)) throw new Error(`ZeRO stage (${zero}) must be 0, 1, 2 or 3`);
  return null;
}

// Python: per_gpu_memory(L, h, a, s, V, b, d, t, p, zero, sp, recompute, m)
export function perGpuMemory(L, h, a, s, V, b = 1, d = 1, t = 1, p = 1, zero = 0, sp = false, recompute = "none", m = null) {
  checkLayout(L, h, a, d, t, p, zero);
  const psi = paramCount(L, h, V, s);
  const st = modelStateBytes(psi, d, t, p, zero);
  const act = pipelineFirstStageActivationBytes(s, b, h, a, L, p, m, t, sp, recompute, "1f1b");
  return {weights: st.weights, gradients: st.gradients, optimizer: st.optimizer, activations: act,
          total: st.weights + st.gradients + st.optimizer + act, psi};
}

// The model menu and the L, h, a, V boxes (UI only, no Python twin): a named model fills the
// four boxes with its shape, so they show what is modelled, and greys them out; "custom" frees
// them, starting from the shape last shown. Sequence parallelism does nothing at t = 1.
export function memoryLink(values, changed, config) {
  if (changed !== "preset" && changed !== undefined) return {};
  const shape = ((config || {}).presets || {})[values.preset];
  return shape ? {L: shape[0], h: shape[1], a: shape[2], V: shape[3]} : {};
}

export function memoryDisabled(values) {
  const off = values.preset === "custom" ? [] : ["L", "h", "a", "V"];
  return values.t === 1 ? [...off, "sp"] : off;
}

const GIB = 2 ** 30;
const PARTS = [["weights", "#4c72b0"], ["gradients", "#dd8452"], ["optimizer", "#55a868"], ["activations", "#c44e52"]];

// config (Python: minipar.widgets.memory_time.memory_config):
//   {presets: {name: [L, h, a, V] | null}, gpus: {name: memory_bytes}}
registerExplorer("memory", {
  title: "Per-GPU training memory (mixed-precision Adam, 1F1B, first pipeline stage)",
  controls: [
    {name: "preset", label: "model", type: "select", options: ["GPT-3 175B"], value: "GPT-3 175B", configOptions: "presets"},
    {name: "L", label: "L", type: "number", min: 1, max: 1024, step: 1, value: 96},
    {name: "h", label: "h", type: "number", min: 1, max: 131072, step: 1, value: 12288},
    {name: "a", label: "a", type: "number", min: 1, max: 1024, step: 1, value: 96},
    {name: "V", label: "V", type: "number", min: 1, max: 1048576, step: 1, value: 51200},
    {name: "s", label: "s", type: "number", min: 1, max: 1048576, step: 1, value: 2048},
    {name: "b", label: "b", type: "number", min: 1, max: 4096, step: 1, value: 1},
    {name: "d", label: "d", type: "number", min: 1, max: 65536, step: 1, value: 4},
    {name: "t", label: "t", type: "number", min: 1, max: 1024, step: 1, value: 8},
    {name: "p", label: "p", type: "number", min: 1, max: 1024, step: 1, value: 8},
    {name: "zero", label: "ZeRO", type: "select", options: [0, 1, 2, 3], value: 1},
    {name: "sp", label: "sequence parallel", type: "checkbox", value: true},
    {name: "recompute", label: "recompute", type: "select", options: RECOMPUTE, value: "selective"},
    {name: "gpu", label: "GPU", type: "select", options: ["A100-80GB"], value: "A100-80GB", configOptions: "gpus"},
  ],
  link: memoryLink,
  disabled: memoryDisabled,
  draw(v, config) {
    const preset = configEntry(config, "presets", v.preset);
    const gpuBytes = configEntry(config, "gpus", v.gpu);
    let {L, h, a, V} = v;
    if (preset) [L, h, a, V] = preset;
    checkInputs(v.s, v.b, V);
    const rows = [0, 1, 2, 3].map((k) => perGpuMemory(L, h, a, v.s, V, v.b, v.d, v.t, v.p, k, v.sp, v.recompute));
    const cap = gpuBytes / GIB;
    const chosen = rows[v.zero];
    const svg = stackedBars({
      title: `${v.preset}, d = ${v.d}, t = ${v.t}, p = ${v.p} (N = ${fmtNumber(v.d * v.t * v.p)})`,
      ylabel: "GiB per GPU (first pipeline stage)",
      categories: [0, 1, 2, 3].map((k) => `ZeRO-${k}${k === v.zero ? " ★" : ""}`),
      stacks: PARTS.map(([part, color]) => ({name: part, color, values: rows.map((r) => r[part] / GIB)})),
      hline: {y: cap, label: `${v.gpu}: ${cap.toFixed(0)} GiB`},
    });
    const fits = chosen.total / GIB <= cap;
    return svg + `<p>ZeRO-${v.zero}: <b>${fmtNumber(chosen.total / GIB, 1)} GiB</b> per GPU `
      + `(model states ${fmtNumber((chosen.weights + chosen.gradients + chosen.optimizer) / GIB, 1)} GiB, activations ${fmtNumber(chosen.activations / GIB, 1)} GiB): `
      + (fits ? `fits in the ${escapeHtml(v.gpu)}'s ${cap.toFixed(0)} GiB, before buffers and fragmentation.`
        : `<b>does not fit</b> in the ${escapeHtml(v.gpu)}'s ${cap.toFixed(0)} GiB.`)
      + ` Ψ = ${fmtNumber(chosen.psi / 1e9, 1)}B${llamaNote(config, v.preset)};`
      + ` L = ${fmtNumber(L)}, h = ${fmtNumber(h)}, a = ${fmtNumber(a)}, V = ${fmtNumber(V)}, s = ${fmtNumber(v.s)}, b = ${fmtNumber(v.b)}; sequence parallel ${v.sp ? "on" : "off"}, ${escapeHtml(v.recompute)} recomputation.</p>`
      + `<p class="minipar-explorer-note">L, h, a, V can be changed with the "custom" model. 1 GiB = 2³⁰ bytes.</p>`;
  },
});

// A Llama preset's published count (GQA, SwiGLU, untied embeddings; cost.model.param_count_llama)
// next to the GPT-shaped Eq. 2 count the memory bars use.
function llamaNote(config, preset) {
  const n = (config.llama_params || {})[preset];
  return n ? ` (Eq. 2; published shape ${(n / 1e9).toFixed(1)}B)` : "";
}
