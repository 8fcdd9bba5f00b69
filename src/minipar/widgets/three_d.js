// minipar-requires: collectives, memory_time
// Putting-them-together chapter: JavaScript twins of minipar.cost.model.flops_per_iteration,
// minipar.cost.pipeline_parallel (both bubble conventions) and minipar.cost.three_d (check,
// dp_allreduce_seconds, evaluate), and the layout explorer. Sources: Narayanan et al. 2021
// (Eq. 2-3, §2.2, §3), Korthikanti et al. 2022 (Eq. 7-8, Table 2), Shoeybi et al. 2019 §3,
// Rajbhandari et al. 2020 §5 and §7, Thakur et al. 2005, Mikami et al. 2018.
// Parity with Python: tests/test_three_d_explorer.py.

// Python: flops_per_iteration(B, s, L, h, V, recompute)
export function flopsPerIteration(B, s, L, h, V, recompute = "none") {
  for (const [k, v] of [["B", B], ["s", s], ["L", L], ["h", h], ["V", V]]) if (v <= 0) throw new Error(`${k} (${v}) must be > 0`);
  const base = B * s * L * h ** 2;
  if (recompute === "none") return 72 * base * (1 + s / (6 * h) + V / (12 * h * L));
  if (recompute === "selective") return 72 * base * (1 + s / (3 * h) + V / (12 * h * L));
  if (recompute === "full") return 96 * base * (1 + s / (6 * h) + V / (16 * h * L));
  throw new Error(`recompute ('${recompute}') must be one of ${RECOMPUTE.join(", ")}`);
}

const SCHEDULES = ["gpipe", "1f1b", "interleaved"];

function checkSchedule(schedule, p, m, v) {           // Python: minipar.cost.pipeline_parallel._check
  if (!SCHEDULES.includes(schedule)) throw new Error(`schedule ('${schedule}') must be one of ${SCHEDULES.join(", ")}`);
  for (const [k, x] of [["p", p], ["m", m], ["v", v]]) if (!Number.isInteger(x) || x < 1) throw new Error(`${k} (${x}) must be an integer >= 1`);
  if (schedule !== "interleaved" && v !== 1) throw new Error(`chunks v (${v}) apply only to the interleaved schedule, not ${schedule}`);
  if (schedule === "interleaved" && m % p) throw new Error(`interleaved schedule needs microbatches m (${m}) to be a multiple of p (${p})`);
}

// Python: bubble_relative_to_ideal(schedule, p, m, v)
export function bubbleRelativeToIdeal(schedule, p, m, v = 1) {
  checkSchedule(schedule, p, m, v);
  return (p - 1) / (m * (schedule === "interleaved" ? v : 1));
}

// Python: bubble_fraction_of_total(schedule, p, m, v)
export function bubbleFractionOfTotal(schedule, p, m, v = 1) {
  const r = bubbleRelativeToIdeal(schedule, p, m, v);
  return r / (1 + r);
}

// model: {layers, hidden, heads, seq, vocab}; cluster: {gpus, gpus_per_node, peak, memory_bytes,
// intra: {name, alpha, bandwidth}, inter: {...}} (Python: ModelShape, Cluster)

// Python: planner.check(m_, cl, global_batch, tp, pp, dp, micro_batch, chunks, zero)
export function planCheck(model, cluster, globalBatch, tp, pp, dp, microBatch, chunks = 1, zero = 1) {
  const [t, p, d, b, v] = [tp, pp, dp, microBatch, chunks];
  checkLayout(model.layers, model.hidden, model.heads, d, t, p, zero);
  if (model.layers % (p * v)) throw new Error(`layers (${model.layers}) must be divisible by p·v (${p}·${v})`);
  if (t * p * d !== cluster.gpus) throw new Error(`gpus (${cluster.gpus}) must equal t·p·d (${t}·${p}·${d})`);
  if (globalBatch % (d * b)) throw new Error(`global batch (${globalBatch}) must be divisible by d·b (${d}·${b})`);
  const m = Math.floor(globalBatch / (d * b));
  if (v > 1 && (p === 1 || m % p)) throw new Error(`interleaving (v=${v}) needs p > 1 and microbatches m (${m}) a multiple of p (${p})`);
  if (zero >= 2 && p > 1) throw new Error(`ZeRO stage (${zero}) >= 2 needs p = 1 (gradients are accumulated over micro-batches under PP), got p (${p})`);
  return null;
}

