// minipar-requires: collectives
// Expert-parallel chapter: JavaScript twins of minipar.cost.chapters.expert_parallel (capacity,
// check_shapes, even_dispatch_bytes, all_to_all_time, expert_params_per_rank, moe_params,
// skewed_loads, off_node_fraction, MoELayer, ep_layer_model); the ep-layer explorer. Sources: GShard (Lepikhin et al. 2021)
// §2.2 and §3.2, Switch (Fedus et al. 2022) §2.2, Mixtral (Jiang et al. 2024) Table 1, Thakur et
// al. 2005 (pairwise-exchange all-to-all). Parity with Python: tests/test_expert_parallel_explorer.py.

function epCheckInts(pairs) {
  for (const [k, v] of pairs) if (!Number.isInteger(v) || v < 1) throw new Error(`${k} (${v}) must be an integer >= 1`);
}

// Python: check_shapes(experts, top_k, ep)
export function epCheckShapes(experts, topK, ep) {
  epCheckInts([["experts", experts], ["top_k", topK], ["ep", ep]]);
  if (topK > experts) throw new Error(`top_k (${topK}) must be <= experts (${experts})`);
  if (experts % ep) throw new Error(`experts (${experts}) must be divisible by ep (${ep})`);
}

// Python: MoELayer(tokens, hidden, ffn, experts, top_k, ep, matrices, bytes_per_elem): one MoE layer
// as a plain object with the same field names, checked once and completed (Mixtral 8×7B's layer,
// bf16, on 8 ranks, by default)
export function moeLayer({tokens = 4096, hidden = 4096, ffn = 14336, experts = 8, top_k = 2, ep = 8,
                          matrices = 3, bytes_per_elem = 2} = {}) {
  epCheckShapes(experts, top_k, ep);
  epCheckInts([["tokens", tokens], ["hidden", hidden], ["ffn", ffn], ["matrices", matrices]]);
  return {tokens, hidden, ffn, experts, top_k, ep, matrices, bytes_per_elem};
}

// Python: capacity(tokens, experts, top_k, capacity_factor): ⌈c_f·K·n/E⌉, null without c_f
export function epCapacity(tokens, experts, topK, capacityFactor) {
  if (capacityFactor === null || capacityFactor === undefined) return null;
  if (!(capacityFactor > 0)) throw new Error(`capacity_factor (${capacityFactor}) must be > 0`);
  return Math.ceil(capacityFactor * topK * tokens / experts);
}

// Python: even_dispatch_bytes(tokens, top_k, hidden, ep, bytes_per_elem): [S, (x−1)/x·S]
export function evenDispatchBytes(tokens, topK, hidden, ep, bytesPerElem = 4) {
  epCheckInts([["tokens", tokens], ["top_k", topK], ["hidden", hidden], ["ep", ep]]);
  const S = topK * tokens * hidden * bytesPerElem;
  return [S, S * (ep - 1) / ep];
}

// Python: all_to_all_time(nbytes, ep, alpha, bandwidth)
export function allToAllTime(nbytes, ep, alpha, bandwidth) {
  return collectiveTime("all-to-all", "pairwise-exchange", ep, nbytes, alpha, bandwidth);
}

// Python: expert_params_per_rank(experts, hidden, ffn, ep, matrices)
export function expertParamsPerRank(experts, hidden, ffn, ep, matrices = 2) {
  epCheckShapes(experts, 1, ep);
  return Math.floor(experts / ep) * matrices * hidden * ffn;
}

// Python: moe_params(hidden, ffn, experts, top_k, layers, matrices, dense_per_layer, shared)
export function moeParams(hidden, ffn, experts, topK, layers = 1, matrices = 2, densePerLayer = 0, shared = 0) {
  epCheckShapes(experts, topK, 1);
  const one = matrices * hidden * ffn;
  const total = layers * ((experts + shared) * one + hidden * experts + densePerLayer);
  const active = layers * ((topK + shared) * one + hidden * experts + densePerLayer);
  return {"total": total, "active": active, "forward flops per token": 2 * active};
}

