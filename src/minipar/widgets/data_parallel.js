// minipar-requires: collectives, memory_time
// Data-parallel chapter: JavaScript twins of minipar.cost.chapters.data_parallel (bucket_sizes,
// dp_step_time, allreduce_seconds; the DDP schedule of Li et al. 2020 §3.2.3) and of the
// explorer models in minipar/widgets/data_parallel.py; the step-time and ZeRO explorers.
// Parity with Python: tests/test_explorer_parity.py.

export const MAX_BUCKETS = 20000;

// Python: bucket_sizes(total_bytes, bucket_bytes)
export function bucketSizes(totalBytes, bucketBytes) {
  if (totalBytes <= 0 || bucketBytes <= 0) throw new Error(`gradient bytes (${totalBytes}) and bucket bytes (${bucketBytes}) must be > 0`);
  const k = Math.ceil(totalBytes / bucketBytes);
  const out = new Array(k - 1).fill(bucketBytes);
  out.push(totalBytes - bucketBytes * (k - 1));
  return out;
}

// Python: dp_step_time(forward_s, backward_s, grad_bytes, bucket_bytes, allreduce_s, overlap)
// allreduceS: nbytes -> seconds. Returns {step_s, compute_s, comm_s, exposed_s, intervals}.
export function dpStepTime(forwardS, backwardS, gradBytes, bucketBytes, allreduceS, overlap = true) {
  if (forwardS < 0 || backwardS < 0) throw new Error(`forward (${forwardS}) and backward (${backwardS}) seconds must be >= 0`);
  const sizes = bucketSizes(gradBytes, bucketBytes);
  let end = 0.0;
  let done = 0.0;
  const intervals = [];
  for (const size of sizes) {
    done += size;
    const ready = forwardS + backwardS * (overlap ? done / gradBytes : 1.0);
    const start = Math.max(ready, end);
    end = start + allreduceS(size);
    intervals.push([start, end]);
  }
  const compute = forwardS + backwardS;
  const step = Math.max(compute, end);
  let comm = 0;
  for (const [s, e] of intervals) comm += e - s;
  return {step_s: step, compute_s: compute, comm_s: comm, exposed_s: step - compute, intervals};
}

// Python: allreduce_seconds(n, gpus_per_node, intra, inter), links as {alpha, bandwidth}
export function allreduceSeconds(n, gpusPerNode, intra, inter) {
  if (n <= gpusPerNode) return (s) => collectiveTime("all-reduce", "ring", n, s, intra.alpha, intra.bandwidth);
  if (n % gpusPerNode) throw new Error(`ranks n (${n}) must be a multiple of gpus_per_node (${gpusPerNode}) beyond one node`);
  return (s) => hierarchicalAllReduceTime(Math.floor(n / gpusPerNode), gpusPerNode, s, intra, inter);
}

// Python: minipar.widgets.data_parallel.dp_step_model
export function dpStepModel(paramsM, ranks, intra, inter, bucketMb, overlap, computeMs, gradBytes = 2, gpusPerNode = 8) {
  if (paramsM <= 0 || computeMs <= 0) throw new Error(`parameters (${paramsM} M) and compute (${computeMs} ms) must be > 0`);
  if (!Number.isInteger(ranks) || ranks < 1) throw new Error(`ranks (${ranks}) must be an integer >= 1`);
  const total = paramsM * 1e6 * gradBytes;
  const bucket = bucketMb * 2 ** 20;
  if (bucket > 0 && Math.ceil(total / bucket) > MAX_BUCKETS) {
    throw new Error(`buckets (${Math.ceil(total / bucket)}) must be <= ${MAX_BUCKETS}: choose a larger bucket`);
  }
  const ar = allreduceSeconds(ranks, gpusPerNode, intra, inter);
  const c = computeMs / 1e3;
  const st = dpStepTime(c / 3, (2 * c) / 3, total, bucket, ar, overlap);
  return {...st, efficiency: st.compute_s / st.step_s, buckets: st.intervals.length};
}

export const OPTIMIZERS = {"adam-mixed": [2, 2, 12], "adam-fp32": [4, 4, 8], "sgd-fp32": [4, 4, 0]};