function ring(op, n, nbytes, link) {
  return collectiveTime(op, "ring", n, nbytes, link.alpha, link.bandwidth);
}

// Python: dp_allreduce_seconds(nbytes, d, t, cl) -> (seconds, link name)
export function dpAllreduceSeconds(nbytes, d, t, cluster) {
  const g = cluster.gpus_per_node;
  if (d === 1) return [0.0, "-"];
  if (t * d <= g) return [ring("all-reduce", d, nbytes, cluster.intra), cluster.intra.name];
  const k = Math.max(1, Math.floor(g / t));
  if (k > 1 && d % k === 0) {
    return [hierarchicalAllReduceTime(Math.floor(d / k), k, nbytes, cluster.intra, cluster.inter),
      `${cluster.intra.name}+${cluster.inter.name}`];
  }
  return [ring("all-reduce", d, nbytes, cluster.inter), cluster.inter.name];
}

// Python: planner.evaluate(m_, cl, global_batch, tp, pp, dp, micro_batch, chunks, recompute, sp,
// zero, gemm_efficiency).as_dict()
export function planEvaluate(model, cluster, globalBatch, tp, pp, dp, microBatch, chunks = 1,
  recompute = "selective", sp = false, zero = 1, gemmEfficiency = 0.6) {
  const [t, p, d, b, v] = [tp, pp, dp, microBatch, chunks];
  const {layers: L, hidden: h, heads: a, seq: s, vocab: V} = model;
  planCheck(model, cluster, globalBatch, t, p, d, b, v, zero);
  const m = Math.floor(globalBatch / (d * b));
  const psi = paramCount(L, h, V, s);
  const emb = (V + s) * h;                               // whole on the first stage, split over t
  const psiFirst = (psi - emb) / p + emb;
  const states = modelStateBytes(psiFirst * p, d, t, p, zero).total;
  const schedule = v > 1 ? "interleaved" : "1f1b";
  const act = pipelineFirstStageActivationBytes(s, b, h, a, L, p, m, t, sp, recompute, schedule, v);
  const total = states + act;
  const peak = cluster.peak;
  const cMb = flopsPerIteration(b, s, L, h, V, recompute) / (t * p) / (peak * gemmEfficiency);
  const actBytes = b * s * h * 2;                        // (b, s, h) in 16-bit
  const tpLink = t <= cluster.gpus_per_node ? cluster.intra : cluster.inter;
  const nAr = recompute === "full" ? 6 : 4;
  const layersPerStage = Math.floor(L / p);
  const tpMb = layersPerStage * nAr * ring("all-reduce", t, actBytes, tpLink);
  const ppLink = t * d * p <= cluster.gpus_per_node ? cluster.intra : cluster.inter;
  const ppMb = p === 1 ? 0.0 : 2 * v * (ppLink.alpha + actBytes / t / ppLink.bandwidth);
  const slot = cMb + tpMb + ppMb;
  const r = p === 1 ? 0.0 : bubbleRelativeToIdeal(schedule, p, m, v);
  const f = p === 1 ? 0.0 : bubbleFractionOfTotal(schedule, p, m, v);
  const pipe = m * slot * (1 + r);
  const gradBytes = (2 * psi) / (t * p);
  const [ar, dpName] = dpAllreduceSeconds(gradBytes, d, t, cluster);
  let dpTotal, exposed;
  if (zero === 3) {                                      // one FSDP unit per layer
    const [arLayer] = dpAllreduceSeconds(gradBytes / layersPerStage, d, t, cluster);
    dpTotal = m * 1.5 * layersPerStage * arLayer;
    exposed = Math.max(0.0, dpTotal - m * cMb);
  } else {
    dpTotal = ar;
    const windowS = p === 1 ? (2 / 3) * cMb : 0.0;       // backward ≈ 2/3 of F+B
    exposed = Math.max(0.0, dpTotal - windowS);
  }
  const step = pipe + exposed;
  const n = t * p * d;
  const modelFlops = flopsPerIteration(globalBatch, s, L, h, V, "none");
  const hwFlops = flopsPerIteration(globalBatch, s, L, h, V, recompute);
  return {
    tp: t, pp: p, dp: d, micro_batch: b, microbatches: m, chunks: v, recompute, sp, zero,
    bytes_per_gpu: total, model_state_bytes: states, activation_bytes: act,
    fits: total <= cluster.memory_bytes, bubble: f, bubble_relative: r,
    compute_seconds: m * cMb, tp_seconds: m * (1 + r) * tpMb, pp_seconds: m * (1 + r) * ppMb,
    dp_seconds: dpTotal, dp_exposed_seconds: exposed, step_seconds: step,
    mfu: modelFlops / (step * n * peak), hfu: hwFlops / (step * n * peak),
    tp_link: t > 1 ? tpLink.name : "-", pp_link: p > 1 ? ppLink.name : "-", dp_link: dpName,
  };
}

