// minipar-requires: collectives
// Context-parallel chapter: JavaScript twins of minipar.cost.chapters.context_parallel and of
// minipar.widgets.context_parallel.cp_layer_model; the cp-layer explorer. Sources: Liu et al.
// 2023 (ring: cp−1 K/V blocks forward, overlap when block compute ≥ transfer; dK/dV accumulators
// in float32 as ring-flash-attention circulates them, Transformer Engine's in bf16); Dubey et al. 2024
// §3.3.2 (all-gather CP); Jacobs et al. 2023 (Ulysses: 2 all-to-alls per layer each way, QKV
// packed); Korthikanti et al. 2022 Table 2 (34·sbh per layer, no s² term with blockwise
// attention); Dao 2023 (FlashAttention-2's variable-length kernels: a causal document mask whose
// masked entries are skipped, for packed documents). Parity with Python:
// tests/test_context_parallel_explorer.py.

const CP_LAYOUTS = ["contiguous", "zigzag", "striped"];
const CP_DIAGONALS = ["half", "whole"];

// Loop iterations of the per-rank and per-step models (pairsPerRank, stepMaxima,
// documentAttentionTimes) since the last cpWorkReset(), so a test can check that the largest
// accepted inputs cost a bounded amount of work without timing it.
const cpWork = {iterations: 0};

export function cpWorkReset() {
  cpWork.iterations = 0;
  return 0;
}

export function cpWorkCount() {
  return cpWork.iterations;
}

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
  const n = layout === "zigzag" ? 2 * cp : cp;
  if (s % n) throw new Error(`sequence length s (${s}) must be divisible by ${layout === "zigzag" ? "2·cp" : "cp"} (${n})`);
}

// Python: AttentionShape(b, s, h, cp, layout, causal, diagonal, bytes_per_elem, h_kv, a_kv), the
// shape the forward-time models share: a plain object with the same field names, checked and
// completed here (h_kv null: h); the forward-time models below take one (checked again, it comes
// back the same).
export function attentionShape({b, s, h, cp, layout = "zigzag", causal = true, diagonal = "half",
                                bytes_per_elem = 2, h_kv = null, a_kv = null}) {
  checkShape(s, cp, layout);
  h_kv = h_kv === null ? h : h_kv;
  cpCheck([["b", b], ["h", h], ["h_kv", h_kv]]);
  if (a_kv !== null) cpCheck([["a_kv", a_kv]]);
  cpCheckDiagonal(diagonal);
  const chunk = s / (layout === "zigzag" ? 2 * cp : cp);
  return {b, s, h, cp, layout, causal, diagonal, bytes_per_elem, h_kv, a_kv, chunk,
          kv_block: kvBlockBytes(b, s, h_kv, cp, bytes_per_elem)};
}

// Python: kv_block_bytes(b, s, h_kv, cp, bytes_per_elem)
export function kvBlockBytes(b, s, hKv, cp, bytesPerElem = 2) {
  cpCheck([["b", b], ["s", s], ["h_kv", hKv], ["cp", cp]]);
  return 2 * b * (s / cp) * hKv * bytesPerElem;
}

// Python: accum_bytes(bytes_per_elem, accum_bytes_per_elem)
// Default max(e, 4): the float32 of some ring-flash implementations; Transformer Engine keeps
// dK/dV in bf16 (pass 2).
export function accumBytes(bytesPerElem = 2, accumBytesPerElem = null) {
  if (accumBytesPerElem === null) return Math.max(bytesPerElem, 4);
  if (!(accumBytesPerElem > 0)) throw new Error(`accum_bytes_per_elem (${accumBytesPerElem}) must be > 0`);
  return accumBytesPerElem;
}

// Python: ring_sent_bytes_per_layer(b, s, h_kv, cp, bytes_per_elem, accum_bytes_per_elem)
export function ringSentBytesPerLayer(b, s, hKv, cp, bytesPerElem = 2, accumBytesPerElem = null) {
  const kv = kvBlockBytes(b, s, hKv, cp, bytesPerElem);
  const dkv = kvBlockBytes(b, s, hKv, cp, accumBytes(bytesPerElem, accumBytesPerElem));
  if (cp === 1) return {forward: 0.0, backward: 0.0, total: 0.0};
  const fwd = (cp - 1) * kv;
  const bwd = (cp - 1) * kv + cp * dkv;
  return {forward: fwd, backward: bwd, total: fwd + bwd};
}