// Python: skewed_loads(tokens, experts, top_k, ep, hot, capacity_factor)
export function skewedLoads(tokens, experts, topK, ep, hot = 0.0, capacityFactor = null) {
  epCheckShapes(experts, topK, ep);
  epCheckInts([["tokens", tokens]]);
  if (!(hot >= 0.0 && hot <= 1.0)) throw new Error(`hot share (${hot}) must be between 0 and 1`);
  const A = ep * tokens * topK;
  const routed = [];
  for (let e = 0; e < experts; e++) routed.push((1 - hot) * A / experts + (e === 0 ? hot * A : 0.0));
  const C = epCapacity(ep * tokens, experts, topK, capacityFactor);
  const done = C === null ? routed : routed.map((r) => Math.min(r, C));
  const per = Math.floor(experts / ep);
  const ranks = [];
  for (let r = 0; r < ep; r++) ranks.push(done.slice(r * per, (r + 1) * per).reduce((a, b) => a + b, 0));
  const sum = (xs) => xs.reduce((a, b) => a + b, 0);
  return {"routed": routed, "processed": done, "per rank": ranks, "capacity": C,
          "max rank": Math.max(...ranks), "mean rank": sum(ranks) / ep,
          "dropped fraction": 1 - sum(done) / A};
}

// Python: off_node_fraction(ep, gpus_per_node): (x − min(x, g))/x, set by x, not by E
export function offNodeFraction(ep, gpusPerNode) {
  epCheckInts([["ep", ep], ["gpus_per_node", gpusPerNode]]);
  if (ep > gpusPerNode && ep % gpusPerNode) {
    throw new Error(`ep (${ep}) larger than a node must be a multiple of gpus_per_node (${gpusPerNode})`);
  }
  return (ep - Math.min(ep, gpusPerNode)) / ep;
}

// Python: ep_layer_model(layer, *, capacity_factor, hot, alpha, bandwidth, gpus_per_node)
export function epLayerModel(layer = {}, capacityFactor = null, hot = 0.0, alpha = 2e-6, bandwidth = 450e9,
                             gpusPerNode = 8) {
  const {tokens, hidden, ffn, experts, top_k: topK, ep, matrices, bytes_per_elem: e} = moeLayer(layer);
  const load = skewedLoads(tokens, experts, topK, ep, hot, capacityFactor);
  const [S, off] = evenDispatchBytes(tokens, topK, hidden, ep, e);
  const worst = Math.max(load["max rank"], topK * tokens) * hidden * e;
  const p = moeParams(hidden, ffn, experts, topK, 1, matrices);
  return {"max rank rows": load["max rank"],
          "imbalance": load["mean rank"] ? load["max rank"] / load["mean rank"] : 1.0,
          "capacity": load["capacity"], "dropped fraction": load["dropped fraction"],
          "dispatch bytes": S, "off rank bytes": off,
          "off node bytes": S * offNodeFraction(ep, gpusPerNode),
          "layer a2a seconds": 4 * allToAllTime(worst, ep, alpha, bandwidth),
          "expert bytes per rank": expertParamsPerRank(experts, hidden, ffn, ep, matrices) * e,
          "total params": p["total"], "active params": p["active"]};
}

const EP_TOKENS = [256, 512, 1024, 2048, 4096, 8192, 16384];
const EP_HIDDEN = [1024, 2048, 4096, 5120, 7168, 8192, 12288];