const GIB_3D = 2 ** 30;
const PARTS_3D = [["compute", "#4c72b0"], ["bubble", "#8172b3"], ["TP", "#dd8452"], ["PP", "#55a868"], ["DP exposed", "#c44e52"]];

// config (Python: minipar.widgets.three_d.plan_config): {models: {name: {layers, ...}},
//   gpus: {name: {memory_bytes, peak}}, links: {name: {name, alpha, bandwidth}}}
registerExplorer("plan", {
  title: "One layout's step time against the pipeline depth (minipar plan's model)",
  controls: [
    {name: "model", label: "model", type: "select", options: ["gpt3-175b"], value: "gpt3-175b", configOptions: "models"},
    {name: "gpus", label: "GPUs N", type: "number", min: 1, step: 1, value: 1024},
    {name: "gpn", label: "GPUs per node", type: "number", min: 1, step: 1, value: 8},
    {name: "gpu", label: "GPU", type: "select", options: ["A100-80GB"], value: "A100-80GB", configOptions: "gpus"},
    {name: "intra", label: "in a node", type: "select", options: ["nvlink4-h100"], value: "nvlink4-h100", configOptions: "links"},
    {name: "inter", label: "between nodes", type: "select", options: ["ib-ndr400"], value: "ib-ndr400", configOptions: "links"},
    {name: "batch", label: "global batch B", type: "number", min: 1, step: 1, value: 1536},
    {name: "t", label: "t", type: "number", min: 1, step: 1, value: 8},
    {name: "p", label: "p", type: "number", min: 1, step: 1, value: 8},
    {name: "b", label: "micro-batch b", type: "number", min: 1, step: 1, value: 1},
    {name: "v", label: "chunks v", type: "select", options: [1, 2, 4], value: 1},
    {name: "recompute", label: "recompute", type: "select", options: RECOMPUTE, value: "selective"},
    {name: "sp", label: "sequence parallel", type: "checkbox", value: true},
    {name: "zero", label: "ZeRO", type: "select", options: [0, 1, 2, 3], value: 1},
    {name: "eff", label: "GEMM efficiency", type: "number", min: 0.05, max: 1, step: 0.05, value: 0.6},
    {name: "price", label: "$ per GPU-hour", type: "number", min: 0, step: 0.01, value: 2.0},
  ],
  draw(v, config) {
    const models = config.models || {}, gpus = config.gpus || {}, links = config.links || {};
    if (!(v.model in models)) throw new Error(`model ('${v.model}') must be one of ${Object.keys(models).join(", ")}`);
    if (!(v.gpu in gpus)) throw new Error(`gpu ('${v.gpu}') must be one of ${Object.keys(gpus).join(", ")}`);
    for (const k of ["intra", "inter"]) if (!(v[k] in links)) throw new Error(`${k} ('${v[k]}') must be one of ${Object.keys(links).join(", ")}`);
    if (!(v.eff > 0 && v.eff <= 1)) throw new Error(`GEMM efficiency (${v.eff}) must be in (0, 1]`);
    const model = models[v.model];
    const cluster = {gpus: v.gpus, gpus_per_node: v.gpn, peak: gpus[v.gpu].peak,
      memory_bytes: gpus[v.gpu].memory_bytes, intra: links[v.intra], inter: links[v.inter]};
    if (v.gpus % (v.t * v.p)) throw new Error(`gpus (${v.gpus}) must be divisible by t·p (${v.t}·${v.p})`);
    const chosen = planEvaluate(model, cluster, v.batch, v.t, v.p, v.gpus / (v.t * v.p), v.b, Number(v.v), v.recompute, v.sp, Number(v.zero), v.eff);
    const rows = [];                                     // every valid p at this t
    for (let p = 1; p <= model.layers; p += 1) {
      if (model.layers % p || v.gpus % (v.t * p)) continue;
      try {
        rows.push(planEvaluate(model, cluster, v.batch, v.t, p, v.gpus / (v.t * p), v.b, p > 1 ? Number(v.v) : 1, v.recompute, v.sp, p > 1 ? Math.min(Number(v.zero), 1) : Number(v.zero), v.eff));
      } catch (e) { /* this p breaks a rule: left out */ }
    }
    const parts = (c) => ({compute: c.compute_seconds, bubble: c.compute_seconds * c.bubble_relative,
      TP: c.tp_seconds, PP: c.pp_seconds, "DP exposed": c.dp_exposed_seconds});
    const svg = stackedBars({
      title: `${v.model}, N = ${v.gpus}, t = ${v.t}: step time per p (d = N/(t·p)); ★ = chosen, ✗ = does not fit`,
      ylabel: "seconds per step",
      categories: rows.map((c) => `p=${c.pp}${c.pp === chosen.pp ? "★" : ""}${c.fits ? "" : "✗"}`),
      stacks: PARTS_3D.map(([name, color]) => ({name, color, values: rows.map((c) => parts(c)[name])})),
      valueFormat: (x) => x.toFixed(x < 10 ? 2 : 1),
    });
    const tokens = v.batch * model.seq;
    const usd = chosen.step_seconds * v.gpus / 3600 / tokens * v.price * 1e6;
    return svg + `<p>t = ${chosen.tp}, p = ${chosen.pp}, d = ${chosen.dp}, b = ${chosen.micro_batch}, m = ${chosen.microbatches}: `
      + `<b>${fmtBytes(chosen.bytes_per_gpu)}</b> per GPU (${chosen.fits ? "fits" : "<b>does not fit</b>"} in ${(cluster.memory_bytes / GIB_3D).toFixed(0)} GiB, no headroom kept), `
      + `bubble ${(100 * chosen.bubble).toFixed(1)} % of the step, step <b>${fmtSeconds(chosen.step_seconds)}</b>, MFU <b>${(100 * chosen.mfu).toFixed(1)} %</b>, `
      + `${usd.toFixed(3)} $ per million tokens at ${v.price} $/GPU-hour. TP on ${escapeHtml(chosen.tp_link)}, PP on ${escapeHtml(chosen.pp_link)}, DP on ${escapeHtml(chosen.dp_link)}.</p>`
      + `<p class="minipar-explorer-note">TP and PP sit on the critical path; DP runs after the pipeline flush (p > 1) or under the last backward (p = 1); ZeRO-2/3 only with p = 1, so other p are shown with ZeRO ≤ 1. The GEMM efficiency is an assumption. The full search: <code>minipar plan</code>.</p>`;
  },
});
