// minipar-requires: collectives
// Context-parallel chapter: JavaScript twins of minipar.cost.context_parallel and of
// minipar.widgets.context_parallel.cp_layer_model; the cp-layer explorer. Sources: Liu et al.
// 2023 (ring: cp−1 K/V blocks forward, overlap when block compute ≥ transfer); Jacobs et al. 2023
// (Ulysses: 4 all-to-alls per layer each way); Korthikanti et al. 2022 Table 2 (34·sbh per layer,
// no s² term with blockwise attention). Parity with Python: tests/test_context_parallel_explorer.py.

const CP_LAYOUTS = ["contiguous", "zigzag"];

function cpCheck(pairs) {                       // Python: _check
  for (const [k, v] of pairs) if (!Number.isInteger(v) || v < 1) throw new Error(`${k} (${v}) must be an integer >= 1`);
}

function cpCheckRates(flops, bandwidth, alpha) { // Python: _check_rates
  if (flops !== null && !(flops > 0)) throw new Error(`flops (${flops}) must be > 0 FLOP/s`);
  if (bandwidth !== null && !(bandwidth > 0)) throw new Error(`bandwidth (${bandwidth}) must be > 0 bytes/s`);
  if (alpha !== null && !(alpha >= 0)) throw new Error(`alpha (${alpha}) must be >= 0 s`);
}

// Python: check_shape(s, cp, layout)
export function checkShape(s, cp, layout = "contiguous") {
  cpCheck([["s", s], ["cp", cp]]);
  if (!CP_LAYOUTS.includes(layout)) throw new Error(`layout ('${layout}') must be one of ${CP_LAYOUTS.join(", ")}`);
  const n = layout === "contiguous" ? cp : 2 * cp;
  if (s % n) throw new Error(`sequence length s (${s}) must be divisible by ${layout === "contiguous" ? "cp" : "2·cp"} (${n})`);
}

// Python: kv_block_bytes(b, s, h_kv, cp, bytes_per_elem)
export function kvBlockBytes(b, s, hKv, cp, bytesPerElem = 2) {
  cpCheck([["b", b], ["s", s], ["h_kv", hKv], ["cp", cp]]);
  return 2 * b * (s / cp) * hKv * bytesPerElem;
}

// Python: ring_sent_bytes_per_layer(b, s, h_kv, cp, bytes_per_elem)
export function ringSentBytesPerLayer(b, s, hKv, cp, bytesPerElem = 2) {
  const kv = kvBlockBytes(b, s, hKv, cp, bytesPerElem);
  if (cp === 1) return {forward: 0.0, backward: 0.0, total: 0.0};
  const fwd = (cp - 1) * kv;
  const bwd = (cp - 1) * kv + cp * kv;
  return {forward: fwd, backward: bwd, total: fwd + bwd};
}

// Python: ring_sends_per_layer(cp)
export function ringSendsPerLayer(cp) {
  cpCheck([["cp", cp]]);
  return {forward: cp - 1, backward: cp > 1 ? 2 * cp - 1 : 0};
}

// Python: ulysses_all_to_alls_per_layer(b, s, h, cp, bytes_per_elem, h_kv) -> [[tensor, S], ...]
export function ulyssesAllToAllsPerLayer(b, s, h, cp, bytesPerElem = 2, hKv = null) {
  hKv = hKv === null ? h : hKv;
  cpCheck([["b", b], ["s", s], ["h", h], ["h_kv", hKv], ["cp", cp]]);
  if (cp === 1) return [];
  const q = b * (s / cp) * h * bytesPerElem;
  const kv = b * (s / cp) * hKv * bytesPerElem;
  return [["q", q], ["k", kv], ["v", kv], ["out", q]];
}

// Python: ulysses_sent_bytes_per_layer(b, s, h, cp, bytes_per_elem, h_kv)
export function ulyssesSentBytesPerLayer(b, s, h, cp, bytesPerElem = 2, hKv = null) {
  let fwd = 0;
  for (const [, S] of ulyssesAllToAllsPerLayer(b, s, h, cp, bytesPerElem, hKv)) fwd += ((cp - 1) / cp) * S;
  return {forward: fwd, backward: fwd, total: 2 * fwd};
}

function cpChunkIds(rank, cp, layout) {
  return layout === "contiguous" ? [rank] : [rank, 2 * cp - 1 - rank];
}

// Python: pairs_per_rank(cp, layout, causal)
export function pairsPerRank(cp, layout = "contiguous", causal = true) {
  checkShape(2 * cp, cp, layout);
  const n = layout === "contiguous" ? 1 : 2;
  const out = [];
  for (let r = 0; r < cp; r++) {
    out.push(causal ? cpChunkIds(r, cp, layout).reduce((acc, qc) => acc + qc + 1, 0) : cp * n * n);
  }
  return out;
}

