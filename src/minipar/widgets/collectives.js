// Collectives chapter: the α-β cost model of minipar.cost.network.collectives, in JavaScript, and the
// chapter's explorer. Twin of the Python functions named in each comment; the parity test
// (tests/test_explorer_parity.py) checks them against Python over a grid of inputs.
// Formulas: Thakur, Rabenseifner & Gropp 2005; busbw: nccl-tests PERFORMANCE.md.

export const OPS = ["all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce", "all-to-all"];

export const ALGORITHMS = {
  "all-reduce": ["ring", "recursive-doubling", "rabenseifner", "binomial-tree", "parameter-server"],
  "all-gather": ["ring", "recursive-doubling"],
  "reduce-scatter": ["ring", "recursive-halving"],
  "broadcast": ["binomial-tree", "scatter-allgather"],
  "reduce": ["binomial-tree", "rabenseifner"],
  "all-to-all": ["pairwise-exchange"],
};

const POW2_ONLY = ["all-gather/recursive-doubling", "reduce-scatter/recursive-halving"];

function ceilLog2(n) {             // ⌈log2 n⌉ (Python: (n - 1).bit_length())
  let L = 0;
  while (2 ** L < n) L += 1;
  return L;
}

function floorPow2(n) {            // 2^⌊log2 n⌋
  let p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

function isPow2(n) {
  return floorPow2(n) === n;
}

function checkCollective(op, n, nbytes, algorithm) {   // Python: _check
  if (!OPS.includes(op)) throw new Error(`op ('${op}') must be one of ${OPS.join(", ")}`);
  if (algorithm !== undefined && !ALGORITHMS[op].includes(algorithm)) {
    throw new Error(`algorithm ('${algorithm}') is not one for ${op}; choose from ${ALGORITHMS[op].join(", ")}`);
  }
  if (!Number.isInteger(n) || n < 1) throw new Error(`ranks n (${n}) must be an integer >= 1`);
  if (nbytes < 0) throw new Error(`nbytes (${nbytes}) must be >= 0`);
  if (algorithm !== undefined && POW2_ONLY.includes(`${op}/${algorithm}`) && !isPow2(n)) {
    throw new Error(`${algorithm} ${op} needs n a power of two, got n (${n})`);
  }
}

// Python: busbw_factor(op, n)
export function busbwFactor(op, n) {
  checkCollective(op, n, 0);
  if (op === "all-reduce") return (2 * (n - 1)) / n;
  if (["all-gather", "reduce-scatter", "all-to-all"].includes(op)) return (n - 1) / n;
  return 1.0;
}

// Python: busbw(op, n, nbytes, seconds)
export function busbw(op, n, nbytes, seconds) {
  if (seconds <= 0) throw new Error(`seconds (${seconds}) must be > 0`);
  return (nbytes / seconds) * busbwFactor(op, n);
}

// Python: parameter_server_time(n, nbytes, alpha, bandwidth)
export function parameterServerTime(n, nbytes, alpha, bandwidth) {
  checkCollective("all-reduce", n, nbytes);
  if (n === 1) return 0.0;
  return 2 * (alpha + ((n - 1) * nbytes) / bandwidth);
}

// Python: collective_time(op, algorithm, n, nbytes, alpha, bandwidth)
export function collectiveTime(op, algorithm, n, nbytes, alpha, bandwidth) {
  checkCollective(op, n, nbytes, algorithm);
  if (!(bandwidth > 0)) throw new Error(`bandwidth (${bandwidth}) must be > 0 bytes/s`);
  if (alpha < 0) throw new Error(`alpha (${alpha}) must be >= 0 s`);
  if (n === 1) return 0.0;
  if (op === "all-reduce" && algorithm === "parameter-server") return parameterServerTime(n, nbytes, alpha, bandwidth);
  const beta = 1.0 / bandwidth;
  const S = nbytes;
  let extra = 0.0;
  const fixup = ["all-reduce/recursive-doubling", "all-reduce/rabenseifner", "reduce/rabenseifner"];
  if (fixup.includes(`${op}/${algorithm}`) && !isPow2(n)) {
    extra = (op === "all-reduce" ? 2 : 1) * (alpha + S * beta);   // Thakur §4.4 fix-up
    n = floorPow2(n);
  }
  const L = ceilLog2(n);
  const frac = (n - 1) / n;
  if (algorithm === "ring" || algorithm === "pairwise-exchange") {
    const steps = op === "all-reduce" ? 2 * (n - 1) : n - 1;
    return steps * alpha + busbwFactor(op, n) * S * beta;
  }
  if (algorithm === "recursive-doubling" && op === "all-reduce") return extra + L * (alpha + S * beta);
  if (algorithm === "recursive-doubling" || algorithm === "recursive-halving") return L * alpha + frac * S * beta;
  if (algorithm === "rabenseifner") return extra + 2 * L * alpha + 2 * frac * S * beta;
  if (algorithm === "binomial-tree") return (op === "all-reduce" ? 2 : 1) * L * (alpha + S * beta);
  if (algorithm === "scatter-allgather") return (L + n - 1) * alpha + 2 * frac * S * beta;
  throw new Error(`unhandled ${op}/${algorithm}`);
}

// Python: hierarchical_all_reduce_time(nodes, gpus_per_node, nbytes, intra, inter, inter_algorithm)
// intra/inter are {alpha, bandwidth} objects (Python: Link).
export function hierarchicalAllReduceTime(nodes, gpusPerNode, nbytes, intra, inter, interAlgorithm = "ring") {
  if (nodes < 1 || gpusPerNode < 1) throw new Error(`nodes (${nodes}) and gpus_per_node (${gpusPerNode}) must be >= 1`);
  const g = gpusPerNode;
  const rs = collectiveTime("reduce-scatter", "ring", g, nbytes, intra.alpha, intra.bandwidth);
  const ar = collectiveTime("all-reduce", interAlgorithm, nodes, nbytes / g, inter.alpha, inter.bandwidth);
  const ag = collectiveTime("all-gather", "ring", g, nbytes, intra.alpha, intra.bandwidth);
  return rs + ar + ag;
}

function sizeLabel(s) {
  for (const [unit, k] of [["GiB", 30], ["MiB", 20], ["KiB", 10]]) if (s >= 2 ** k) return `${+(s / 2 ** k).toPrecision(6)} ${unit}`;
  return `${s} B`;
}

const SIZES = [];
for (let k = 10; k <= 32; k += 1) SIZES.push(2 ** k);         // 1 KiB … 4 GiB

// The op and algorithm menus stay a valid pair (UI only, no Python twin): choosing an op whose
// algorithms do not include the current one picks that op's first algorithm (broadcast ->
// binomial-tree); choosing an algorithm the op does not run picks the first op that runs it
// (scatter-allgather -> broadcast).
export function collectivesLink(values, changed) {
  const valid = ALGORITHMS[values.op] || [];
  if (valid.includes(values.algorithm)) return {};
  if (changed === "algorithm") {
    const op = OPS.find((o) => ALGORITHMS[o].includes(values.algorithm));
    return op ? {op} : {};
  }
  return valid.length ? {algorithm: valid[0]} : {};
}

// config (from Python, minipar.widgets.collectives.collectives_config):
//   {links: {name: {alpha, bandwidth, source}}, default_link}
registerExplorer("collectives", {
  title: "Collective cost (α-β model) and nccl-tests bus bandwidth",
  controls: [
    {name: "op", label: "op", type: "select", options: OPS, value: "all-reduce"},
    {name: "algorithm", label: "algorithm", type: "select",
     options: [...new Set(Object.values(ALGORITHMS).flat())].sort(), value: "ring"},
    {name: "n", label: "ranks n", type: "number", min: 2, max: 65536, step: 1, value: 8},
    {name: "size", label: "S", type: "range", values: SIZES, labels: SIZES.map(sizeLabel), value: 2 ** 26},
    {name: "link", label: "link", type: "select", options: ["nvlink4-h100", "pcie5-x16", "ib-ndr400", "eth-100g"], value: "nvlink4-h100",
     configOptions: "links"},
  ],
  link: collectivesLink,
  draw(v, config) {
    const L = configEntry(config, "links", v.link);
    if (v.n < 2) throw new Error(`ranks n (${v.n}): a collective on one rank moves nothing; choose n >= 2`);
    const here = collectiveTime(v.op, v.algorithm, v.n, v.size, L.alpha, L.bandwidth);
    const times = SIZES.map((s) => collectiveTime(v.op, v.algorithm, v.n, s, L.alpha, L.bandwidth));
    const bus = SIZES.map((s, i) => busbw(v.op, v.n, s, times[i]) / 1e9);
    const busHere = busbw(v.op, v.n, v.size, here) / 1e9;
    const left = lineChart({
      title: `${v.op}, ${v.algorithm}, n = ${v.n}`, xlabel: "S (bytes)", ylabel: "time (s)",
      xlog: true, ylog: true, series: [{name: "α-β model", xs: SIZES, ys: times}],
      points: [{x: v.size, y: here, color: "#c44e52", label: `S = ${sizeLabel(v.size)}`}],
    });
    const right = lineChart({
      title: "bus bandwidth (nccl-tests definition)", xlabel: "S (bytes)", ylabel: "busbw (GB/s, 1 GB = 10⁹ B)",
      xlog: true, series: [{name: "busbw", xs: SIZES, ys: bus}],
      hlines: [{y: L.bandwidth / 1e9, label: "link, per direction"}],
      points: [{x: v.size, y: busHere, color: "#c44e52"}],
    });
    const fix = ["all-reduce", "reduce"].includes(v.op) && ["recursive-doubling", "rabenseifner"].includes(v.algorithm) && !isPow2(v.n);
    return `<p><b>${escapeHtml(fmtSeconds(here))}</b> for ${escapeHtml(v.op)} of ${escapeHtml(sizeLabel(v.size))} on ${v.n} ranks (${escapeHtml(v.algorithm)}); busbw ${busHere.toFixed(2)} GB/s.</p>`
      + `<div class="row">${left}${right}</div>`
      + `<p class="minipar-explorer-note">${escapeHtml(v.link)}: ${(L.bandwidth / 1e9).toFixed(2)} GB/s per direction, α = ${+(L.alpha * 1e6).toPrecision(4)} µs. Source: ${escapeHtml(L.source || "")}.`
      + (fix ? ` n = ${v.n} is not a power of two: the extra ranks first fold into partners and get the result back (Thakur et al. 2005 §4.4), up to two more α + Sβ.` : "")
      + "</p>";
  },
});