// Python: allgather_collectives_per_layer(b, s, h_kv, cp, bytes_per_elem, accum_bytes_per_elem)
export function allgatherCollectivesPerLayer(b, s, hKv, cp, bytesPerElem = 2, accumBytesPerElem = null) {
  const kv = kvBlockBytes(b, s, hKv, cp, bytesPerElem);
  const dkv = kvBlockBytes(b, s, hKv, cp, accumBytes(bytesPerElem, accumBytesPerElem));
  if (cp === 1) return {forward: [], backward: []};
  return {forward: [["all-gather", cp * kv]],
          backward: [["all-gather", cp * kv], ["reduce-scatter", cp * dkv]]};
}

// Python: allgather_sent_bytes_per_layer(b, s, h_kv, cp, bytes_per_elem, accum_bytes_per_elem)
export function allgatherSentBytesPerLayer(b, s, hKv, cp, bytesPerElem = 2, accumBytesPerElem = null) {
  const c = allgatherCollectivesPerLayer(b, s, hKv, cp, bytesPerElem, accumBytesPerElem);
  let fwd = 0, bwd = 0;
  for (const [, S] of c.forward) fwd += ((cp - 1) / cp) * S;
  for (const [, S] of c.backward) bwd += ((cp - 1) / cp) * S;
  return {forward: fwd, backward: bwd, total: fwd + bwd};
}

// Python: ring_sends_per_layer(cp)
export function ringSendsPerLayer(cp) {
  cpCheck([["cp", cp]]);
  return {forward: cp - 1, backward: cp > 1 ? 2 * cp - 1 : 0};
}

// Python: ulysses_kv_width(h_kv, cp, a_kv)
export function ulyssesKvWidth(hKv, cp, aKv = null) {
  cpCheck([["h_kv", hKv], ["cp", cp]]);
  if (aKv === null) return hKv;
  cpCheck([["a_kv", aKv]]);
  if (aKv % cp && cp % aKv) throw new Error(`K/V heads (${aKv}) must be divisible by cp (${cp}), or cp by them`);
  return cp > aKv ? hKv * cp / aKv : hKv;
}

// Python: ulysses_all_to_alls_per_layer(b, s, h, cp, bytes_per_elem, h_kv, a_kv) -> [[tensor, S], ...]
export function ulyssesAllToAllsPerLayer(b, s, h, cp, bytesPerElem = 2, hKv = null, aKv = null) {
  hKv = hKv === null ? h : hKv;
  cpCheck([["b", b], ["s", s], ["h", h], ["h_kv", hKv], ["cp", cp]]);
  const w = ulyssesKvWidth(hKv, cp, aKv);
  if (cp === 1) return [];
  const q = b * (s / cp) * h * bytesPerElem;
  return [["qkv", b * (s / cp) * (h + 2 * w) * bytesPerElem], ["out", q]];
}

// Python: ulysses_sent_bytes_per_layer(b, s, h, cp, bytes_per_elem, h_kv, a_kv)
export function ulyssesSentBytesPerLayer(b, s, h, cp, bytesPerElem = 2, hKv = null, aKv = null) {
  let fwd = 0;
  for (const [, S] of ulyssesAllToAllsPerLayer(b, s, h, cp, bytesPerElem, hKv, aKv)) fwd += ((cp - 1) / cp) * S;
  return {forward: fwd, backward: fwd, total: 2 * fwd};
}

// The largest entry of a list, in a loop (Math.max(...xs) overflows the call stack on long lists).
function cpMax(xs) {
  let m = -Infinity;
  for (const x of xs) if (x > m) m = x;
  return m;
}

function cpChunkIds(rank, cp, layout) {
  return layout === "contiguous" ? [rank] : [rank, 2 * cp - 1 - rank];
}

function cpCheckDiagonal(diagonal) {             // Python: _check_diagonal
  if (!CP_DIAGONALS.includes(diagonal)) throw new Error(`diagonal ('${diagonal}') must be one of ${CP_DIAGONALS.join(", ")}`);
}