// Python: attention_flops_per_rank(b, s, h, cp, layout, causal)
export function attentionFlopsPerRank(b, s, h, cp, layout = "contiguous", causal = true) {
  checkShape(s, cp, layout);
  cpCheck([["b", b], ["h", h]]);
  const n = s / (layout === "contiguous" ? cp : 2 * cp);
  return pairsPerRank(cp, layout, causal).map((p) => p * 4 * b * n * n * h);
}

// Python: imbalance(cp, layout, causal)
export function imbalance(cp, layout = "contiguous", causal = true) {
  const w = pairsPerRank(cp, layout, causal);
  return Math.max(...w) / (w.reduce((a, x) => a + x, 0) / w.length);
}

// Python: min_tokens_per_rank_for_overlap(flops, bandwidth, bytes_per_elem, kv_fraction)
export function minTokensPerRankForOverlap(flops, bandwidth, bytesPerElem = 2, kvFraction = 1.0) {
  cpCheckRates(flops, bandwidth, null);
  return flops * bytesPerElem * kvFraction / (2 * bandwidth);
}

// Python: ring_attention_time(b, s, h, cp, *, flops, bandwidth, alpha, layout, causal, bytes_per_elem, h_kv)
export function ringAttentionTime(b, s, h, cp, flops, bandwidth, alpha = 0.0, layout = "contiguous",
                                  causal = true, bytesPerElem = 2, hKv = null) {
  hKv = hKv === null ? h : hKv;
  checkShape(s, cp, layout);
  cpCheckRates(flops, bandwidth, alpha);
  const perRank = attentionFlopsPerRank(b, s, h, cp, layout, causal);
  let slowest = 0;
  for (let r = 1; r < cp; r++) if (perRank[r] > perRank[slowest]) slowest = r;
  const comp = perRank[slowest] / flops;
  const stepComp = comp / cp;
  const stepComm = cp > 1 ? alpha + kvBlockBytes(b, s, hKv, cp, bytesPerElem) / bandwidth : 0.0;
  const t = (cp - 1) * Math.max(stepComp, stepComm) + stepComp;
  return {compute: comp, comm: (cp - 1) * stepComm, time: t};
}

// Python: ulysses_time(b, s, h, cp, *, alpha, bandwidth, bytes_per_elem, h_kv)
export function ulyssesTime(b, s, h, cp, alpha, bandwidth, bytesPerElem = 2, hKv = null) {
  let t = 0;
  for (const [, S] of ulyssesAllToAllsPerLayer(b, s, h, cp, bytesPerElem, hKv)) {
    t += collectiveTime("all-to-all", "pairwise-exchange", cp, S, alpha, bandwidth);
  }
  return t;
}

// Python: activation_bytes_per_rank(s, b, h, a, cp, *, blockwise)
export function activationBytesPerRank(s, b, h, a, cp = 1, blockwise = true) {
  cpCheck([["s", s], ["b", b], ["h", h], ["a", a], ["cp", cp]]);
  const total = 34 * s * b * h + (blockwise ? 0 : 5 * a * s * s * b);
  return total / cp;
}

// Python: minipar.widgets.context_parallel.cp_layer_model
export function cpLayerModel(s, cp, layout, h, a, aKv, b, flops, bandwidth, alpha) {
  checkShape(s, cp, layout);
  cpCheck([["h", h], ["a", a], ["a_kv", aKv], ["b", b]]);
  if (a % aKv) throw new Error(`heads (${a}) must be divisible by K/V heads (${aKv})`);
  const hKv = (h * aKv - ((h * aKv) % a)) / a;          // Python: h * a_kv // a
  const ring = ringAttentionTime(b, s, h, cp, flops, bandwidth, alpha, layout, true, 2, hKv);
  const ulyssesOk = aKv % cp === 0;
  return {
    tokens_per_rank: s / cp,
    activation_bytes: activationBytesPerRank(s, b, h, a, cp),
    ring_bytes: ringSentBytesPerLayer(b, s, hKv, cp).total,
    ring_compute: ring.compute, ring_comm: ring.comm, ring_time: ring.time,
    ulysses_bytes: ulyssesOk ? ulyssesSentBytesPerLayer(b, s, h, cp, 2, hKv).total : null,
    ulysses_time: ulyssesOk ? ulyssesTime(b, s, h, cp, alpha, bandwidth, 2, hKv) : null,
    imbalance: imbalance(cp, layout),
    overlap_min_tokens: minTokensPerRankForOverlap(flops, bandwidth, 2, hKv / h),
  };
}