// Python: minipar.widgets.data_parallel.zero_memory_model
export function zeroMemoryModel(paramsB, d, optimizer) {
  if (!(optimizer in OPTIMIZERS)) throw new Error(`optimizer ('${optimizer}') must be one of ${Object.keys(OPTIMIZERS).join(", ")}`);
  if (!Number.isInteger(d) || d < 1) throw new Error(`d (${d}) must be a positive integer`);
  const [w, g, k] = OPTIMIZERS[optimizer];
  return [0, 1, 2, 3].map((s) => modelStateBytes(paramsB * 1e9, d, 1, 1, s, w, g, k));
}

function logValues(lo, hi, steps) {          // 1, 2, 5 per decade
  const out = [];
  for (let e = lo; e <= hi; e += 1) for (const m of steps) out.push(+(m * 10 ** e).toPrecision(3));
  return out;
}

// The two sliders' ranges are cut so that every pair is a step the model accepts: the most
// buckets, the largest Ψ in the smallest bucket, is 2·10¹⁰ bytes / 2²⁰ = 19,074 <= MAX_BUCKETS
// (tests/test_data_parallel_explorer.py). 1 MiB is also DDP's own smallest bucket (its first).
export const PARAMS_M = logValues(0, 4, [1, 2, 5]).filter((x) => x <= 10000);
export const BUCKETS_MB = logValues(0, 4, [1, 2.5, 5]).filter((x) => x <= 10000);
// The step explorer's two slider ranges (for the test that every pair is accepted).
export function dpStepSliders() {
  return {params_m: PARAMS_M, bucket_mb: BUCKETS_MB};
}

// At most this many all-reduce boxes are drawn; beyond, neighbouring buckets share a box.
export const MAX_DRAWN = 200;

// [[start, end, first, last], ...]: the buckets' intervals merged into at most `most` boxes
export function drawnIntervals(intervals, most = MAX_DRAWN) {
  const per = Math.ceil(intervals.length / most);
  const out = [];
  for (let i = 0; i < intervals.length; i += per) {
    const j = Math.min(i + per, intervals.length) - 1;
    out.push([intervals[i][0], intervals[j][1], i + 1, j + 1]);
  }
  return out;
}
const COMPUTE_MS = logValues(0, 4, [1, 2, 5]).filter((x) => x <= 10000);

// The step explorer's controls that do not apply (greyed out): with one GPU there is nothing
// to all-reduce; up to one node (8 GPUs) nothing crosses the link between nodes.
export function dpDisabled(v) {
  if (v.ranks === 1) return ["intra", "inter", "bucket_mb", "overlap"];
  return v.ranks <= 8 ? ["inter"] : [];
}

// config (Python: minipar.widgets.data_parallel.dp_config): {links: {name: {alpha, bandwidth}}}
registerExplorer("dp-step", {
  title: "Data-parallel step: compute and bucketed all-reduce (bf16 gradients, 8 GPUs per node)",
  controls: [
    {name: "params_m", label: "Ψ (M params)", type: "range", values: PARAMS_M, value: 1000},
    {name: "ranks", label: "GPUs", type: "number", min: 1, max: 131072, step: 1, value: 64},
    {name: "intra", label: "link in a node", type: "select", options: ["nvlink4-h100", "pcie5-x16"], value: "nvlink4-h100"},
    {name: "inter", label: "link across nodes", type: "select", options: ["ib-ndr400", "eth-100g"], value: "ib-ndr400"},
    {name: "bucket_mb", label: "bucket (MiB)", type: "range", values: BUCKETS_MB, value: 25},
    {name: "overlap", label: "overlap with backward", type: "checkbox", value: true},
    {name: "compute_ms", label: "compute (ms)", type: "range", values: COMPUTE_MS, value: 200},
  ],
  disabled: dpDisabled,
  draw(v, config) {
    const r = dpStepModel(v.params_m, v.ranks, configEntry(config, "links", v.intra), configEntry(config, "links", v.inter), v.bucket_mb, v.overlap, v.compute_ms);
    const ms = (x) => x * 1e3;
    const f = ms(r.compute_s / 3);
    const segs = drawnIntervals(r.intervals).map(([s, e, a, b], i) => ({start: ms(s), end: ms(e), color: i % 2 ? "#fd8d3c" : "#e6550d",
      name: a === b ? `bucket ${a}: ${ms(e - s).toFixed(2)} ms` : `buckets ${a}–${b}: ${ms(e - s).toFixed(2)} ms`}));
    const buckets = `${r.buckets} bucket${r.buckets > 1 ? "s" : ""}`;
    const what = v.ranks > 1 ? `${buckets} on ${v.ranks} GPUs` : `1 GPU, nothing to all-reduce`;
    const svg = timeline({
      title: `${what}: step ${fmtNumber(ms(r.step_s), 1)} ms, efficiency ${(100 * r.efficiency).toFixed(1)} %`,
      xlabel: "time in the step (ms)",
      rows: [
        {label: "compute", segments: [{start: 0, end: f, color: "#9ecae1", name: "forward"}, {start: f, end: ms(r.compute_s), color: "#3182bd", name: "backward"}]},
        {label: "all-reduce", segments: segs},
      ],
      legend: [{name: "forward", color: "#9ecae1"}, {name: "backward", color: "#3182bd"}, {name: "bucket all-reduce", color: "#e6550d"}],
    });
    return svg + `<p>Communication ${fmtNumber(ms(r.comm_s), 1)} ms in total, of which <b>${fmtNumber(ms(r.exposed_s), 1)} ms exposed</b> `
      + `(not hidden behind backward); compute ${ms(r.compute_s).toFixed(0)} ms (forward 1/3, backward 2/3). `
      + `Efficiency = compute / step = ${(100 * r.efficiency).toFixed(1)} %.</p>`
      + `<p class="minipar-explorer-note">Up to 8 GPUs: ring all-reduce over ${escapeHtml(v.intra)}; beyond: reduce-scatter in each node, all-reduce across nodes over ${escapeHtml(v.inter)}, all-gather in each node. Gradient bytes 2Ψ; 1 MiB = 2²⁰ bytes.</p>`;
  },
});