// Python: step_pairs(rank, cp, layout, causal, diagonal)
export function stepPairs(rank, cp, layout = "zigzag", causal = true, diagonal = "half") {
  checkShape(2 * cp, cp, layout);
  cpCheckDiagonal(diagonal);
  const half = diagonal === "half" ? 0.5 : 1;
  if (layout === "striped") return Array(cp).fill(causal ? half : 1);
  const out = [];
  for (let i = 0; i < cp; i++) {
    const src = (((rank - i) % cp) + cp) % cp;
    let w = 0.0;
    for (const qc of cpChunkIds(rank, cp, layout)) {
      for (const kc of cpChunkIds(src, cp, layout)) w += (!causal || kc < qc) ? 1 : (kc === qc ? half : 0);
    }
    out.push(w);
  }
  return out;
}

// Python: pairs_per_rank(cp, layout, causal, diagonal). Closed form, O(cp): the sum of
// stepPairs over the steps (contiguous causal: r full pairs and the diagonal; zigzag causal:
// 2cp−1 full pairs and two diagonals; striped: cp steps of half a pair), equal to Python's loop
// (tests/test_context_parallel_explorer.py), so a large cp costs cp operations, not cp².
export function pairsPerRank(cp, layout = "contiguous", causal = true, diagonal = "whole") {
  checkShape(2 * cp, cp, layout);
  cpCheckDiagonal(diagonal);
  const half = diagonal === "half" ? 0.5 : 1;
  const out = [];
  cpWork.iterations += cp;
  for (let r = 0; r < cp; r++) {
    if (layout === "striped") out.push(cp * (causal ? half : 1));
    else if (layout === "zigzag") out.push(causal ? 2 * cp - 1 + 2 * half : 4 * cp);
    else out.push(causal ? r + half : cp);
  }
  return out;
}

// The largest of the ranks' stepPairs at each step, closed form, O(cp): step 0 holds the
// rank's own block (the diagonal pairs); every later step, some rank computes a whole pair
// (contiguous: the last rank), two of its four chunk pairs (zigzag) or half a pair (striped).
export function stepMaxima(cp, layout = "zigzag", causal = true, diagonal = "half") {
  checkShape(2 * cp, cp, layout);
  cpCheckDiagonal(diagonal);
  const half = diagonal === "half" ? 0.5 : 1;
  cpWork.iterations += cp;
  if (layout === "striped") return Array(cp).fill(causal ? half : 1);
  if (!causal) return Array(cp).fill(layout === "zigzag" ? 4 : 1);
  const later = layout === "zigzag" ? 2 : 1;
  return [layout === "zigzag" ? 1 + 2 * half : half, ...Array(cp - 1).fill(later)];
}

// Python: attention_flops_per_rank(b, s, h, cp, layout, causal, diagonal)
export function attentionFlopsPerRank(b, s, h, cp, layout = "contiguous", causal = true, diagonal = "whole") {
  checkShape(s, cp, layout);
  cpCheck([["b", b], ["h", h]]);
  const n = s / (layout === "zigzag" ? 2 * cp : cp);
  return pairsPerRank(cp, layout, causal, diagonal).map((p) => p * 4 * b * n * n * h);
}

// Python: imbalance(cp, layout, causal, diagonal)
export function imbalance(cp, layout = "contiguous", causal = true, diagonal = "half") {
  const w = pairsPerRank(cp, layout, causal, diagonal);
  return cpMax(w) / (w.reduce((a, x) => a + x, 0) / w.length);
}

// Python: min_tokens_per_rank_for_overlap(flops, bandwidth, bytes_per_elem, kv_fraction, causal, layout)
// Forward only: the backward sends K/V again plus dK/dV against its own FLOPs.
export function minTokensPerRankForOverlap(flops, bandwidth, bytesPerElem = 2, kvFraction = 1.0, causal = true, layout = "zigzag") {
  cpCheckRates(flops, bandwidth, null);
  checkShape(2, 1, layout);
  const f = causal && layout !== "contiguous" ? 0.5 : 1.0;
  return flops * bytesPerElem * kvFraction / (2 * f * bandwidth);
}

// Python: ring_time_from_steps(step_compute, step_comm)
export function ringTimeFromSteps(stepCompute, stepComm) {
  let t = 0;
  for (let i = 0; i < stepCompute.length - 1; i++) t += Math.max(stepCompute[i], stepComm);
  return t + stepCompute[stepCompute.length - 1];
}

