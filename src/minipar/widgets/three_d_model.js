// minipar-requires: collectives, memory_time, context_parallel, expert_parallel
// Putting-them-together chapter's model (its view, the layout explorer, is three_d.js):
// JavaScript twins of minipar.cost.model.flops_per_iteration, minipar.cost.chapters.
// pipeline_parallel (both bubble conventions), minipar.cost.kernels.compute (the roofline per GEMM
// and per memory-bound kernel) and minipar.cost.planner (cluster, check, dp_allreduce_seconds,
// zero3_collective_seconds, zero3_gathers, tp_collectives, evaluate with context parallelism cp
// and, for MoE/SwiGLU/GQA shapes, expert parallelism ep, dollars_per_million_tokens, the chart's
// parts). The ring's K/V bytes and the MoE all-to-all come from the context_parallel.js and expert_parallel.js twins. Sources: Narayanan
// et al. 2021 (Eq. 2-3, §2.2, §3), Korthikanti et al. 2022 (Eq. 7-8, Table 2), Shoeybi et al.
// 2019 §3, Rajbhandari et al. 2020 §5 and §7, Thakur et al. 2005, Mikami et al. 2018, Williams
// et al. 2009 (roofline), Liu et al. 2023 (ring attention), Lepikhin et al. 2021 (GShard).
// The planner's terms mirror minipar.cost.planner.three_d_terms one function per term, camelCase of the
// Python name (term_compute -> termCompute, breakdown -> planBreakdown, three_d.terms ->
// planTerms); planEvaluate copies them into one Config as three_d.evaluate does.
// Parity with Python: tests/test_three_d_explorer.py (term by term) and tests/test_explorer_parity.py.

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