registerExplorer("zero-memory", {
  title: "ZeRO: model states per GPU (Rajbhandari et al. 2020, Fig. 1)",
  controls: [
    {name: "params_b", label: "Ψ (B params)", type: "range", values: logValues(-1, 3, [1, 2, 5, 7.5]).filter((x) => x <= 1000), value: 7.5},
    {name: "d", label: "d (data-parallel GPUs)", type: "number", min: 1, max: 131072, step: 1, value: 64},
    {name: "optimizer", label: "optimizer", type: "select", options: Object.keys(OPTIMIZERS), value: "adam-mixed"},
    {name: "gpu_gib", label: "GPU memory (GiB)", type: "number", min: 1, max: 1024, step: 1, value: 80},
  ],
  draw(v) {
    if (!(v.gpu_gib > 0)) throw new Error(`GPU memory (${v.gpu_gib} GiB) must be > 0`);
    const rows = zeroMemoryModel(v.params_b, v.d, v.optimizer);
    // decimal GB, as the paper's Figure 1 and the chapter's table; the GPU's memory is sold in
    // binary units ("80 GB" = 80 GiB = 85.9 GB), converted once here
    const GB = 1e9;
    const capacity = v.gpu_gib * 2 ** 30 / GB;
    const [w, g, k] = OPTIMIZERS[v.optimizer];
    const svg = stackedBars({
      title: `Ψ = ${v.params_b}B parameters, d = ${v.d}, ${v.optimizer} (${w} + ${g} + ${k} bytes per parameter)`,
      ylabel: "GB per GPU (10⁹ bytes)",
      categories: ["ZeRO-0 (DP)", "ZeRO-1 (os)", "ZeRO-2 (os+g)", "ZeRO-3 (os+g+p)"],
      stacks: [["weights", "#3182bd"], ["gradients", "#31a354"], ["optimizer", "#e6550d"]].map(([part, color]) => ({name: part, color, values: rows.map((r) => r[part] / GB)})),
      hline: {y: capacity, label: `GPU: ${v.gpu_gib} GiB = ${fmtNumber(capacity, 1)} GB`},
    });
    const fit = rows.map((r, s) => (r.total / GB <= capacity ? `ZeRO-${s}` : null)).filter(Boolean);
    return svg + `<p>Fits in ${v.gpu_gib} GiB (${fmtNumber(capacity, 1)} GB; model states only): ${fit.length ? fit.join(", ") : "<b>none</b>"}. `
      + `ZeRO-3 holds (${w}+${g}+${k})Ψ/d = ${(rows[3].total / GB).toFixed(2)} GB. Activations, buffers and fragmentation come on top. 1 GB = 10⁹ bytes; 1 GiB = 2³⁰ bytes.</p>`;
  },
});