// Python: ring_attention_time(shape, *, flops, bandwidth, alpha)
// Forward only, like allgatherAttentionTime: the ring-against-all-gather comparison leaves out the backward.
export function ringAttentionTime(shape, flops, bandwidth, alpha = 0.0) {
  const sh = attentionShape(shape), cp = sh.cp, n = sh.chunk;
  cpCheckRates(flops, bandwidth, alpha);
  const unit = 4 * sh.b * n * n * sh.h / flops;
  const steps = stepMaxima(cp, sh.layout, sh.causal, sh.diagonal).map((w) => unit * w);  // O(cp), not cp²
  const comp = unit * cpMax(pairsPerRank(cp, sh.layout, sh.causal, sh.diagonal));
  const stepComm = cp > 1 ? alpha + sh.kv_block / bandwidth : 0.0;
  return {compute: comp, comm: (cp - 1) * stepComm, time: ringTimeFromSteps(steps, stepComm),
          step: cp > 1 ? cpMax(steps.slice(1)) : steps[0]};
}

function cpGatherTime(sh, alpha, bandwidth, algorithm) { // Python: _gather_time
  return sh.cp === 1 ? 0.0 : collectiveTime("all-gather", algorithm, sh.cp, sh.cp * sh.kv_block, alpha, bandwidth);
}

// Python: allgather_attention_time(shape, *, flops, bandwidth, alpha, algorithm)
export function allgatherAttentionTime(shape, flops, bandwidth, alpha = 0.0, algorithm = "ring") {
  const sh = attentionShape(shape);
  cpCheckRates(flops, bandwidth, alpha);
  const comp = cpMax(attentionFlopsPerRank(sh.b, sh.s, sh.h, sh.cp, sh.layout, sh.causal, sh.diagonal));
  const gather = cpGatherTime(sh, alpha, bandwidth, algorithm);
  return {compute: comp / flops, gather, time: gather + comp / flops};
}

// Python: _pairs_below(a, b, c, e)
export function pairsBelow(a, b, c, e) {
  if (a >= b || c >= e) return 0;
  const L = e - c;
  const S = (T) => {                             // Σ_{t ≤ T} clamp(t, 0, L)
    if (T <= 0) return 0;
    if (T <= L) return T * (T + 1) / 2;
    return L * (L + 1) / 2 + (T - L) * L;
  };
  return S(b - c) - S(a - c);
}

// Visible (query, key) entries of a causal document mask between the query positions
// [q0, q1) and the key positions [k0, k1), for documents given by their starts and ends. With
// documents of one length L (L > 0, starting at multiples of L) it is O(1): only the first and
// the last document the two intervals share can be cut, every one between them lies inside both
// and holds L(L+1)/2 entries. Otherwise it visits every document (the general case of Python's
// document_step_work, which it equals).
function cpDocumentEntries(q0, q1, k0, k1, bounds, L) {
  if (L > 0) {
    const first = Math.max(Math.floor(q0 / L), Math.floor(k0 / L));
    const last = Math.min(Math.floor((q1 - 1) / L), Math.floor((k1 - 1) / L));
    if (last < first) return 0;
    const one = (d) => pairsBelow(Math.max(q0, d * L), Math.min(q1, (d + 1) * L),
                                  Math.max(k0, d * L), Math.min(k1, (d + 1) * L));
    if (last === first) return one(first);
    return one(first) + one(last) + (last - first - 1) * (L * (L + 1) / 2);
  }
  let total = 0;
  for (const [d0, d1] of bounds) total += pairsBelow(Math.max(q0, d0), Math.min(q1, d1), Math.max(k0, d0), Math.min(k1, d1));
  return total;
}

function cpCheckDocuments(s, cp, layout, documents) {
  checkShape(s, cp, layout);
  if (layout === "striped") throw new Error("layout ('striped') must be contiguous or zigzag for document work");
  if (documents.some((n) => !Number.isInteger(n) || n < 1) || documents.reduce((a, x) => a + x, 0) !== s) {
    throw new Error(`document lengths ([${documents.join(", ")}]) must be integers >= 1 summing to s (${s})`);
  }
  const bounds = [];
  let start = 0;
  for (const length of documents) {
    bounds.push([start, start + length]);
    start += length;
  }
  const L = documents.every((x) => x === documents[0]) ? documents[0] : 0;  // equal lengths: O(1) entries
  const n = s / (layout === "zigzag" ? 2 * cp : cp);
  // entries rank r computes against rank src's block: ≤ 4 chunk pairs, each O(1) for equal lengths
  return (r, src) => {
    let w = 0;
    for (const qc of cpChunkIds(r, cp, layout)) {
      for (const kc of cpChunkIds(src, cp, layout)) {
        if (kc > qc) continue;                          // a later key chunk: nothing visible
        w += cpDocumentEntries(qc * n, (qc + 1) * n, kc * n, (kc + 1) * n, bounds, L);
      }
    }
    return w;
  };
}