const CP_SS = [8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576];
const CP_SS_LABELS = ["8K", "16K", "32K", "64K", "128K", "256K", "512K", "1M"];
const CP_CPS = [1, 2, 4, 8, 16, 32, 64];

// config (Python: minipar.widgets.context_parallel.cp_config): {links: {name: {alpha, bandwidth}}, gpus: {name: bf16 flops}}
registerExplorer("cp-layer", {
  title: "Context parallelism, one causal attention layer (bf16; Llama-3-405B-like widths by default)",
  controls: [
    {name: "s", label: "s (tokens)", type: "range", values: CP_SS, labels: CP_SS_LABELS, value: 131072},
    {name: "cp", label: "cp", type: "number", min: 1, step: 1, value: 16},
    {name: "layout", label: "layout", type: "select", options: ["zigzag", "contiguous"], value: "zigzag"},
    {name: "link", label: "link between the cp GPUs", type: "select", options: ["ib-ndr400", "nvlink4-h100", "pcie5-x16", "eth-100g"], value: "ib-ndr400", configOptions: "links"},
    {name: "gpu", label: "GPU", type: "select", options: ["H100-SXM"], value: "H100-SXM", configOptions: "gpus"},
    {name: "h", label: "h", type: "number", min: 1, step: 1, value: 16384},
    {name: "a", label: "a (heads)", type: "number", min: 1, step: 1, value: 128},
    {name: "a_kv", label: "K/V heads", type: "number", min: 1, step: 1, value: 8},
    {name: "b", label: "b", type: "number", min: 1, step: 1, value: 1},
  ],
  draw(v, config) {
    const links = config.links || {};
    const L = links[v.link];
    if (!L) throw new Error(`link ('${v.link}') must be one of ${Object.keys(links).join(", ")}`);
    const F = (config.gpus || {})[v.gpu];
    if (!F) throw new Error(`gpu ('${v.gpu}') must be one of ${Object.keys(config.gpus || {}).join(", ")}`);
    const r = cpLayerModel(v.s, v.cp, v.layout, v.h, v.a, v.a_kv, v.b, F, L.bandwidth, L.alpha);
    const cps = CP_CPS.filter((c) => v.s % (2 * c) === 0);
    const series = [];
    for (const [layout, color] of [["contiguous", "#3182bd"], ["zigzag", "#e6550d"]]) {
      series.push({name: `ring, ${layout}`, color,
        xs: cps, ys: cps.map((c) => 1e3 * cpLayerModel(v.s, c, layout, v.h, v.a, v.a_kv, v.b, F, L.bandwidth, L.alpha).ring_time)});
    }
    const svg = lineChart({
      title: `forward attention time per layer, slowest rank, s = ${v.s}, over ${v.link}`,
      xlabel: "cp (GPUs the sequence is split over)", ylabel: "time (ms)", xlog: true, ylog: true,
      series, points: [{x: v.cp, y: 1e3 * r.ring_time, color: "#c00", label: `cp = ${v.cp}, ${v.layout}`}],
    });
    const hidden = r.ring_comm <= r.ring_compute * (v.cp - 1) / v.cp + 1e-15;
    const uly = r.ulysses_bytes === null
      ? `Ulysses cannot use cp = ${v.cp}: it must divide the ${v.a_kv} K/V heads.`
      : `Ulysses sends ${fmtBytes(r.ulysses_bytes, false)} per GPU per layer (forward + backward), its four forward all-to-alls take ${fmtSeconds(r.ulysses_time)} (not overlapped).`;
    return svg + `<p>Per GPU: <b>${fmtBytes(r.activation_bytes, false)}</b> of activations per layer (Korthikanti's 34·sbh/cp, 16-bit, blockwise attention), `
      + `${r.tokens_per_rank.toLocaleString("en-US")} tokens. The ring sends <b>${fmtBytes(r.ring_bytes, false)}</b> per layer (forward + backward); `
      + `forward attention on the slowest GPU: compute ${fmtSeconds(r.ring_compute)}, K/V transfers ${fmtSeconds(r.ring_comm)}, `
      + `<b>${fmtSeconds(r.ring_time)}</b> with overlap (transfers ${hidden ? "hidden" : "exposed"}: hiding them needs ≥ ${Math.ceil(r.overlap_min_tokens).toLocaleString("en-US")} tokens per GPU on this link). `
      + `Causal imbalance (slowest / mean work): <b>${r.imbalance.toFixed(2)}</b> with the ${escapeHtml(v.layout)} layout.</p><p>${uly}</p>`;
  },
});