function checkSchedule(schedule, p, m, v) {           // Python: minipar.cost.chapters.pipeline_parallel._check
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

// model: {layers, hidden, heads, seq, vocab, and optionally experts, top_k, ffn, mlp_matrices,
// kv_heads (Python: ModelShape's defaults when absent: dense, 4h GELU MLP, MHA)}; cluster:
// (Python: ModelShape, Cluster) from planCluster

// Python: ModelShape with its defaults filled in, and its expert_params_per_layer property
function planShape(model) {
  return {experts: 1, top_k: 1, ffn: 0, mlp_matrices: 2, kv_heads: 0, norm: "layernorm", bias: true, positions: "learned", tied: true, attention: "", dropout: 0.1, ...model};
}

const ffnWidth = (m) => m.ffn || 4 * m.hidden;                                  // Python: ModelShape.ffn_width
const kvWidth = (m) => Math.floor(m.hidden / m.heads) * (m.kv_heads || m.heads);   // Python: ModelShape.kv_width

function denseParamsPerLayer(m) {                     // Python: ModelShape.dense_params_per_layer
  const h = m.hidden, f = ffnWidth(m), kv = kvWidth(m);
  const norms = 2 * (m.norm === "layernorm" ? 2 * h : h);
  const biases = m.bias ? 2 * h + 2 * kv + m.experts * ((m.mlp_matrices - 1) * f + h) : 0;
  return 2 * h * h + 2 * h * kv + norms + biases;
}

function embeddingParams(m, bothEnds = true) {        // Python: ModelShape.embedding_params
  const tokens = m.vocab * m.hidden * (!m.tied && bothEnds ? 2 : 1);
  return tokens + (m.positions === "learned" ? m.seq * m.hidden : 0);
}

// Python: ModelShape.check()
function checkModelShape(m) {
  if (!["layernorm", "rmsnorm"].includes(m.norm)) throw new Error(`norm ('${m.norm}') must be one of layernorm, rmsnorm`);
  if (!["learned", "rope"].includes(m.positions)) throw new Error(`positions ('${m.positions}') must be one of learned, rope`);
  if (m.attention && !ATTENTION.includes(m.attention)) throw new Error(`attention ('${m.attention}') must be one of ${ATTENTION.join(", ")}`);
  if (!(m.dropout >= 0 && m.dropout < 1)) throw new Error(`dropout (${m.dropout}) must be in [0, 1)`);
  if (![2, 3].includes(m.mlp_matrices)) throw new Error(`mlp matrices (${m.mlp_matrices}) must be 2 (GELU) or 3 (SwiGLU)`);
  const kv = m.kv_heads || m.heads;
  if (kv < 1 || m.heads % kv) throw new Error(`heads (${m.heads}) must be divisible by kv heads (${kv})`);
  if (m.ffn < 0 || !(m.top_k >= 1 && m.top_k <= m.experts)) throw new Error(`ffn (${m.ffn}) must be >= 0 and top_k (${m.top_k}) in [1, experts (${m.experts})]`);
}

export const ERA_FLASH_GPUS = ["H100-SXM", "H100-HBM2e-500W", "H100-PCIe", "H200", "H800", "B200", "GB200-NVL72"];

// Python: attention_for(model, gpu_name)
export function attentionFor(model, gpuName) {
  const m = planShape(model);
  if (m.attention) return m.attention;
  return ERA_FLASH_GPUS.includes(String(gpuName).split("*")[0]) ? "flash" : "unfused";
}

function expertParamsPerLayer(m) {                    // Python: ModelShape.expert_params_per_layer
  const f = m.ffn || 4 * m.hidden;
  const router = m.experts > 1 ? m.hidden * m.experts : 0;
  return m.experts * m.mlp_matrices * m.hidden * f + router;
}

// Python: planner.check(model, cluster, layout)
export function planCheck(model, cluster, layout) {
  const {tp: t, pp: p, dp: d, micro_batch: b, chunks: v = 1, zero = 1, cp = 1, ep = 1, global_batch: globalBatch, split = "even"} = layout;
  model = planShape(model);
  checkModelShape(model);
  if (!SPLITS.includes(split)) throw new Error(`split ('${split}') must be one of ${SPLITS.join(", ")}`);
  const uneven = split === "units";
  checkLayout(model.layers, model.hidden, model.heads, d, t, uneven ? 1 : p, zero);
  if (uneven && (!(p >= 1 && p <= model.layers) || (v > 1 && (model.layers + 2) % (p * v)))) throw new Error(`uneven stages (split units) need p (${p}) in [1, layers (${model.layers})] and, interleaved, layers + 2 (${model.layers + 2}) divisible by p·v (${p}·${v})`);
  if (!uneven && model.layers % (p * v)) throw new Error(`layers (${model.layers}) must be divisible by p·v (${p}·${v})`);
  const kvHeads = model.kv_heads || model.heads;
  if (kvHeads % t) throw new Error(`kv heads (${kvHeads}) must be divisible by t (${t}): Megatron-Core splits the key/value heads over TP, it does not replicate them`);
  if (!(Number.isInteger(cp) && cp >= 1 && Number.isInteger(ep) && ep >= 1)) throw new Error(`cp (${cp}) and ep (${ep}) must be integers >= 1`);
  if (model.seq % (cp > 1 ? 2 * cp : 1)) throw new Error(`seq (${model.seq}) must be divisible by 2·cp (${2 * cp}): zigzag chunks`);
  if (ep > 1 && (!(model.experts > 1) || model.experts % ep)) throw new Error(`ep (${ep}) needs an MoE model whose experts (${model.experts}) it divides`);
  if (ep > 1 && (t * cp * d) % ep) {                 // Python: expert_parallel.folded_expert_dp
    throw new Error(`etp·ep (1·${ep} = ${ep}) must divide the ranks of a stage, t·cp·d = ${t * cp * d} (MoE parallel folding)`);
  }
  if (model.experts > 1 && t > 1 && !(layout.sp ?? false)) throw new Error(`an MoE model with t (${t}) > 1 needs sequence parallelism (Megatron-Core), got sp False`);
  if (t * cp * p * d !== cluster.gpus) {
    throw new Error(cp > 1 ? `gpus (${cluster.gpus}) must equal t·cp·p·d (${t}·${cp}·${p}·${d})` : `gpus (${cluster.gpus}) must equal t·p·d (${t}·${p}·${d})`);
  }
  if (globalBatch % (d * b)) throw new Error(`global batch (${globalBatch}) must be divisible by d·b (${d}·${b})`);
  const m = Math.floor(globalBatch / (d * b));
  if (v > 1 && (p === 1 || m < p)) throw new Error(`interleaving (v=${v}) needs p > 1 and microbatches m (${m}) at least p (${p})`);
  if (zero === 2 && p > 1) throw new Error(`ZeRO stage (2) needs p = 1 (its sharded gradients would be reduced every micro-batch under PP; use ZeRO-1 or ZeRO-3), got p (${p})`);
  return null;
}

function ring(op, n, nbytes, link) {
  return collectiveTime(op, "ring", n, nbytes, link.alpha, link.bandwidth);
}

// Python: dp_allreduce_seconds(nbytes, d, t, cluster) -> (seconds, link name)
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

export const ZERO3_COLLECTIVES = ["hierarchical", "flat-ring"];

// Python: zero3_collective_seconds(nbytes, n, t, cluster, algorithm) -> (seconds, link name): one
// ZeRO-3 all-gather or reduce-scatter; spanning nodes, a flat ring limited by its slowest hop
// (each rank's (n−1)/n·S through its own NIC; min bandwidth, max α) or half the hierarchical
// all-reduce.
export function zero3CollectiveSeconds(nbytes, n, t, cluster, algorithm = "hierarchical") {
  if (!ZERO3_COLLECTIVES.includes(algorithm)) throw new Error(`zero3_collectives ('${algorithm}') must be one of ${ZERO3_COLLECTIVES.join(", ")}`);
  if (n === 1) return [0.0, "-"];
  if (t * n <= cluster.gpus_per_node || algorithm === "hierarchical") {
    const [ar, name] = dpAllreduceSeconds(nbytes, n, t, cluster);
    return [ar / 2, name];
  }
  const slow = cluster.intra.bandwidth <= cluster.inter.bandwidth ? cluster.intra : cluster.inter;
  const hop = {alpha: Math.max(cluster.intra.alpha, cluster.inter.alpha), bandwidth: slow.bandwidth};
  return [ring("all-gather", n, nbytes, hop), slow.name];
}

// Python: zero3_gathers(recompute, ac_inside_unit): all-gathers per layer per micro-batch (fwd,
// re-fwd unless the checkpoint wrapper sits inside the sharded unit, bwd): where the wrapper
// sits decides the count, not the FSDP version
export function zero3Gathers(recompute, acInsideUnit = false) {
  return recompute === "full" && !acInsideUnit ? 3 : 2;
}

// --- minipar.cost.kernels.compute: a roofline per kernel ------------------------------------------
const TILE_M = 256, TILE_N = 128;

function positive(pairs) {
  for (const [k, v] of pairs) if (!(v > 0)) throw new Error(`${k} (${v}) must be > 0`);
}

const SCORE_BYTES_FWD = 9, SCORE_BYTES_BWD = 11, FLASH_BACKWARD = 2.5;   // Python: compute's constants
// Python: compute.FA3_EFFICIENCY (assumed), FP8_GEMM_EFFICIENCY and COMPILED_TRAFFIC (fitted on
// the calibration rows, validation.modern_fit), FP8_SCALING, FP8_CAST_BYTES
export const FA3_EFFICIENCY = 0.52, FP8_GEMM_EFFICIENCY = 0.87, COMPILED_TRAFFIC = 0.56;
export const FP8_ROWWISE_GEMM_RATIO = 0.90;   // Python: compute.FP8_ROWWISE_GEMM_RATIO (a kernel benchmark)
export const FP8_SCALING = ["delayed", "current", "rowwise"], FP8_CAST_BYTES = {delayed: 4, current: 6, rowwise: 3};
export const FP8_RECAST_BYTES = {delayed: 0, current: 0, rowwise: 5};   // Python: compute.FP8_RECAST_BYTES

// Python: compute.fp8_weight_cast_bytes(scaling)
export function fp8WeightCastBytes(scaling) {
  return scaling === "rowwise" ? FP8_CAST_BYTES[scaling] + FP8_RECAST_BYTES[scaling] : 4;
}

// Python: compute.fp8_peak(gpu)
function fp8Peak(gpu) {
  if (!gpu.peak_fp8) throw new Error(`fp8 needs a GPU with FP8 tensor cores (an 'fp8' peak in its preset: Hopper or later); ${gpu.name} has none`);
  return gpu.peak_fp8;
}

// Python: gemm_seconds(M, N, K, peak, efficiency, hbm, sms, batch, bytes_per_elem, rule, latency)
export function gemmSeconds(M, N, K, peak, efficiency, hbm, sms, batch = 1, bytesPerElem = 2, rule = "waves", latency = 0.0) {
  positive([["M", M], ["N", N], ["K", K], ["peak", peak], ["efficiency", efficiency], ["hbm", hbm], ["sms", sms], ["batch", batch]]);
  const flops = 2.0 * batch * M * N * K;
  const moved = batch * (M * K + K * N + M * N) * bytesPerElem;
  if (rule === "additive") {
    if (latency < 0) throw new Error(`latency (${latency}) must be >= 0`);
    return latency + flops / (peak * efficiency) + moved / hbm;
  }
  if (rule !== "waves") throw new Error(`rule ('${rule}') must be one of waves, additive`);
  const tiles = batch * Math.ceil(M / TILE_M) * Math.ceil(N / TILE_N);
  const q = (batch * M * N) / (Math.ceil(tiles / sms) * sms * TILE_M * TILE_N);
  return Math.max(flops / (peak * efficiency * q), moved / hbm);
}

// Python: bmm_seconds(M, N, K, batch, bandwidth, latency, bytes_per_elem)
export function bmmSeconds(M, N, K, batch, bandwidth, latency = 0.0, bytesPerElem = 2) {
  positive([["M", M], ["N", N], ["K", K], ["batch", batch], ["bandwidth", bandwidth]]);
  if (latency < 0) throw new Error(`latency (${latency}) must be >= 0`);
  return latency + (batch * (M * K + K * N + M * N) * bytesPerElem) / bandwidth;
}

function gemmOf(gpu, M, N, K, batch = 1, fp8 = false) {   // Python: compute.gpu_gemm_seconds (batch 1)
  const eight = fp8 && batch === 1;
  const rate = eight ? FP8_GEMM_EFFICIENCY * (fp8 === "rowwise" ? FP8_ROWWISE_GEMM_RATIO : 1.0) : 1.0;
  return gemmSeconds(M, N, K, eight ? fp8Peak(gpu) : gpu.peak, gpu.gemm_efficiency * rate, gpu.hbm_bandwidth, gpu.sms, batch, eight ? 1 : 2, gpu.gemm_rule || "waves", gpu.gemm_latency_s || 0.0);
}

function attentionGemm(gpu, M, N, K, batch) {       // Python: compute.gpu_gemm_seconds (batch > 1)
  if (gpu.bmm_bandwidth === null || gpu.bmm_bandwidth === undefined) return gemmOf(gpu, M, N, K, batch);
  return bmmSeconds(M, N, K, batch, gpu.bmm_bandwidth, gpu.bmm_latency_s || 0.0);
}

// Python: layer_gemms(b, s, h, a, t) -> [(batch, M, N, K)]
export function layerGemms(b, s, h, a, t = 1) {
  positive([["b", b], ["s", s], ["h", h], ["a", a], ["t", t]]);
  const bs = b * s, dh = Math.floor(h / a), at = Math.floor(a / t);
  return [[1, bs, Math.floor(3 * h / t), h], [1, bs, h, Math.floor(h / t)], [1, bs, Math.floor(4 * h / t), h],
    [1, bs, h, Math.floor(4 * h / t)], [b * at, s, s, dh], [b * at, s, dh, s]];
}

function passSeconds(gemms, gpu) {                  // Python: compute.pass_seconds
  const one = (n, M, N, K) => (n === 1 ? gemmOf(gpu, M, N, K) : attentionGemm(gpu, M, N, K, n));
  let fwd = 0, bwd = 0;
  for (const [n, M, N, K] of gemms) fwd += one(n, M, N, K);
  for (const [n, M, N, K] of gemms) bwd += one(n, M, K, N) + one(n, K, N, M);
  return [fwd, bwd];
}

const ATTENTION = ["unfused", "flash", "fa3"];
function checkAttention(attention) {                // Python: model.check_attention
  if (!ATTENTION.includes(attention)) throw new Error(`attention ('${attention}') must be one of ${ATTENTION.join(", ")}`);
  return attention;
}
const fused = (attention) => ["flash", "fa3"].includes(checkAttention(attention));   // Python: model.fused

// Python: flash_attention_flops(b, s, h, t, causal) -> [fwd, bwd]
export function flashAttentionFlops(b, s, h, t = 1, causal = true) {
  positive([["b", b], ["s", s], ["h", h], ["t", t]]);
  const fwd = ((4.0 * b * s * s * h) / t) * (causal ? 0.5 : 1.0);
  return [fwd, FLASH_BACKWARD * fwd];
}

// Python: flash_attention_seconds(b, s, h, a, gpu, t) -> [fwd, bwd]
export function flashAttentionSeconds(b, s, h, a, gpu, t = 1, kernel = "flash") {
  positive([["a", a]]);
  if (kernel === "fa3" && !gpu.peak_fp8)              // no FP8 peak: before Hopper
    throw new Error(`attention fa3 (FlashAttention-3) is a Hopper kernel; ${gpu.name} is not Hopper (no 'fp8' peak in its preset): use flash`);
  const rate = gpu.peak * (kernel === "fa3" ? FA3_EFFICIENCY : gpu.flash_efficiency);
  const [f, bw] = flashAttentionFlops(b, s, h, t);
  return [f / rate, bw / rate];
}

// Python: layer_memory_bytes(b, s, h, a, t, sp, grad_accum_bytes, attention, score_bytes) -> [fwd, bwd, core]
export function layerMemoryBytes(b, s, h, a, t = 1, sp = false, gradAccumBytes = 10, attention = "unfused", scoreBytes = SCORE_BYTES_FWD + SCORE_BYTES_BWD) {
  positive([["b", b], ["s", s], ["h", h], ["a", a], ["t", t]]);
  if (fused(attention)) scoreBytes = 0.0;
  else if (scoreBytes < 0) throw new Error(`score_bytes (${scoreBytes}) must be >= 0`);
  const bsh = b * s * h, scores = (a * s * s * b) / t;
  const fScore = (scoreBytes * SCORE_BYTES_FWD) / (SCORE_BYTES_FWD + SCORE_BYTES_BWD);
  const rep = sp ? bsh / t : bsh;
  const fwd = 22 * rep + (16 * bsh) / t + fScore * scores;
  const bwd = 22 * rep + (24 * bsh) / t + (scoreBytes - fScore) * scores + (gradAccumBytes * 12 * h * h) / t;
  return [fwd, bwd, fScore * scores];
}

// Python: layer_seconds(b, s, h, a, gpu, t, sp, recompute, attention, grad_accum_bytes) -> {gemm_s, memory_s, total_s}
export function layerSeconds(b, s, h, a, gpu, t = 1, sp = false, recompute = "none", attention = "unfused", gradAccumBytes = 10) {
  checkAttention(attention);
  const gemms = layerGemms(b, s, h, a, t);
  const [denseF, denseB] = passSeconds(gemms.slice(0, 4), gpu);
  const [coreF, coreB] = fused(attention) ? flashAttentionSeconds(b, s, h, a, gpu, t, attention) : passSeconds(gemms.slice(4), gpu);
  const sb = gpu.attention_score_bytes ?? SCORE_BYTES_FWD + SCORE_BYTES_BWD;
  const [mF, mB, mCore] = layerMemoryBytes(b, s, h, a, t, sp, gradAccumBytes, attention, sb);
  const overhead = gpu.layer_overhead_s || 0.0;
  const fwd = denseF + coreF;
  let g = fwd + denseB + coreB, mem = mF + mB, extra = overhead;
  if (recompute === "full") { g += fwd; mem += mF; extra += overhead / 3; }
  else if (recompute === "selective") { g += coreF; mem += mCore; }
  else if (recompute !== "none") throw new Error(`recompute ('${recompute}') must be one of none, selective, full`);
  const memoryS = mem / gpu.hbm_bandwidth + extra;
  return {gemm_s: g, memory_s: memoryS, total_s: g + memoryS};
}

// Python: attention_core_and_mlp_seconds(b, s, h, a, gpu, t, attention) -> {core_f, core_b, mlp_f, mlp_b}
export function attentionCoreAndMlpSeconds(b, s, h, a, gpu, t = 1, attention = "unfused") {
  const gemms = layerGemms(b, s, h, a, t);
  const [coreF, coreB] = fused(attention) ? flashAttentionSeconds(b, s, h, a, gpu, t, attention) : passSeconds(gemms.slice(4), gpu);
  const [mlpF, mlpB] = passSeconds(gemms.slice(2, 4), gpu);
  return {core_f: coreF, core_b: coreB, mlp_f: mlpF, mlp_b: mlpB};
}

// Python: logits_seconds(b, s, h, V, gpu, t)
export function logitsSeconds(b, s, h, V, gpu, t = 1) {
  const Vt = Math.max(1, Math.floor(V / t));
  return gemmOf(gpu, b * s, Vt, h) + gemmOf(gpu, b * s, h, Vt) + gemmOf(gpu, h, Vt, b * s) + (16 * b * s * Vt) / gpu.hbm_bandwidth;
}

// Python: optimizer_seconds(params, gpu, bytes_per_param)
export function optimizerSeconds(params, gpu, bytesPerParam = 30) {
  if (params < 0) throw new Error(`params (${params}) must be >= 0`);
  return (bytesPerParam * params) / (gpu.optimizer_bandwidth || gpu.hbm_bandwidth);
}

// --- minipar.cost.planner.three_d ------------------------------------------------------------------
export const HEADROOM = 0.10, GRAD_REDUCE_BYTES = 4;

// gpu: {name, memory_bytes, peak, hbm_bandwidth, sms, gemm_efficiency, intra, inter};
// links: {name: {name, alpha, bandwidth}} (Python: minipar.widgets.three_d.plan_config)
// Python: three_d.cluster(gpus, gpus_per_node, gpu, intra, inter, gemm_efficiency)
export function planCluster(gpus, gpusPerNode, gpu, links, intra = null, inter = null, gemmEfficiency = null) {
  if (!(Number.isInteger(gpus) && gpus >= 1 && Number.isInteger(gpusPerNode) && gpusPerNode >= 1)) {
    throw new Error(`gpus (${gpus}) and gpus_per_node (${gpusPerNode}) must be integers >= 1`);
  }
  if (gpus > gpusPerNode && gpus % gpusPerNode) throw new Error(`gpus (${gpus}) must be a multiple of gpus_per_node (${gpusPerNode})`);
  let g = gpu;
  if (gemmEfficiency !== null) {
    if (!(gemmEfficiency >= 0.01 && gemmEfficiency <= 1)) throw new Error(`gemm_efficiency (${gemmEfficiency}) must be between 0.01 and 1`);   // Python: three_d.BOUNDS
    g = {...gpu, gemm_efficiency: gemmEfficiency};
  }
  const pick = (name) => achievedLink(configEntry({links}, "links", name));
  return {gpus, gpus_per_node: gpusPerNode, gpu: g, peak: g.peak, intra: pick(intra || g.intra), inter: pick(inter || g.inter)};
}

// Python: three_d.achieved(lk): a link at NCCL's achieved bus bandwidth
export function achievedLink(lk) {
  const e = lk.bus_efficiency ?? 1.0;
  return e === 1.0 ? lk : {...lk, bandwidth: lk.bandwidth * e, bus_efficiency: 1.0};
}

// Python: tp_collectives(t, sp, recompute): all-reduce equivalents per layer per micro-batch
export function tpCollectives(t, sp, recompute) {
  if (t === 1) return 0.0;
  if (sp) return recompute === "full" ? 6.0 : 5.0;
  return recompute === "full" ? 6.0 : 4.0;
}

// --- minipar.cost.planner.three_d_terms: one function per named term, camelCase of the Python name
// (term_states -> termStates, ...). layout (Python: Layout): {global_batch, tp, pp, dp, micro_batch,
// chunks, recompute, sp, zero, cp, ep}; options (Python: Options): {grad_reduce_bytes, dp_overlap,
// headroom, zero3_overlap, zero3_collectives}.

// Python: three_d_terms.ALLOCATOR_MARGIN and RECIPES (bytes per parameter of weights, gradients,
// optimizer, reduction, accumulation, Adam; fp32 logits; headroom)
export const ALLOCATOR_MARGIN = 0.12, RESERVE = 0.025;   // Python: ALLOCATOR_MARGIN, RESERVE
export const RECIPES = {
  "2021": {weight_bytes: 2, grad_bytes: 2, optimizer_bytes: 12, reduce_bytes: GRAD_REDUCE_BYTES, accumulate_bytes: 10, adam_bytes: 30, fp32_logits: false, headroom: HEADROOM, margin: HEADROOM},
  megatron: {weight_bytes: 2, grad_bytes: 4, optimizer_bytes: 12, reduce_bytes: 4, accumulate_bytes: 10, adam_bytes: 30, fp32_logits: true, headroom: RESERVE, margin: ALLOCATOR_MARGIN},
  // a what-if, no stack's default: not --no-gradient-accumulation-fusion (fp32 main gradients
  // stay); torchtitan's FSDP2 reduces in fp32
  "bf16-grads": {weight_bytes: 2, grad_bytes: 2, optimizer_bytes: 12, reduce_bytes: 2, accumulate_bytes: 6, adam_bytes: 28, fp32_logits: true, headroom: RESERVE, margin: ALLOCATOR_MARGIN},
};
export const RECOMPUTE_MODULES = ["core_attn", "layernorm", "act", "mlp"];   // Python: RECOMPUTE_MODULES
export const MLP_SAVES = ["product", "inputs"];   // Python: MLP_SAVES
export const SPLITS = ["even", "units"];                                     // Python: SPLITS
// Python: MAIN_GRADS: a recipe's bytes by main-gradient dtype (fp32 or bf16 main gradients)
export const MAIN_GRADS = {4: {grad_bytes: 4, reduce_bytes: 4, accumulate_bytes: 10, adam_bytes: 30}, 2: {grad_bytes: 2, reduce_bytes: 2, accumulate_bytes: 6, adam_bytes: 28}};
function recipeOf(options) {   // Python: Options.recipe
  const base = RECIPES[options.precision || "2021"], g = options.main_grad_bytes ?? null;
  return g === null || g === base.grad_bytes ? base : {...base, ...MAIN_GRADS[g]};
}

// Python: precision_for(gpu_name)
export function precisionFor(gpuName) {
  return ERA_FLASH_GPUS.includes(String(gpuName).split("*")[0]) ? "megatron" : "2021";
}

// Python: Options.resolved(attention, precision)
function resolvedOptions(o, attention, precision) {
  const r = {...o, attention: o.attention || attention, precision: o.precision || precision};
  const rc = recipeOf(r), modern = r.precision !== "2021";
  return {...r, grad_reduce_bytes: r.grad_reduce_bytes ?? rc.reduce_bytes, headroom: r.headroom ?? rc.headroom,
    overlap_param_gather: r.overlap_param_gather ?? modern, overlap_grad_reduce: r.overlap_grad_reduce ?? modern, tp_overlap: r.tp_overlap ?? modern, reshard_after_forward: r.reshard_after_forward ?? (modern ? null : true),
    recompute_modules: r.recompute_modules ?? (modern ? ["core_attn", "layernorm", "act"] : ["core_attn"])};
}

// Python: Options(...) with its defaults and rules
export function planOptions(options = {}) {
  const known = ["grad_reduce_bytes", "dp_overlap", "headroom", "zero3_overlap", "zero3_collectives", "attention", "precision", "zero3_ac_inside_unit", "overlap_grad_reduce", "cp_algorithm", "overlap_param_gather", "reshard_after_forward", "recompute_modules", "fp8", "compiled", "tp_overlap", "moe_imbalance", "fp8_params", "moe_capacity", "ep_overlap", "dualpipe", "main_grad_bytes", "mlp_saves", "microbatch_group"];
  const unknown = Object.keys(options).filter((k) => !known.includes(k)).sort();
  if (unknown.length) throw new Error(`option ('${unknown[0]}') must be one of ${known.join(", ")}`);
  const o = {grad_reduce_bytes: null, dp_overlap: true, headroom: null, zero3_overlap: true, zero3_collectives: "hierarchical", attention: null, precision: null, zero3_ac_inside_unit: false, overlap_grad_reduce: null, cp_algorithm: "ring", overlap_param_gather: null, reshard_after_forward: null, recompute_modules: null, fp8: null, compiled: false, tp_overlap: null, moe_imbalance: 1.0, fp8_params: false, moe_capacity: null, ep_overlap: false, main_grad_bytes: null, mlp_saves: "product", microbatch_group: null, dualpipe: false, ...options};
  if (!ZERO3_COLLECTIVES.includes(o.zero3_collectives)) throw new Error(`zero3_collectives ('${o.zero3_collectives}') must be one of ${ZERO3_COLLECTIVES.join(", ")}`);
  if (!(o.attention === null || ATTENTION.includes(o.attention))) throw new Error(`attention ('${o.attention}') must be one of ${ATTENTION.join(", ")}`);
  if (!(o.fp8 === null || FP8_SCALING.includes(o.fp8))) throw new Error(`fp8 ('${o.fp8}') must be one of ${FP8_SCALING.join(", ")}`);
  if (!CP_ALGORITHMS.includes(o.cp_algorithm)) throw new Error(`cp_algorithm ('${o.cp_algorithm}') must be one of ${CP_ALGORITHMS.join(", ")}`);
  if (!(o.precision === null || o.precision in RECIPES)) throw new Error(`precision ('${o.precision}') must be one of ${Object.keys(RECIPES).join(", ")}`);
  if (!MLP_SAVES.includes(o.mlp_saves)) throw new Error(`mlp_saves ('${o.mlp_saves}') must be one of ${MLP_SAVES.join(", ")}`);
  const badModule = (o.recompute_modules || []).find((x) => !RECOMPUTE_MODULES.includes(x));
  if (badModule !== undefined) throw new Error(`recompute module ('${badModule}') must be one of ${RECOMPUTE_MODULES.join(", ")}`);
  if (o.fp8_params && !o.fp8) throw new Error(`fp8_params (${o.fp8_params ? "True" : "False"}) needs fp8 GEMMs (a scaling), got fp8 (${o.fp8 ?? "None"})`);
  if (o.moe_capacity !== null && !(o.moe_capacity > 0)) throw new Error(`moe capacity (${o.moe_capacity}) must be > 0 (a capacity factor), or None (dropless)`);
  if (!(o.moe_imbalance >= 1)) throw new Error(`moe imbalance (${o.moe_imbalance}) must be >= 1 (the busiest EP rank's tokens over the mean)`);
  if (o.dualpipe && !o.ep_overlap) throw new Error(`dualpipe (True) needs ep_overlap: DualPipe overlaps the all-to-alls with another micro-batch's compute, got ep_overlap (${o.ep_overlap ? "True" : "False"})`);
  if (!(o.main_grad_bytes === null || o.main_grad_bytes in MAIN_GRADS)) throw new Error(`main_grad_bytes (${o.main_grad_bytes}) must be one of 4, 2 (fp32 or bf16 main gradients)`);
  const n = o.microbatch_group;
  if (n !== null && !(Number.isInteger(n) && n >= 1)) throw new Error(`microbatch group (${n}) must be a positive integer, or None (p)`);
  const grb = o.grad_reduce_bytes ?? GRAD_REDUCE_BYTES, room = o.headroom ?? HEADROOM;
  if (!(grb > 0) || !(room >= 0 && room < 1)) {
    throw new Error(`grad_reduce_bytes (${grb}) must be > 0 and headroom (${room}) in [0, 1)`);
  }
  return o;
}

const layMicrobatches = (layout) => Math.floor(layout.global_batch / (layout.dp * layout.micro_batch));   // Python: Layout.microbatches

// Python: stage_layers(L, layout) -> [layers on a middle stage, layers on the first or last stage]
export function stageLayers(L, layout) {
  const p = layout.pp;
  if ((layout.split ?? "even") === "even" || p === 1) return [Math.floor(L / p), Math.floor(L / p)];
  const u = Math.ceil((L + 2) / p);
  return [u, u - 1];
}

const optMargin = (options) => Math.max(options.headroom || 0, recipeOf(options).margin);   // Python: Options.margin
const reshards = (layout, options) => (options.reshard_after_forward ?? null) === null ? layout.pp === 1 : options.reshard_after_forward;   // Python: reshards

// Python: expert_grid(layout) -> [ETP, EDP, EDP stride] (MoE parallel folding once ep > 1)
export function expertGrid(layout) {
  const dcp = layout.dp * layout.cp;
  if (layout.ep === 1) return [layout.tp, dcp, layout.tp];
  return [1, (layout.tp * dcp) / layout.ep, layout.ep];
}

// Python: stage_params(model, layout)
export function stageParams(model, layout) {
  const m = planShape(model);
  const [mid, end] = stageLayers(m.layers, layout);
  const expLayer = expertParamsPerLayer(m);
  const denseLayer = denseParamsPerLayer(m);
  const layer = denseLayer + expLayer / layout.ep;
  let emb = embeddingParams(m, layout.pp === 1), lp = end;
  if (mid * layer > end * layer + emb) [lp, emb] = [mid, 0];   // the fullest stage
  return {dense_layer: denseLayer, expert_layer: expLayer, layer, stage: lp * layer + emb, dense: lp * denseLayer + emb, expert: (lp * expLayer) / layout.ep};
}

// Python: term_states(model, cluster, layout, options): model-state bytes of the first stage
export function termStates(model, cluster, layout, options) {
  const {tp: t, pp: p, zero} = layout, dcp = layout.dp * layout.cp;
  const [etp, edp] = expertGrid(layout);
  const sp = stageParams(model, layout), rc = recipeOf(options);
  const msb = (psi, d, split) => modelStateBytes(psi, d, split, p, zero, rc.weight_bytes, rc.grad_bytes, rc.optimizer_bytes).total;
  let states = msb(sp.dense * p, dcp, t) + msb(sp.expert * p, edp, etp);
  if (zero === 3 && !reshards(layout, options)) {            // the stage's weights gathered, its gradient whole
    const whole = layout.ep === 1 ? sp.stage / t : sp.dense / t + sp.expert;
    states += (2 + options.grad_reduce_bytes) * whole;
  } else if (zero === 3) {                             // 2 gathered layers + 1 gradient
    const one = layout.ep === 1 ? sp.layer / t : sp.dense_layer / t + sp.expert_layer / layout.ep;
    states += (2 * 2 + options.grad_reduce_bytes) * one;
  }
  return states - fp8ParamBytesSaved(model, layout, options);
}

// Python: fp8_param_bytes_saved(model, layout, options): no 16-bit copy of the FP8 linears' weights
export function fp8ParamBytesSaved(model, layout, options) {
  if (!(options.fp8 && options.fp8_params)) return 0.0;
  const linear = layerDenseGemms(model, layout).reduce((acc, [, N, K]) => acc + N * K, 0);
  const shard = layout.zero === 3 ? layout.dp * layout.cp : 1;
  return recipeOf(options).weight_bytes * Math.max(...stageLayers(model.layers, layout)) * linear / shard;
}

// Python: layers_in_flight(L, layout, group)
export function layersInFlight(L, layout, group = null) {
  const v = layout.chunks, [mid, end] = stageLayers(L, layout);
  const first = end * chunksInFlight(layout, 0, group) / v;
  return layout.pp > 1 ? Math.max(first, mid * chunksInFlight(layout, 1, group) / v) : first;
}

// Python: chunks_in_flight(layout, rank, group): 1F1B's p − rank, interleaved the warm-up of the
// micro-batch group N (p by default, from p to m) + 1, at most m·v
export function chunksInFlight(layout, rank, group = null) {
  const p = layout.pp, m = layMicrobatches(layout), v = layout.chunks;
  if (v === 1) return Math.min(p - rank, m);
  const n = group ?? p;
  if (!(p <= n && n <= m)) throw new Error(`microbatch group N (${n}) must be at least p (${p}) and at most m (${m}) under interleaving`);
  return Math.min(2 * (p - rank - 1) + (v - 1) * n + 1, m * v);
}

// Python: shape_activation_bytes(model, layout, mlp_saves)
export function shapeActivationBytes(model, layout, mlpSaves = "product") {
  const m = planShape(model);
  if (layout.recompute === "full") return 0.0;
  const h = m.hidden, f = ffnWidth(m), kept = m.mlp_matrices - (mlpSaves === "inputs" ? 1 : 0);
  const perToken = 4 * kvWidth(m) - 4 * h + 2 * kept * f * m.top_k - 16 * h;
  const masks = m.dropout > 0 ? 0.0 : (2 * h) / (layout.sp ? layout.tp : 1);   // no dropout: no masks
  return m.seq * layout.micro_batch * (perToken / layout.tp - masks);
}

// Python: module_activation_bytes(model, layout, options): what selective drops beyond the attention core
export function moduleActivationBytes(model, layout, options) {
  if (layout.recompute !== "selective") return 0.0;
  const m = planShape(model), mods = options.recompute_modules || [], sb = m.seq * layout.micro_batch, t = layout.tp;
  let out = mods.includes("layernorm") ? (4 * sb * m.hidden) / (layout.sp ? t : 1) : 0.0;
  const f = ffnWidth(m), k = m.top_k, kept = m.mlp_matrices - (options.mlp_saves === "inputs" ? 1 : 0);
  if (mods.includes("mlp")) out += (2 * kept * f * k * sb) / t;
  else if (mods.includes("act") && options.mlp_saves !== "inputs") out += (2 * f * k * sb) / t;   // "inputs" keeps no output
  return out;
}

// Python: compute.elementwise_kernels(h, f, kv, t, sp, recipe) -> [{name, backward, bytes_per_token}]
export function elementwiseKernels(h, f, kv, t = 1, sp = false, recipe = {}) {
  const rc = {norm: "layernorm", mlp_matrices: 2, rope: false, dropout: 0.1, bias: true, ...recipe};
  const r = sp ? h / t : h, w = (x) => x / t, qkv = h + 2 * kv, swiglu = rc.mlp_matrices === 3;
  const K = (name, backward, bytes) => ({name, backward, bytes_per_token: bytes});
  const out = [K("norm1", false, 4 * r), K("qkv heads", false, 4 * w(qkv))];
  if (rc.rope) for (let i = 0; i < 2; i += 1) out.push(K(`rope ${i}`, false, 4 * w(h + kv)));
  out.push(K("attention out", false, 4 * w(h)));
  const drop = rc.dropout > 0;
  for (const i of [1, 2]) {
    if (drop) out.push(K(`dropout${i}`, false, 5 * r));
    out.push(K(`residual${i}`, false, 6 * r));
    if (i === 1) {
      out.push(K("norm2", false, 4 * r));
      if (swiglu) out.push(K("silu", false, 4 * w(f)), K("gate * up", false, 6 * w(f)));
      else out.push(K("gelu", false, 4 * w(f)));
    }
  }
  out.push(K("norm1 bwd", true, 6 * r), K("norm2 bwd", true, 6 * r), K("qkv heads bwd", true, 4 * w(qkv)), K("attention out bwd", true, 4 * w(h)));
  if (rc.rope) for (let i = 0; i < 2; i += 1) out.push(K(`rope ${i} bwd`, true, 4 * w(h + kv)));
  if (drop) out.push(K("dropout1 bwd", true, 5 * r), K("dropout2 bwd", true, 5 * r));
  out.push(K("residual1 bwd", true, 6 * r), K("residual2 bwd", true, 6 * r));
  for (let i = 0; i < (swiglu ? 3 : 1); i += 1) out.push(K(`act bwd ${i}`, true, 6 * w(f)));
  if (rc.bias) [w(qkv), r, w(f * (rc.mlp_matrices - 1)), r].forEach((x, i) => out.push(K(`bias grad ${i}`, true, 2 * x)));
  return out;
}

// Python: compute.elementwise_seconds(kernels, tokens, gpu, recompute): max(issue, traffic) each
export function elementwiseSeconds(kernels, tokens, gpu, recompute = "none", compiled = false) {
  let total = 0.0;
  const bw = compiled ? gpu.hbm_bandwidth / COMPILED_TRAFFIC : gpu.elementwise_bandwidth, issue = compiled ? 0.0 : gpu.kernel_issue_s || 0;
  for (const k of kernels) {
    const one = Math.max(issue, (tokens * k.bytes_per_token) / bw);
    total += one * (recompute === "full" && !k.backward ? 2 : 1);
  }
  return total;
}

// Python: compute.fused_activation_seconds(b, s, h, t, gpu, sp, recompute)
export function fusedActivationSeconds(b, s, h, t, gpu, sp = false, recompute = "none") {
  const bsh = b * s * h, rep = sp ? bsh / t : bsh;
  const fwd = 22 * rep + (16 * bsh) / t, bwd = 22 * rep + (24 * bsh) / t;
  return ((recompute === "full" ? 2 : 1) * fwd + bwd) / gpu.hbm_bandwidth;
}

// Python: recipe_kernels_seconds(model, cluster, layout, options): the recipe's kernels in place of the fused count
export function recipeKernelsSeconds(model, cluster, layout, options) {
  const gpu = cluster.gpu, m = planShape(model);
  if (!gpu.elementwise_bandwidth) return 0.0;
  const b = layout.micro_batch, sl = Math.floor(m.seq / layout.cp), h = m.hidden, t = layout.tp, rc = layout.recompute;
  const recipe = {norm: m.norm, mlp_matrices: m.mlp_matrices, rope: m.positions === "rope", dropout: m.dropout, bias: m.bias};
  const kernels = elementwiseKernels(h, ffnWidth(m) * m.top_k, kvWidth(m), t, layout.sp, recipe);
  const fixed = (gpu.layer_overhead_s || 0) * (rc === "full" ? 4 / 3 : 1);
  return elementwiseSeconds(kernels, b * sl, gpu, rc, options.compiled) - fusedActivationSeconds(b, sl, h, t, gpu, layout.sp, rc) - fixed;
}

// Python: module_recompute_seconds(model, cluster, layout, options, mlp_forward)
export function moduleRecomputeSeconds(model, cluster, layout, options, mlpForward) {
  const m = planShape(model), mods = layout.recompute === "selective" ? options.recompute_modules || [] : [], sl = layout.micro_batch * Math.floor(m.seq / layout.cp), t = layout.tp;
  let moved = mods.includes("layernorm") ? (8 * sl * m.hidden) / (layout.sp ? t : 1) : 0.0;
  if (mods.includes("mlp") || mods.includes("act")) moved += (2 * m.mlp_matrices * ffnWidth(m) * m.top_k * sl) / t;
  else if (options.mlp_saves === "inputs") moved += (2 * ffnWidth(m) * m.top_k * sl) / t;   // the product written again
  return moved / cluster.gpu.hbm_bandwidth + (mods.includes("mlp") ? mlpForward : 0.0);
}

// Python: memory_time.activation_bytes_per_layer(..., attention): flash keeps a logsumexp
// (4·a·s·b/t bytes) instead of the 5as²b/t scores
function activationsWithAttention(s, b, h, a, t, sp, recompute, attention) {
  if (recompute === "none" && fused(attention)) {
    const sbh = s * b * h, lse = (4 * a) / (h * t);
    return sp ? sbh * (34 / t + lse) : sbh * (10 + 24 / t + lse);
  }
  return activationBytesPerLayer(s, b, h, a, t, sp, recompute);
}

// Python: LOGIT_TENSORS, fp32 (b, s/cp, V/t) tensors at the loss's backward peak
export const LOGIT_TENSORS = 3;

// Python: logits_bytes(model, layout): the fp32 logits on the last stage at the loss's backward peak
export function logitsBytes(model, layout) {
  return (LOGIT_TENSORS * 4 * layout.micro_batch * Math.floor(model.seq / layout.cp) * model.vocab) / layout.tp;
}

// Python: term_activations(model, cluster, layout, options): activation bytes of the fullest stage
export function termActivations(model, cluster, layout, options) {
  const {seq: s, hidden: h, heads: a, layers: L} = model;
  const {micro_batch: b, tp: t, sp, recompute: rc, cp} = layout, att = options.attention;
  let memRc = cp > 1 && rc === "none" ? "selective" : rc;   // blockwise ring attention: no s² scores
  if (memRc === "selective" && !(options.recompute_modules || []).includes("core_attn")) memRc = "none";
  const perLayer = activationsWithAttention(s, b, h, a, t, sp, memRc, att) + shapeActivationBytes(model, layout, options.mlp_saves) - moduleActivationBytes(model, layout, options);
  let recomputed = 0.0;
  if (rc === "full") recomputed = activationsWithAttention(s, b, h, a, t, sp, cp > 1 ? "selective" : "none", att) + shapeActivationBytes(model, {...layout, recompute: "none"}, options.mlp_saves);
  const act = (perLayer * layersInFlight(L, layout, options.microbatch_group ?? null) + recomputed) / cp;
  if (!recipeOf(options).fp32_logits) return act;
  if (layout.pp === 1) return act + logitsBytes(model, layout);
  const end = stageLayers(L, layout)[1];                 // the last stage: one micro-batch and the logits
  return Math.max(act, (perLayer * end + recomputed) / cp + logitsBytes(model, layout));
}

function gemmPass(gpu, M, N, K, fp8 = false) {       // Python: _gemm_pass
  return [gemmOf(gpu, M, N, K, 1, fp8), gemmOf(gpu, M, K, N, 1, fp8) + gemmOf(gpu, K, N, M, 1, fp8)];
}

// Python: layer_dense_gemms(model, layout) -> [[M, N, K]]
export function layerDenseGemms(model, layout) {
  const m = planShape(model), t = layout.tp, h = m.hidden, bs = layout.micro_batch * Math.floor(m.seq / layout.cp);
  const f = Math.floor((m.top_k * ffnWidth(m)) / t);
  const nQkv = Math.floor(h / t) + 2 * Math.floor(h / m.heads) * Math.ceil((m.kv_heads || m.heads) / t);   // Python: kv_width_per_rank
  return [[bs, nQkv, h], [bs, h, Math.floor(h / t)], [bs, (m.mlp_matrices - 1) * f, h], [bs, h, f]];
}

// Python: fp8_gemm_delta(model, cluster, layout, options)
export function fp8GemmDelta(model, cluster, layout, options) {
  if (!options.fp8) return 0.0;
  const refwd = layout.recompute === "full" ? 2 : 1, gpu = cluster.gpu;
  let out = 0.0;
  for (const [M, N, K] of layerDenseGemms(model, layout)) {
    const [ef, eb] = gemmPass(gpu, M, N, K, options.fp8), [bf, bb] = gemmPass(gpu, M, N, K);
    out += refwd * (ef - bf) + (eb - bb);
  }
  return out;
}

// Python: compute.fp8_cast_bytes_per_token(h, f, kv, t, sp, scaling, mlp_matrices) -> [fwd, bwd]
export function fp8CastBytesPerToken(h, f, kv, t = 1, sp = false, scaling = "delayed", mlpMatrices = 2) {
  if (!FP8_SCALING.includes(scaling)) throw new Error(`fp8 ('${scaling}') must be one of ${FP8_SCALING.join(", ")}`);
  const per = FP8_CAST_BYTES[scaling], again = FP8_RECAST_BYTES[scaling], r = sp ? h / t : h;
  const fwd = 2 * r + h / t + f / t, bwd = (h + 2 * kv) / t + 2 * r + ((mlpMatrices - 1) * f) / t;
  return [per * fwd, per * bwd + again * (fwd + bwd)];
}

// Python: term_fp8_casts(model, cluster, layout, options): FP8 casts of one micro-batch, slowest stage
export function termFp8Casts(model, cluster, layout, options) {
  if (!options.fp8) return 0.0;
  const m = planShape(model), tokens = layout.micro_batch * Math.floor(m.seq / layout.cp);
  const [fwd, bwd] = fp8CastBytesPerToken(m.hidden, m.top_k * ffnWidth(m), kvWidth(m), layout.tp, layout.sp, options.fp8, m.mlp_matrices);
  const refwd = layout.recompute === "full" ? 2 : 1;
  const perLayer = (tokens * (refwd * fwd + bwd)) / cluster.gpu.hbm_bandwidth;
  return stageLayers(m.layers, layout)[0] * (perLayer + weightCastsPerMicrobatch(m, cluster, layout, options));
}

// Python: weight_casts_per_microbatch(model, cluster, layout, options): one layer's FP8 weight casts, once
// per optimizer step (Transformer Engine's is_first_microbatch), spread over the m micro-batches
export function weightCastsPerMicrobatch(model, cluster, layout, options) {
  if (!options.fp8) return 0.0;
  const weights = fp8WeightCastBytes(options.fp8) * layerDenseGemms(model, layout).reduce((acc, [, N, K]) => acc + N * K, 0);
  return weights / cluster.gpu.hbm_bandwidth / layMicrobatches(layout);
}

// Python: term_fp8_weights(model, cluster, layout, options): FP8 weight copies on the fullest stage
export function termFp8Weights(model, cluster, layout, options) {
  if (!options.fp8) return 0.0;
  const m = planShape(model), perLayer = 2 * layerDenseGemms(m, layout).reduce((acc, [, N, K]) => acc + N * K, 0);
  if (layout.zero === 3) return 2 * perLayer;
  return Math.max(...stageLayers(m.layers, layout)) * perLayer;
}

// Python: mla_core_scale(model): MLA's attention core over the h/a-wide heads priced
export function mlaCoreScale(model) {
  if (!model.kv_lora) return 1.0;
  return (model.heads * (model.qk_nope_dim + model.qk_rope_dim + model.v_head_dim)) / (2 * model.hidden);
}

// Python: term_compute(model, cluster, layout, options) -> {value (one micro-batch), layer, core}
export function termCompute(model, cluster, layout, options) {
  const m = planShape(model);
  const b = layout.micro_batch, h = m.hidden, a = m.heads, sl = Math.floor(m.seq / layout.cp), t = layout.tp, rc = layout.recompute;
  const gpu = cluster.gpu, att = options.attention;
  let lt = layerSeconds(b, sl, h, a, gpu, t, layout.sp, rc, att, recipeOf(options).accumulate_bytes).total_s;
  const parts = attentionCoreAndMlpSeconds(b, sl, h, a, gpu, t, att);
  const refwd = rc === "none" ? 1 : 2;                 // the core is recomputed
  let core = refwd * parts.core_f + parts.core_b;      // one (s/cp)² block
  if (att === "unfused") {                             // its scores' bytes
    const sb = gpu.attention_score_bytes ?? SCORE_BYTES_FWD + SCORE_BYTES_BWD;
    const fShare = (sb * SCORE_BYTES_FWD) / (SCORE_BYTES_FWD + SCORE_BYTES_BWD);
    core += ((sb + (rc !== "none" ? fShare : 0.0)) * a * sl * sl * b) / t / gpu.hbm_bandwidth;
  }
  if (layout.cp > 1) lt += (layout.cp - 1) * core;           // the other cp−1 key blocks
  const kept = rc === "selective" && !(options.recompute_modules || []).includes("core_attn");
  if (kept) lt -= parts.core_f;                        // the core kept
  const mla = mlaCoreScale(m);
  if (mla !== 1) {                                     // MLA's wider heads, every core block
    const nF = (rc === "none" ? 1 : 2) - (kept ? 1 : 0);
    lt += (mla - 1) * (nF * parts.core_f + parts.core_b + (layout.cp - 1) * core);
    core *= mla;
  }
  const nQkv = Math.floor(h / t) + 2 * Math.floor(h / a) * Math.ceil((m.kv_heads || a) / t);   // Python: kv_width_per_rank
  if (nQkv !== Math.floor((3 * h) / t)) {              // GQA's narrower QKV GEMM
    const [gf, gb] = gemmPass(gpu, b * sl, nQkv, h), [mf, mb] = gemmPass(gpu, b * sl, Math.floor((3 * h) / t), h);
    lt += (rc === "full" ? 2 : 1) * (gf - mf) + (gb - mb);
  }
  const routed = m.top_k * moeLoad(m, layout, options) + (m.shared_experts || 0);   // busiest rank's + shared
  const scale = (routed * m.mlp_matrices * ffnWidth(m)) / (2 * 4 * h);   // active MLP / GPT's 8h²
  if (scale !== 1) lt += (scale - 1) * ((rc === "full" ? 2 : 1) * parts.mlp_f + parts.mlp_b);
  lt += moduleRecomputeSeconds(m, cluster, layout, options, scale * parts.mlp_f);
  lt += recipeKernelsSeconds(m, cluster, layout, options) + fp8GemmDelta(m, cluster, layout, options);
  const [mid, end] = stageLayers(m.layers, layout);      // the slowest stage
  const logits = logitsSeconds(b, sl, h, m.vocab, gpu, t);
  return {value: Math.max(mid * lt, end * lt + logits), layer: lt, core};
}

// Python: term_tp(model, cluster, layout, options) -> {value: seconds per micro-batch, link}
export function termTp(model, cluster, layout, options) {
  const t = layout.tp;
  const actBytes = layout.micro_batch * Math.floor(model.seq / layout.cp) * model.hidden * 2;
  const [ar, name] = dpAllreduceSeconds(actBytes, t, 1, cluster);   // ring in a node, multi-NIC across
  let perLayer = tpCollectives(t, layout.sp, layout.recompute) * ar;
  if (options.tp_overlap && layout.sp && t > 1) {
    perLayer = tpOverlapExposed(perLayer, layerGemmSeconds(model, cluster, layout, options), t);
    perLayer += tpOverlapCost(model, cluster, layout, options);
  }
  return {value: stageLayers(model.layers, layout)[0] * perLayer, link: name};
}

// Python: TP_OVERLAP_PIPELINE: (splits, SMs reserved) of the reduce-scatter overlaps (userbuffers'
// pipeline method in NVIDIA's Llama 3.1 405B recipe)
export const TP_OVERLAP_PIPELINE = {proj: [4, 24], fc2: [4, 8]};

// Python: split_gemm_extra(gpu, M, N, K, pieces, reserved, fp8): the GEMM as pieces of ⌈M/pieces⌉
// rows on SMs less reserved, each by the roofline + one launch, less the whole GEMM
export function splitGemmExtra(gpu, M, N, K, pieces, reserved = 0, fp8 = false) {
  let rate = fp8 ? fp8Peak(gpu) * FP8_GEMM_EFFICIENCY * (fp8 === "rowwise" ? FP8_ROWWISE_GEMM_RATIO : 1) : gpu.peak;
  rate *= gpu.gemm_efficiency;
  const size = fp8 ? 1 : 2, latency = gpu.gemm_latency_s || 0.0;
  const one = (rows) => latency + Math.max((2.0 * rows * N * K) / rate, ((rows * K + K * N + rows * N) * size) / gpu.hbm_bandwidth);
  return (pieces * one(Math.ceil(M / pieces)) * gpu.sms) / (gpu.sms - reserved) - one(M);
}

// Python: tp_overlap_cost(model, cluster, layout, options): what TP overlap adds to the GEMMs, per layer
export function tpOverlapCost(model, cluster, layout, options) {
  const t = layout.tp;
  if (!(options.tp_overlap && layout.sp && t > 1)) return 0.0;
  const gpu = cluster.gpu, fp8 = options.fp8 || false;
  const [qkv, proj, fc1, fc2] = layerDenseGemms(model, layout);
  let forward = splitGemmExtra(gpu, ...qkv, t, 0, fp8) + splitGemmExtra(gpu, ...fc1, t, 0, fp8);
  forward += splitGemmExtra(gpu, ...proj, ...TP_OVERLAP_PIPELINE.proj, fp8) + splitGemmExtra(gpu, ...fc2, ...TP_OVERLAP_PIPELINE.fc2, fp8);
  const backward = [proj, fc2].reduce((acc, [M, N, K]) => acc + splitGemmExtra(gpu, M, K, N, t, 0, fp8), 0);
  return (layout.recompute === "full" ? 2 : 1) * forward + backward;
}

// Python: tp_overlap_exposed(comm, gemm, t): one chunk, then what the GEMM does not cover
export function tpOverlapExposed(comm, gemm, t) {
  return comm / t + Math.max(0.0, (comm * (t - 1)) / t - gemm);
}

// Python: layer_gemm_seconds(model, cluster, layout, options): one layer's dense GEMMs, fwd (x2 full) + bwd
export function layerGemmSeconds(model, cluster, layout, options) {
  const refwd = layout.recompute === "full" ? 2 : 1;
  let out = 0.0;
  for (const [M, N, K] of layerDenseGemms(model, layout)) {
    const [f, b] = gemmPass(cluster.gpu, M, N, K, options.fp8 || false);
    out += refwd * f + b;
  }
  return out;
}

// Python: term_pp(model, cluster, layout, options) -> {value: seconds per micro-batch, link}
export function termPp(model, cluster, layout) {
  const {tp: t, cp, dp: d, pp: p} = layout;
  const ppLink = t * cp * d * p <= cluster.gpus_per_node ? cluster.intra : cluster.inter;
  const actBytes = layout.micro_batch * Math.floor(model.seq / cp) * model.hidden * 2;
  if (p === 1) return {value: 0.0, link: "-"};
  return {value: 2 * layout.chunks * (ppLink.alpha + actBytes / t / ppLink.bandwidth), link: ppLink.name};
}

export const CP_ALGORITHMS = ["ring", "all-gather"];

// Python: term_cp(model, cluster, layout, options, compute): ring K/V not hidden by the block compute
// (compute.core), or the all-gather CP collectives (exposed), per micro-batch
export function termCp(model, cluster, layout, options, compute) {
  const {cp, tp: t} = layout, lp = stageLayers(model.layers, layout)[0];
  if (cp === 1) return 0.0;
  const core = compute.core;
  const kvHeads = model.kv_heads || model.heads;      // ⌈kv/t⌉ K/V heads per TP rank
  const hKv = Math.floor(model.hidden / model.heads) * Math.ceil(kvHeads / t);   // Python: kv_width_per_rank
  const refwd = layout.recompute === "full" ? 2 : 1;
  if (options.cp_algorithm === "all-gather") {
    const colls = allgatherCollectivesPerLayer(layout.micro_batch, model.seq, hKv, cp);
    const sum = (list) => list.reduce((acc, [, S]) => acc + dpAllreduceSeconds(S, cp, t, cluster)[0] / 2, 0);
    return lp * (refwd * sum(colls.forward) + sum(colls.backward));
  }
  const ringBytes = ringSentBytesPerLayer(layout.micro_batch, model.seq, hKv, cp);
  const cpLink = t * cp <= cluster.gpus_per_node ? cluster.intra : cluster.inter;
  const kv = ringBytes.forward / (cp - 1);
  const dkv = (ringBytes.backward - ringBytes.forward) / cp;
  const comm = (refwd * (cp - 1) + (cp - 1)) * (cpLink.alpha + kv / cpLink.bandwidth) + cp * (cpLink.alpha + dkv / cpLink.bandwidth);
  return lp * Math.max(0.0, comm - cp * core);
}

// Python: term_ep(model, cluster, layout, options, compute) -> {value (exposed), total, hidden}: MoE
// all-to-alls per micro-batch, node-limited, under another micro-batch's compute with ep_overlap
export function termEp(model, cluster, layout, options, compute) {
  const m = planShape(model);
  const {ep, tp: t} = layout;
  if (ep === 1) return {value: 0.0, total: 0.0, hidden: 0.0};
  let rows = (m.top_k * layout.micro_batch * Math.floor(m.seq / layout.cp) * m.hidden * 2) / (layout.sp ? t : 1);
  rows *= moeLoad(m, layout, options);
  const nA2a = layout.recompute === "full" ? 6 : 4;
  const total = moeLayers(m, layout) * nA2a * epAllToAllSeconds(rows, ep, cluster, m.node_limit || 0, m.top_k);
  const hidden = options.ep_overlap && layMicrobatches(layout) > 1 ? Math.min(total, compute.value) : 0.0;
  return {value: total - hidden, total, hidden};
}

// Python: ep_all_to_all_seconds(nbytes, ep, cluster, node_limit, top_k): on-node peers over NVLink,
// off-node over each GPU's NIC, at the same time; node-limited: min(K, M)/K of the off-node
// bytes on the NIC, (g − 1)/g of all of them forwarded over NVLink
export function epAllToAllSeconds(nbytes, ep, cluster, nodeLimit = 0, topK = 1) {
  const g = cluster.gpus_per_node;
  if (ep <= g) return allToAllTime(nbytes, ep, cluster.intra.alpha, cluster.intra.bandwidth);
  const on = Math.min(ep, g);
  let nearShare = (on - 1) / ep, farShare = (ep - on) / ep;
  if (nodeLimit) [nearShare, farShare] = [(g - 1) / g, (farShare * Math.min(topK, nodeLimit)) / topK];
  const near = (on - 1) * cluster.intra.alpha + (nearShare * nbytes) / cluster.intra.bandwidth;
  const far = (ep - on) * cluster.inter.alpha + (farShare * nbytes) / cluster.inter.bandwidth;
  return Math.max(near, far);
}

// --- mixture of experts (Python: minipar.cost.planner.moe_terms) ---------------------------

export const EP_COMM_SMS = 20, ROUTER_BYTES_PER_EXPERT = 16, ROUTER_KERNELS = 3;   // Python: moe_terms

// Python: moe_load(model, layout, options): the busiest EP rank's tokens over the mean (dropless, or capped)
export function moeLoad(model, layout, options) {
  if (!(model.experts > 1) || layout.ep === 1) return 1.0;
  if (options.moe_capacity === null || options.moe_capacity === undefined) return options.moe_imbalance;
  return Math.min(options.moe_imbalance, options.moe_capacity);
}

// Python: moe_layers(model, layout): MoE layers on the slowest stage
export function moeLayers(model, layout) {
  const lp = stageLayers(model.layers, layout)[0];
  return model.experts > 1 ? Math.min(lp, model.layers - (model.dense_layers || 0)) : 0;
}

// Python: routed_tokens(model, layout): b·s/cp, ÷ t with SP
export function routedTokens(model, layout) {
  const tokens = layout.micro_batch * Math.floor(model.seq / layout.cp);
  return layout.sp ? Math.floor(tokens / layout.tp) : tokens;
}

// Python: memory_bound_seconds(nbytes, kernels, gpu, compiled)
export function memoryBoundSeconds(nbytes, kernels, gpu, compiled) {
  const bw = gpu.elementwise_bandwidth || gpu.hbm_bandwidth;
  const issue = compiled ? 0.0 : kernels * (gpu.kernel_issue_s || 0);
  return Math.max(issue, nbytes / bw);
}

const movePasses = (layout) => (layout.recompute === "full" ? 2 : 1);   // Python: moe_terms._passes

// Python: term_router(model, cluster, layout, options): the router's GEMM and element-wise kernels
export function termRouter(model, cluster, layout, options) {
  const m = planShape(model);
  if (!(m.experts > 1)) return 0.0;
  const T = routedTokens(m, layout), E = m.experts, gpu = cluster.gpu;
  const gemm = gemmOf(gpu, T, E, m.hidden);
  const back = gemmOf(gpu, T, m.hidden, E) + gemmOf(gpu, m.hidden, E, T);
  const moved = T * (ROUTER_BYTES_PER_EXPERT * E + 12 * m.top_k);
  const one = memoryBoundSeconds(moved, ROUTER_KERNELS, gpu, options.compiled);
  return moeLayers(m, layout) * (movePasses(layout) * (gemm + one) + back + one);
}

// Python: permute_bytes(model, layout, options): permute + unpermute bytes per MoE layer and forward
export function permuteBytes(model, layout, options) {
  const T = routedTokens(model, layout), K = model.top_k, h = model.hidden;
  let out = 2 * (1 + K) * T * h * 2;
  if (layout.ep > 1) out += 2 * 2 * K * T * moeLoad(model, layout, options) * h * 2;
  return out;
}

// Python: term_permute(model, cluster, layout, options)
export function termPermute(model, cluster, layout, options) {
  const m = planShape(model);
  if (!(m.experts > 1)) return 0.0;
  const one = memoryBoundSeconds(permuteBytes(m, layout, options), layout.ep > 1 ? 4 : 2, cluster.gpu, options.compiled);
  return moeLayers(m, layout) * (movePasses(layout) + 1) * one;
}

// Python: grouped_gemm_half_rows(gpu, fp8): r₀ = b·P·η/(2W)
export function groupedGemmHalfRows(gpu, fp8 = false) {
  return ((fp8 ? 1 : 2) * (fp8 ? fp8Peak(gpu) : gpu.peak) * gpu.gemm_efficiency) / (2 * gpu.hbm_bandwidth);
}

// Python: grouped_gemm_efficiency(rows, gpu, fp8): r/(r + r₀)
export function groupedGemmEfficiency(rows, gpu, fp8 = false) {
  return rows > 0 ? rows / (rows + groupedGemmHalfRows(gpu, fp8)) : 1.0;
}

// Python: term_grouped_gemm(model, cluster, layout, options) -> {value, rows, efficiency}
export function termGroupedGemm(model, cluster, layout, options) {
  const m = planShape(model);
  if (!(m.experts > 1)) return {value: 0.0, rows: 0.0, efficiency: 1.0};
  const etp = expertGrid(layout)[0], eLocal = Math.floor(m.experts / layout.ep);
  const rows = layout.ep > 1
    ? (m.top_k * routedTokens(m, layout) * moeLoad(m, layout, options) * layout.ep) / m.experts
    : (m.top_k * layout.micro_batch * Math.floor(m.seq / layout.cp)) / m.experts;
  const one = m.mlp_matrices * m.hidden * ffnWidth(m);   // one expert's weights
  const extra = Math.max(0.0, (eLocal * one) / etp - (m.top_k * one) / layout.tp);
  const perLayer = ((movePasses(layout) + 2) * (options.fp8 ? 1 : 2) * extra) / cluster.gpu.hbm_bandwidth;
  return {value: moeLayers(m, layout) * perLayer, rows, efficiency: groupedGemmEfficiency(rows, cluster.gpu, Boolean(options.fp8))};
}

// Python: term_ep_overlap(model, cluster, layout, options, ep): the SMs the overlapped all-to-alls hold
export function termEpOverlap(model, cluster, layout, options, ep) {
  if (!options.ep_overlap) return 0.0;
  return ep.hidden * Math.min(1.0, EP_COMM_SMS / cluster.gpu.sms);
}

export const DUALPIPE_W = 1 / 3;   // Python: moe_terms.DUALPIPE_W, W over F + B (B = 2F, W = F)

// Python: dualpipe_bubble(layout): DeepSeek-V3 Table 2's (p/2 - 1)(F&B + B - 3W), F&B = F + B
export function dualpipeBubble(layout) {
  const p = layout.pp, m = layMicrobatches(layout);
  if (layout.chunks !== 1 || p % 2 || m % 2) throw new Error(`DualPipe needs p (${p}) and microbatches m (${m}) even and v (${layout.chunks}) = 1`);
  const [fb, b, w] = [1.0, 2 * DUALPIPE_W, DUALPIPE_W];
  const r = ((p / 2 - 1) * (fb + b - 3 * w)) / m;
  return [r, r / (1 + r)];
}

// Python: term_dualpipe(model, cluster, layout, options, states, fp8_weights, activations): a second copy of the stage's states, 1/p more activations
export function termDualpipe(model, cluster, layout, options, states, fp8Weights, activations) {
  if (!options.dualpipe) return 0.0;
  dualpipeBubble(layout);
  return states + fp8Weights + activations / layout.pp;
}

// Python: term_zero3_exposed(model, cluster, layout, options, compute) -> {value (exposed), per_layer, link}
export function termZero3Exposed(model, cluster, layout, options, compute) {
  if (layout.zero !== 3) return {value: 0.0, per_layer: 0.0, link: "-"};
  const layer = compute.layer;
  const t = layout.tp, dcp = layout.dp * layout.cp, lp = stageLayers(model.layers, layout)[0];
  const sp = stageParams(model, layout);
  const [, edp, stride] = expertGrid(layout);
  const groups = layout.ep === 1 ? [[sp.layer / t, dcp, t]] : [[sp.dense_layer / t, dcp, t], [sp.expert_layer / layout.ep, edp, stride]];
  let gather = 0.0, scatter = 0.0, name = "-";
  groups.forEach(([x, n, k], i) => {
    const [g, link] = zero3CollectiveSeconds(2 * x, n, k, cluster, options.zero3_collectives);
    gather += g;
    scatter += zero3CollectiveSeconds(options.grad_reduce_bytes * x, n, k, cluster, options.zero3_collectives)[0];
    if (i === 0) name = link;
  });
  if (!reshards(layout, options)) {                           // gathered once per step, reduced once per step
    const m = layMicrobatches(layout);
    const step = options.zero3_overlap ? lp * Math.max(0.0, gather + scatter - layer) + gather : lp * (gather + scatter);
    return {value: step / m, per_layer: (gather + scatter) / m, link: name};
  }
  const commLayer = zero3Gathers(layout.recompute, options.zero3_ac_inside_unit) * gather + scatter;
  const exposed = options.zero3_overlap ? lp * Math.max(0.0, commLayer - layer) + gather : lp * commLayer;
  return {value: exposed, per_layer: commLayer, link: name};
}

// Python: term_bubble(layout) -> [relative to ideal, fraction of the step]
export function termBubble(layout) {
  if (layout.pp === 1) return [0.0, 0.0];
  const r = (layout.pp - 1) / (layout.chunks * layMicrobatches(layout));   // any m >= p (flexible schedule)
  return [r, r / (1 + r)];
}

// Python: dp_reduce_seconds(psi, n, split, k, zero, cluster, options) -> [reduction, 16-bit parameter all-gather, link]
export function dpReduceSeconds(psi, n, split, k, zero, cluster, options) {
  const [ar, name] = dpAllreduceSeconds((options.grad_reduce_bytes * psi) / split, n, k, cluster);
  if (zero === 1 || zero === 2) return [ar / 2, dpAllreduceSeconds((2 * psi) / split, n, k, cluster)[0] / 2, name];
  return [ar, 0.0, name];
}

// Python: dp_windows(layout, options, compute) -> [reduction window, gather window]
export function dpWindows(layout, options, compute) {
  const overlap = (layout.pp === 1 && options.dp_overlap) || options.overlap_grad_reduce;
  return [overlap ? (2 / 3) * compute.value : 0.0, options.overlap_param_gather ? compute.value / 3 : 0.0];
}

// Python: dp_exposed_seconds(rs, ag, window, gather_window, options)
export function dpExposedSeconds(rs, ag, windowS, gatherWindow, options) {
  if (options.overlap_param_gather) return Math.max(0.0, rs - windowS) + Math.max(0.0, ag - gatherWindow);
  return Math.max(0.0, rs + ag - windowS);
}

// Python: term_dp_exposed(model, cluster, layout, options, compute, zero3_exposed) -> {value (exposed), total, link, reduce, gather}
export function termDpExposed(model, cluster, layout, options, compute, zero3Exposed) {
  const {tp: t, zero, ep} = layout, dcp = layout.dp * layout.cp, z3 = zero3Exposed;
  if (zero === 3) return {value: 0.0, total: layMicrobatches(layout) * stageLayers(model.layers, layout)[0] * z3.per_layer, link: z3.link, reduce: 0.0, gather: 0.0};
  const sp = stageParams(model, layout);
  const [rs, ag, name] = dpReduceSeconds(ep === 1 ? sp.stage : sp.dense, dcp, t, t, zero, cluster, options);
  const [windowS, gatherWindow] = dpWindows(layout, options, compute);
  return {value: dpExposedSeconds(rs, ag, windowS, gatherWindow, options), total: rs + ag, link: name, reduce: rs, gather: ag};
}

// Python: term_edp_exposed(model, cluster, layout, options, compute, dp_exposed): the experts over the EDP group
export function termEdpExposed(model, cluster, layout, options, compute, dpExposed) {
  if (layout.ep === 1 || layout.zero === 3) return {value: 0.0, total: 0.0, link: "-", reduce: 0.0, gather: 0.0};
  const [etp, edp, stride] = expertGrid(layout);
  const [rs, ag, name] = dpReduceSeconds(stageParams(model, layout).expert, edp, etp, stride, layout.zero, cluster, options);
  let [windowS, gatherWindow] = dpWindows(layout, options, compute);
  const dense = dpExposed;
  if (options.overlap_param_gather) [windowS, gatherWindow] = [Math.max(0.0, windowS - dense.reduce), Math.max(0.0, gatherWindow - dense.gather)];
  else windowS = Math.max(0.0, windowS - dense.reduce - dense.gather);
  return {value: dpExposedSeconds(rs, ag, windowS, gatherWindow, options), total: rs + ag, link: name, reduce: rs, gather: ag};
}

// Python: term_embedding(model, cluster, layout, options): tied-embedding gradient, first <-> last stage
export function termEmbedding(model, cluster, layout, options) {
  const {tp: t, cp, dp: d, pp: p} = layout;
  if (p === 1 || !planShape(model).tied) return 0.0;
  const link = t * cp * d * p > cluster.gpus_per_node ? cluster.inter : cluster.intra;
  return ring("all-reduce", 2, (options.grad_reduce_bytes * model.vocab * model.hidden) / t, link);
}

// Python: term_optimizer(model, cluster, layout, options): the Adam step on this rank's shard
export function termOptimizer(model, cluster, layout, options) {
  const dcp = layout.dp * layout.cp, t = layout.tp, sp = stageParams(model, layout);
  let shard;
  if (layout.ep === 1) shard = (layout.zero >= 1 ? sp.dense / dcp + sp.expert / dcp : sp.stage) / t;
  else {
    const [etp, edp] = expertGrid(layout), z = layout.zero >= 1;
    shard = sp.dense / t / (z ? dcp : 1) + sp.expert / etp / (z ? edp : 1);
  }
  return optimizerSeconds(shard, cluster.gpu, recipeOf(options).adam_bytes);
}

// BEGIN TERMS (generated from minipar/cost/planner/term_table.json by `python -m minipar.cost.planner.term_table`; do not edit)
export const TERMS = [{"name": "compute", "where": "slot", "unit": "s", "column": null, "group": "compute", "needs": [], "doc": "the layers and the output layer of one micro-batch"}, {"name": "fp8_casts", "where": "slot", "unit": "s", "column": "FP8 cast", "group": "compute", "needs": [], "doc": "FP8 casts of the GEMMs' inputs and gradients, and of the weights once per optimizer step"}, {"name": "tp", "where": "slot", "unit": "s", "column": "TP", "group": "TP communication", "needs": [], "doc": "tensor-parallel collectives on the critical path, and what overlapping them costs the GEMMs"}, {"name": "pp", "where": "slot", "unit": "s", "column": "PP", "group": "PP, CP and EP communication", "needs": [], "doc": "pipeline sends across stage boundaries"}, {"name": "cp", "where": "slot", "unit": "s", "column": "CP ring", "group": "PP, CP and EP communication", "needs": ["compute"], "doc": "context-parallel K/V traffic not hidden by the block compute"}, {"name": "ep", "where": "slot", "unit": "s", "column": "EP a2a", "group": "PP, CP and EP communication", "needs": ["compute"], "doc": "MoE all-to-alls not hidden under another micro-batch's compute"}, {"name": "ep_overlap", "where": "slot", "unit": "s", "column": "EP ovl", "group": "PP, CP and EP communication", "needs": ["ep"], "doc": "the compute the overlapped all-to-alls slow down (the SMs they hold)"}, {"name": "router", "where": "slot", "unit": "s", "column": "Router", "group": "MoE router and permute", "needs": [], "doc": "the MoE router's GEMM, scores and top-k"}, {"name": "permute", "where": "slot", "unit": "s", "column": "Permute", "group": "MoE router and permute", "needs": [], "doc": "permute and unpermute of the routed tokens around the all-to-alls"}, {"name": "grouped_gemm", "where": "slot", "unit": "s", "column": "GG rows", "group": "expert GEMMs at few rows", "needs": [], "doc": "the grouped expert GEMMs' weight reads at few rows per expert, beyond the dense pricing"}, {"name": "zero3_exposed", "where": "slot", "unit": "s", "column": "ZeRO-3", "group": "DP and ZeRO communication", "needs": ["compute"], "doc": "ZeRO-3 gathers and reduce-scatters not hidden by prefetching"}, {"name": "dp_exposed", "where": "step", "unit": "s", "column": "DP exp", "group": "DP and ZeRO communication", "needs": ["compute", "zero3_exposed"], "doc": "the data-parallel reduction not hidden under the last backward (with ep > 1 the dense weights')"}, {"name": "edp_exposed", "where": "step", "unit": "s", "column": "EDP exp", "group": "DP and ZeRO communication", "needs": ["compute", "dp_exposed"], "doc": "the experts' gradient reduction over the expert-data-parallel group (ep > 1), not hidden under what the dense reduction left of the last backward"}, {"name": "embedding", "where": "step", "unit": "s", "column": null, "group": "embedding and optimizer", "needs": [], "doc": "the tied embedding's gradient all-reduce, first and last stage"}, {"name": "optimizer", "where": "step", "unit": "s", "column": null, "group": "embedding and optimizer", "needs": [], "doc": "the Adam step on this rank's shard"}, {"name": "states", "where": "memory", "unit": "B", "column": null, "group": "model states", "needs": [], "doc": "model states of the fullest stage"}, {"name": "fp8_weights", "where": "memory", "unit": "B", "column": null, "group": "model states", "needs": [], "doc": "FP8 copies of the linear weights"}, {"name": "activations", "where": "memory", "unit": "B", "column": null, "group": "activations", "needs": [], "doc": "activations of the fullest stage"}, {"name": "dualpipe", "where": "memory", "unit": "B", "column": null, "group": "model states", "needs": ["states", "fp8_weights", "activations"], "doc": "DualPipe's second copy of the stage's model states and its 1/p more activations"}];
const TERM_FUNCTIONS = {compute: termCompute, fp8_casts: termFp8Casts, tp: termTp, pp: termPp, cp: termCp, ep: termEp, ep_overlap: termEpOverlap, router: termRouter, permute: termPermute, grouped_gemm: termGroupedGemm, zero3_exposed: termZero3Exposed, dp_exposed: termDpExposed, edp_exposed: termEdpExposed, embedding: termEmbedding, optimizer: termOptimizer, states: termStates, fp8_weights: termFp8Weights, activations: termActivations, dualpipe: termDualpipe};
// END TERMS

const termValue = (r) => (typeof r === "number" ? r : r.value);   // Python: three_d_terms._value

// Python: breakdown(model, cluster, layout, options) -> StepBreakdown.as_dict(): every TERMS row in order,
// term<Name>(model, cluster, layout, options, ...needs) with the results of the terms its row needs
export function planBreakdown(model, cluster, layout, options) {
  const done = {};
  for (const term of TERMS) done[term.name] = TERM_FUNCTIONS[term.name](model, cluster, layout, options, ...term.needs.map((n) => done[n]));
  const [r, f] = options.dualpipe ? dualpipeBubble(layout) : termBubble(layout);   // DualPipe's, or 1F1B's
  const values = Object.fromEntries(TERMS.map((term) => [term.name, termValue(done[term.name])]));
  return {
    microbatches: layMicrobatches(layout), bubble_relative: r, bubble_fraction: f,
    memory_limit: cluster.gpu.memory_bytes * (1 - options.headroom), margin_limit: cluster.gpu.memory_bytes * (1 - optMargin(options)), dp: done.dp_exposed.total + done.edp_exposed.total,
    ...values, tp_link: done.tp.link, pp_link: done.pp.link, dp_link: done.dp_exposed.link,
  };
}

// Python: three_d.terms(model, cluster, layout, **options): check, then the breakdown
export function planTerms(model, cluster, layout, options = {}) {
  model = planShape(model);
  layout = {chunks: 1, recompute: "selective", sp: false, zero: 1, cp: 1, ep: 1, split: "even", ...layout};   // Python: Layout's defaults
  planCheck(model, cluster, layout);
  const o = resolvedOptions(planOptions(options), attentionFor(model, cluster.gpu.name), precisionFor(cluster.gpu.name));
  return planBreakdown(model, cluster, layout, o);
}

// Python: StepBreakdown.per_step(term)
function perStep(br, term) {
  if (term.where === "step") return br[term.name];
  return term.name === "compute" ? br.microbatches * br.compute : br.microbatches * (1 + br.bubble_relative) * br[term.name];
}

// Python: three_d.evaluate(model, cluster, layout, options).as_dict(): the layout, its terms (the
// TERMS table: <term>_seconds per step, <term>_bytes), the step and MFU
export function planEvaluate(model, cluster, layout, options = {}) {
  model = planShape(model);
  layout = {chunks: 1, recompute: "selective", sp: false, zero: 1, cp: 1, ep: 1, split: "even", ...layout};
  const br = planTerms(model, cluster, layout, options);
  const {layers: L, hidden: h, seq: s, vocab: V} = model, B = layout.global_batch;
  const sum = (where) => TERMS.filter((t) => t.where === where).reduce((acc, t) => acc + br[t.name], 0);
  const step = br.microbatches * sum("slot") * (1 + br.bubble_relative) + sum("step");
  const n = layout.tp * layout.cp * layout.pp * layout.dp;
  const extra = 2 * L * B * s * (model.top_k * model.mlp_matrices * ffnWidth(model) * h - 8 * h * h + 2 * h * (kvWidth(model) - h));
  const modelFlops = flopsPerIteration(B, s, L, h, V, "none") + 3 * extra;   // Python: three_d.model_flops
  const hwFlops = flopsPerIteration(B, s, L, h, V, layout.recompute) + (layout.recompute === "full" ? 4 : 3) * extra;
  const total = sum("memory");
  const out = {tp: layout.tp, pp: layout.pp, dp: layout.dp, micro_batch: layout.micro_batch, chunks: layout.chunks, recompute: layout.recompute, sp: layout.sp, zero: layout.zero, cp: layout.cp, ep: layout.ep, split: layout.split,
    microbatches: br.microbatches, bytes_per_gpu: total, model_state_bytes: br.states, activation_bytes: br.activations,
    fits: total <= br.memory_limit, memory_limit: br.memory_limit, margin_limit: br.margin_limit,
    tight: total <= br.memory_limit && total > br.margin_limit, bubble: br.bubble_fraction, bubble_relative: br.bubble_relative};
  for (const t of TERMS) out[t.where === "memory" ? `${t.name}_bytes` : `${t.name}_seconds`] = t.where === "memory" ? br[t.name] : perStep(br, t);
  return {...out, dp_seconds: br.dp, step_seconds: step, mfu: modelFlops / (step * n * cluster.peak), hfu: hwFlops / (step * n * cluster.peak),
    tp_link: br.tp_link, pp_link: br.pp_link, dp_link: br.dp_link};
}

// Python: term_table.BUBBLE and TIME_GROUPS: the parts of a step, from the table's group column
export const BUBBLE = "pipeline bubble";
export const TIME_GROUPS = [...new Set(TERMS.filter((t) => t.where !== "memory").flatMap((t) => (t.name === "compute" ? [t.group, BUBBLE] : [t.group])))];

// Python: Config.group_seconds() (StepBreakdown.group_seconds): seconds per step of each part of
// TIME_GROUPS from planEvaluate's result, the compute's bubble apart; they sum to the step
export function planGroupSeconds(c) {
  const out = Object.fromEntries(TIME_GROUPS.map((g) => [g, 0]));
  for (const t of TERMS) if (t.where !== "memory") out[t.group] += c[`${t.name}_seconds`];
  out[BUBBLE] = c.compute_seconds * c.bubble_relative;
  return out;
}

// Python: three_d.dollars_per_million_tokens(step_seconds, gpus, tokens_per_step, dollars_per_gpu_hour)
export function dollarsPerMillionTokens(stepSeconds, gpus, tokensPerStep, dollarsPerGpuHour) {
  if (Math.min(stepSeconds, gpus, tokensPerStep) <= 0 || dollarsPerGpuHour < 0) {
    throw new Error("step_seconds, gpus, tokens_per_step must be > 0 and the price >= 0");
  }
  return stepSeconds * gpus / 3600 / tokensPerStep * dollarsPerGpuHour * 1e6;
}