// Python: document_step_work(s, cp, layout, documents) -> work[step][rank]
export function documentStepWork(s, cp, layout, documents) {
  const pair = cpCheckDocuments(s, cp, layout, documents);
  const work = [];
  for (let i = 0; i < cp; i++) {
    const row = [];
    for (let r = 0; r < cp; r++) row.push(pair(r, (((r - i) % cp) + cp) % cp));
    work.push(row);
  }
  return work;
}


// Per-step maxima of the entries a rank computes, closed form, for equal documents of length L
// whose boundaries line up with the chunks' (one of n and L divides the other: always so when s,
// cp and the document count are powers of two, as in the explorer); null otherwise. n = chunk
// length, g = L/n chunks per document. A document inside a chunk: only step 0 (the rank's own
// chunks) sees anything. A document over g chunks (g divides cp): step i ≥ 1 holds one whole
// pair on some rank when a query chunk and the key chunk i ranks back share a document, i < g,
// and with zigzag also when the mirrored late chunks do, i > cp − g; one document (g = 2cp) is
// the plain causal zigzag, two pairs per step. Equal to the table of documentStepWork, checked
// against it and against Python in tests/test_context_parallel_explorer.py.
export function equalDocumentStepMaxima(s, cp, layout, L) {
  const c = layout === "zigzag" ? 2 : 1;
  const n = s / (c * cp);
  const full = n * n;
  const diag = n * (n + 1) / 2;
  const steps = Array(cp).fill(0);
  cpWork.iterations += cp;
  if (n % L === 0) {
    steps[0] = c * (n / L) * (L * (L + 1) / 2);
    return steps;
  }
  if (L % n !== 0) return null;
  const g = L / n;
  if (layout === "contiguous") {
    steps[0] = diag;
    for (let i = 1; i < cp; i++) steps[i] = i < g ? full : 0;
    return steps;
  }
  if (g === 2 * cp) {
    steps[0] = 2 * diag + full;
    for (let i = 1; i < cp; i++) steps[i] = 2 * full;
    return steps;
  }
  if (cp % g !== 0) return null;
  steps[0] = 2 * diag;
  for (let i = 1; i < cp; i++) steps[i] = i < g || i > cp - g ? full : 0;
  return steps;
}

// Entries of a causal mask over equal documents of length L for the query rows [0, x): row t sees
// (t mod L) + 1 keys.
function cpRowsBelow(x, L) {
  const k = Math.floor(x / L);
  const rest = x - k * L;
  return k * (L * (L + 1) / 2) + rest * (rest + 1) / 2;
}

// Python: document_attention_times(shape, documents, *, flops, bandwidth, alpha, algorithm)
// Equal documents aligned with the chunks take the closed forms (O(cp)); any other packing visits
// every (step, rank), cp² visits of at most four chunk pairs, without storing the cp × cp table.
export function documentAttentionTimes(shape, documents, flops, bandwidth, alpha = 0.0, algorithm = "ring") {
  const sh = attentionShape(shape), {s, cp, layout} = sh;
  cpCheckRates(flops, bandwidth, alpha);
  const pair = cpCheckDocuments(s, cp, layout, documents);
  const unit = 4 * sh.b * sh.h / flops;
  const equal = documents.every((x) => x === documents[0]) ? documents[0] : 0;
  const maxima = equal ? equalDocumentStepMaxima(s, cp, layout, equal) : null;
  let steps;
  const total = Array(cp).fill(0);
  if (maxima !== null) {
    steps = maxima.map((w) => unit * w);
    const n = sh.chunk;
    for (let r = 0; r < cp; r++) {             // a rank's queries see the same keys at any step
      let w = 0;
      for (const qc of cpChunkIds(r, cp, layout)) w += cpRowsBelow((qc + 1) * n, equal) - cpRowsBelow(qc * n, equal);
      total[r] = unit * w;
      cpWork.iterations += 2;
    }
  } else {
    steps = [];
    for (let i = 0; i < cp; i++) {
      let most = 0;
      for (let r = 0; r < cp; r++) {
        const w = pair(r, (((r - i) % cp) + cp) % cp);
        cpWork.iterations += 1;
        if (w > most) most = w;
        total[r] += w;
      }
      steps.push(unit * most);
    }
    for (let r = 0; r < cp; r++) total[r] *= unit;
  }
  const stepComm = cp > 1 ? alpha + sh.kv_block / bandwidth : 0.0;
  const gather = cpGatherTime(sh, alpha, bandwidth, algorithm);
  const maxTotal = cpMax(total);
  return {
    ring: ringTimeFromSteps(steps, stepComm),
    ring_compute: steps.reduce((a, x) => a + x, 0),
    allgather: gather + maxTotal,
    allgather_compute: maxTotal,
    gather,
    imbalance: maxTotal / (total.reduce((a, x) => a + x, 0) / cp),
  };
}