// config (Python: minipar.widgets.expert_parallel.ep_config): {links: {name: {alpha, bandwidth}}}
registerExplorer("ep-layer", {
  title: "Expert parallelism, one MoE layer (bf16, SwiGLU experts)",
  controls: [
    {name: "tokens", label: "tokens per rank n", type: "range", values: EP_TOKENS, value: 4096},
    {name: "experts", label: "experts E", type: "number", min: 1, max: 1024, step: 1, value: 8},
    {name: "top_k", label: "top-K", type: "number", min: 1, max: 64, step: 1, value: 2},
    {name: "ep", label: "expert-parallel ranks x", type: "number", min: 1, max: 1024, step: 1, value: 8},
    {name: "hidden", label: "h", type: "range", values: EP_HIDDEN, value: 4096},
    {name: "ffn", label: "expert width f", type: "number", min: 1, max: 131072, step: 1, value: 14336},
    {name: "capacity_factor", label: "capacity factor", type: "select",
     options: [["none (no dropping)", null], ["1.0", 1.0], ["1.25", 1.25], ["2.0", 2.0]], value: null},
    {name: "hot", label: "share of assignments to expert 0", type: "range",
     values: [0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0], value: 0},
    {name: "gpus_per_node", label: "GPUs per node", type: "select", options: [["4", 4], ["8", 8], ["16", 16]], value: 8},
    {name: "link", label: "link between the x GPUs", type: "select",
     options: ["nvlink4-h100", "pcie5-x16", "ib-ndr400", "eth-100g"], value: "nvlink4-h100", configOptions: "links"},
  ],
  divisible: [["experts", "ep"]],
  draw(v, config) {
    // the model's own checks name its arguments; the reader sees the labels on screen
    if (v.top_k > v.experts) throw new Error(`top-K (${v.top_k}) must be at most experts E (${v.experts})`);
    if (v.ep > v.gpus_per_node && v.ep % v.gpus_per_node) {
      throw new Error(`expert-parallel ranks x (${v.ep}) larger than a node must be a multiple of GPUs per node (${v.gpus_per_node})`);
    }
    const L = configEntry(config, "links", v.link);
    const layer = {tokens: v.tokens, hidden: v.hidden, ffn: v.ffn, experts: v.experts, top_k: v.top_k, ep: v.ep};
    const r = epLayerModel(layer, v.capacity_factor, v.hot, L.alpha, L.bandwidth, v.gpus_per_node);
    const load = skewedLoads(v.tokens, v.experts, v.top_k, v.ep, v.hot, v.capacity_factor);
    const per = v.experts / v.ep;
    const shown = Math.min(v.ep, 16);
    const cats = [], kept = [], dropped = [];
    for (let k = 0; k < shown; k++) {
      const routed = load.routed.slice(k * per, (k + 1) * per).reduce((a, b) => a + b, 0);
      cats.push(`rank ${k}`);
      kept.push(load["per rank"][k]);
      dropped.push(routed - load["per rank"][k]);
    }
    const svg = stackedBars({
      title: `rows per rank per step (E = ${fmtNumber(v.experts)}, top-${fmtNumber(v.top_k)}, x = ${fmtNumber(v.ep)}${v.ep > shown ? `, first ${shown} ranks` : ""})`,
      ylabel: "assignments (rows)",
      categories: cats,
      stacks: [{name: "processed", color: "#3182bd", values: kept}, {name: "dropped (over capacity)", color: "#e6550d", values: dropped}],
      hline: {y: load["mean rank"], label: "mean"},
    });
    const cap = r.capacity === null ? "no capacity limit" : `capacity C = ${fmtNumber(r.capacity)} per expert`;
    return svg + `<p>Most loaded rank: <b>${fmtNumber(r["max rank rows"])}</b> rows, <b>${r.imbalance.toFixed(2)}×</b> the mean; ${cap}; `
      + `dropped ${(100 * r["dropped fraction"]).toFixed(1)} % of the assignments.</p>`
      + `<p>Dispatch buffer per rank (even routing): ${fmtBytes(r["dispatch bytes"], false)}, of which ${fmtBytes(r["off rank bytes"], false)} leave the rank and ${fmtBytes(r["off node bytes"], false)} `
      + `leave its node of ${v.gpus_per_node} GPUs (set by x, not by E). `
      + `Four all-to-alls per layer and step over ${escapeHtml(v.link)}: <b>${fmtSeconds(r["layer a2a seconds"])}</b> (set by the most loaded rank's buffer).</p>`
      + `<p>Expert weights per rank: ${fmtBytes(r["expert bytes per rank"], false)} (∝ 1/x). This layer: ${fmtNumber(r["total params"] / 1e9, 2)}e9 parameters stored, `
      + `${fmtNumber(r["active params"] / 1e9, 2)}e9 used per token.</p>`;
  },
});