// Python: ulysses_time(shape, *, alpha, bandwidth)
export function ulyssesTime(shape, alpha, bandwidth) {
  const sh = attentionShape(shape);
  let t = 0;
  for (const [, S] of ulyssesAllToAllsPerLayer(sh.b, sh.s, sh.h, sh.cp, sh.bytes_per_elem, sh.h_kv, sh.a_kv)) {
    t += collectiveTime("all-to-all", "pairwise-exchange", sh.cp, S, alpha, bandwidth);
  }
  return t;
}

// Python: activation_bytes_per_rank(s, b, h, a, cp, *, blockwise)
export function activationBytesPerRank(s, b, h, a, cp = 1, blockwise = true) {
  cpCheck([["s", s], ["b", b], ["h", h], ["a", a], ["cp", cp]]);
  const total = 34 * s * b * h + (blockwise ? 0 : 5 * a * s * s * b);
  return total / cp;
}

// The most documents the explorer packs into one sequence (Python: MAX_DOCUMENTS): 1K-token
// documents at s = 1M; the document work grows with their number.
export const CP_MAX_DOCUMENTS = 1024;

// The largest cp the explorer accepts (Python: MAX_CP): 1,024 GPUs on one sequence, 64 times
// Llama 3's 16. Every model here is O(cp) at the explorer's settings (cpWorkCount counts it).
export const CP_MAX_CP = 1024;

// Upper bounds of the width boxes (Python: MAX_H, MAX_HEADS, MAX_B): wider than any published
// model, so a typing slip is refused with a message instead of drawn.
export const CP_MAX_H = 131072;
export const CP_MAX_HEADS = 1024;
export const CP_MAX_B = 1024;

// Python: minipar.widgets.context_parallel.equal_documents
export function equalDocuments(s, documents) {
  checkNumbers({integer: true, min: 1, max: CP_MAX_DOCUMENTS}, [["documents", documents]]);
  if (s % documents) throw new Error(`s (${s}) must be divisible by documents (${documents})`);
  return Array(documents).fill(s / documents);
}

// Python: minipar.widgets.context_parallel.cp_layer_model
export function cpLayerModel(s, cp, layout, h, a, aKv, b, flops, bandwidth, alpha, documents = 1) {
  checkNumbers({integer: true, min: 1, max: CP_MAX_CP}, [["cp", cp]]);
  checkShape(s, cp, layout);
  cpCheck([["h", h], ["a", a], ["a_kv", aKv], ["b", b]]);
  if (a % aKv) throw new Error(`heads (${a}) must be divisible by K/V heads (${aKv})`);
  const lengths = equalDocuments(s, documents);
  const hKv = (h * aKv - ((h * aKv) % a)) / a;          // Python: h * a_kv // a
  const shape = attentionShape({b, s, h, cp, layout, h_kv: hKv, a_kv: aKv});
  const ring = ringAttentionTime(shape, flops, bandwidth, alpha);
  const gather = allgatherAttentionTime(shape, flops, bandwidth, alpha);
  const ulyssesOk = a % cp === 0 && (aKv % cp === 0 || cp % aKv === 0);
  return {
    tokens_per_rank: s / cp,
    activation_bytes: activationBytesPerRank(s, b, h, a, cp),
    ring_bytes: ringSentBytesPerLayer(b, s, hKv, cp).total,
    ring_compute: ring.compute, ring_comm: ring.comm, ring_time: ring.time, ring_step: ring.step,
    allgather_bytes: allgatherSentBytesPerLayer(b, s, hKv, cp).total,
    allgather_gather: gather.gather, allgather_time: gather.time,
    ulysses_bytes: ulyssesOk ? ulyssesSentBytesPerLayer(b, s, h, cp, 2, hKv, aKv).total : null,
    ulysses_time: ulyssesOk ? ulyssesTime(shape, alpha, bandwidth) : null,
    imbalance: imbalance(cp, layout),
    overlap_min_tokens: minTokensPerRankForOverlap(flops, bandwidth, 2, hKv / h, true, layout),
    document_length: s / documents,
    document_times: layout === "striped" ? null
      : documentAttentionTimes(shape, lengths, flops, bandwidth, alpha),
  };
}

// Controls that do not apply: the document model covers contiguous and zigzag shards, so with
// striped shards the documents box changes no time the explorer draws.
export function cpDisabled(v) {
  return v.layout === "striped" ? ["documents"] : [];
}

const CP_SS = [8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576];
const CP_SS_LABELS = ["8K", "16K", "32K", "64K", "128K", "256K", "512K", "1M"];
const CP_CPS = [1, 2, 4, 8, 16, 32, 64];

// config (Python: minipar.widgets.context_parallel.cp_config): {links: {name: {alpha, bandwidth}}, gpus: {name: bf16 flops}}
registerExplorer("cp-layer", {
  title: "Context parallelism, one causal attention layer (bf16; Llama-3-405B-like widths by default)",
  // the boxes' max are CP_MAX_CP, CP_MAX_H, CP_MAX_HEADS, CP_MAX_B and CP_MAX_DOCUMENTS written
  // out (minipar.widgets.inputs reads them from this source; a test checks they agree)
  controls: [
    {name: "s", label: "s (tokens)", type: "range", values: CP_SS, labels: CP_SS_LABELS, value: 131072},
    {name: "cp", label: "cp", type: "number", min: 1, max: 1024, step: 1, value: 16},
    {name: "layout", label: "layout", type: "select", options: ["zigzag", "striped", "contiguous"], value: "zigzag"},
    {name: "link", label: "link between the cp GPUs", type: "select", options: ["ib-ndr400", "nvlink4-h100", "pcie5-x16", "eth-100g"], value: "ib-ndr400", configOptions: "links"},
    {name: "gpu", label: "GPU", type: "select", options: ["H100-SXM"], value: "H100-SXM", configOptions: "gpus"},
    {name: "h", label: "h", type: "number", min: 1, max: 131072, step: 1, value: 16384},
    {name: "a", label: "a (heads)", type: "number", min: 1, max: 1024, step: 1, value: 128},
    {name: "a_kv", label: "K/V heads", type: "number", min: 1, max: 1024, step: 1, value: 8},
    {name: "b", label: "b", type: "number", min: 1, max: 1024, step: 1, value: 1},
    {name: "documents", label: "documents", type: "number", min: 1, max: 1024, step: 1, value: 1},
  ],
  divisible: [["h", "a"], ["a", "a_kv"], ["s", "documents"]],
  disabled: cpDisabled,
  draw(v, config) {
    const L = configEntry(config, "links", v.link), F = configEntry(config, "gpus", v.gpu);
    const r = cpLayerModel(v.s, v.cp, v.layout, v.h, v.a, v.a_kv, v.b, F, L.bandwidth, L.alpha, v.documents);
    const cps = CP_CPS.filter((c) => v.s % (2 * c) === 0);
    const contiguous = cps.map((c) => cpLayerModel(v.s, c, "contiguous", v.h, v.a, v.a_kv, v.b, F, L.bandwidth, L.alpha));
    const zigzag = cps.map((c) => cpLayerModel(v.s, c, "zigzag", v.h, v.a, v.a_kv, v.b, F, L.bandwidth, L.alpha, v.documents));
    const series = [
      {name: "ring, contiguous", color: "#3182bd", xs: cps, ys: contiguous.map((m) => 1e3 * m.ring_time)},
      {name: "ring, zigzag", color: "#e6550d", xs: cps, ys: zigzag.map((m) => 1e3 * m.ring_time)},
      {name: "all-gather, zigzag", color: "#31a354", xs: cps, ys: zigzag.map((m) => 1e3 * m.allgather_time)},
    ];
    if (v.documents > 1) {
      series.push({name: `ring, ${v.documents} documents`, color: "#e6550d", dash: true,
        xs: cps, ys: zigzag.map((m) => 1e3 * m.document_times.ring)});
      series.push({name: `all-gather, ${v.documents} documents`, color: "#31a354", dash: true,
        xs: cps, ys: zigzag.map((m) => 1e3 * m.document_times.allgather)});
    }
    const svg = lineChart({
      title: `forward attention time per layer, slowest rank, s = ${fmtNumber(v.s)}, over ${v.link}`,
      xlabel: "cp (GPUs the sequence is split over)", ylabel: "time (ms)", xlog: true, ylog: true,
      series, points: [{x: v.cp, y: 1e3 * r.ring_time, color: "#c00", label: `cp = ${v.cp}, ${v.layout}`}],
    });
    const hidden = r.ring_comm / Math.max(v.cp - 1, 1) <= r.ring_step + 1e-15;
    const uly = r.ulysses_bytes === null
      ? `Ulysses cannot use cp = ${v.cp}: cp must divide the ${v.a} heads, and the ${v.a_kv} K/V heads must be divisible by cp or divide it.`
      : `Ulysses sends ${fmtBytes(r.ulysses_bytes, false)} per GPU per layer (forward + backward), its two forward all-to-alls take ${fmtSeconds(r.ulysses_time)} (not overlapped).`;
    const d = r.document_times;
    const packed = v.documents === 1
      ? `One document of ${v.s.toLocaleString("en-US")} tokens (causal mask, entries counted exactly)`
      : `Packed as ${v.documents} documents of ${r.document_length.toLocaleString("en-US")} tokens (causal document mask, a variable-length kernel that skips masked entries)`;
    let docs;
    if (d === null) {
      docs = `${packed}: the document cost model covers contiguous and zigzag shards, not striped; choose one of them to compare the ring with the all-gather under this mask.`;
    } else {
      const [fast, slow] = d.ring <= d.allgather ? ["the ring", "all-gather CP"] : ["all-gather CP", "the ring"];
      const ratio = Math.max(d.ring, d.allgather) / Math.min(d.ring, d.allgather);
      const verdict = ratio < 1.005
        ? `the two take the same time to within 0.5%`
        : `<b>${fast} wins</b>, ${ratio.toFixed(2)}× faster than ${slow} (${fmtSeconds(Math.abs(d.ring - d.allgather))} less per layer)`;
      docs = `${packed}, forward attention per layer, ${escapeHtml(v.layout)} shards: the ring takes <b>${fmtSeconds(d.ring)}</b> `
        + `(it waits for the slowest rank at every step; those per-step maxima sum to ${fmtSeconds(d.ring_compute)} of compute), `
        + `all-gather CP <b>${fmtSeconds(d.allgather)}</b> (gather ${fmtSeconds(d.gather)} + its slowest rank's own visible work ${fmtSeconds(d.allgather_compute)}): ${verdict}.`;
    }
    const ag = `All-gather CP (Llama 3) sends ${fmtBytes(r.allgather_bytes, false)} per layer; forward: gather ${fmtSeconds(r.allgather_gather)} (exposed) + compute = <b>${fmtSeconds(r.allgather_time)}</b>.`;
    return svg + `<p>Per GPU: <b>${fmtBytes(r.activation_bytes, false)}</b> of activations per layer (Korthikanti's 34·sbh/cp, 16-bit, blockwise attention), `
      + `${r.tokens_per_rank.toLocaleString("en-US")} tokens. The ring sends <b>${fmtBytes(r.ring_bytes, false)}</b> per layer (forward + backward); `
      + `forward attention on the slowest GPU: compute ${fmtSeconds(r.ring_compute)}, K/V transfers ${fmtSeconds(r.ring_comm)}, `
      + `<b>${fmtSeconds(r.ring_time)}</b> with overlap (transfers ${hidden ? "hidden" : "exposed"}: hiding them needs ≥ ${Math.ceil(r.overlap_min_tokens).toLocaleString("en-US")} tokens per GPU on this link). The backward's dK/dV accumulators travel in float32. `
      + `Causal imbalance (slowest / mean work): <b>${r.imbalance.toFixed(2)}</b> with the ${escapeHtml(v.layout)} layout and a causal kernel on the diagonal.</p><p>${ag}</p><p>${docs}</p><p>${uly}</p>`;
  },
});
