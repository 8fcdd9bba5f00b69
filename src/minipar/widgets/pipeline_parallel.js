// Pipeline-parallel chapter: JavaScript twins of minipar.pipeline_parallel.schedules.schedule,
// minipar.pipeline_parallel.simulate.simulate and minipar.widgets.pipeline_parallel.pp_model;
// the pp-schedule explorer (timeline, bubble, peak activations). Sources: Huang et al. 2019
// (GPipe), Narayanan et al. 2021 (1F1B, interleaved), Qi et al. 2024 (ZB-H1).
// Parity with Python: tests/test_pipeline_parallel_explorer.py.

const NAMES = ["gpipe", "1f1b", "interleaved", "zb-h1"];
const act = (op, stage, microbatch) => ({op, stage, microbatch});
const key = (a) => `${a.op}${a.stage}.${a.microbatch}`;

function checkSchedule(name, p, m, v) {
  if (!NAMES.includes(name)) throw new Error(`schedule ('${name}') must be one of ${NAMES.join(", ")}`);
  for (const [k, x] of [["p", p], ["m", m], ["v", v]]) {
    if (!Number.isInteger(x) || x < 1) throw new Error(`${k} (${x}) must be an integer >= 1`);
  }
  if (name === "interleaved") {
    if (v < 2) throw new Error(`interleaved schedule needs chunks v (${v}) >= 2`);
    if (m % p) throw new Error(`interleaved schedule needs microbatches m (${m}) to be a multiple of p (${p})`);
  } else if (v !== 1) {
    throw new Error(`chunks v (${v}) apply only to the interleaved schedule, not ${name}`);
  }
}

function rankList(name, r, p, m, v) {
  const out = [];
  if (name === "gpipe") {
    for (let i = 0; i < m; i++) out.push(act("F", r, i));
    for (let i = 0; i < m; i++) out.push(act("B", r, i));
    return out;
  }
  if (name === "1f1b") {
    const w = Math.min(p - r - 1, m);
    for (let i = 0; i < w; i++) out.push(act("F", r, i));
    for (let i = 0; i < m - w; i++) out.push(act("F", r, w + i), act("B", r, i));
    for (let i = m - w; i < m; i++) out.push(act("B", r, i));
    return out;
  }
  if (name === "interleaved") {
    const total = m * v;
    const w = Math.min(2 * (p - r - 1) + (v - 1) * p, total);
    const unit = (k, fwd) => {
      let c = Math.floor(k / p) % v;
      if (!fwd) c = v - 1 - c;
      return [r + c * p, Math.floor(k / (p * v)) * p + (k % p)];
    };
    for (let k = 0; k < w; k++) out.push(act("F", ...unit(k, true)));
    for (let k = 0; k < total - w; k++) out.push(act("F", ...unit(w + k, true)), act("B", ...unit(k, false)));
    for (let k = total - w; k < total; k++) out.push(act("B", ...unit(k, false)));
    return out;
  }
  // zb-h1: 1F1B's F/B order, rank r keeps up to r weight gradients W pending
  const w = Math.min(p - r - 1, m);
  let nextW = 0;
  const backward = (i) => {
    out.push(act("B", r, i));
    if (i + 1 - nextW > r) out.push(act("W", r, nextW++));
  };
  for (let i = 0; i < w; i++) out.push(act("F", r, i));
  for (let i = 0; i < m - w; i++) { out.push(act("F", r, w + i)); backward(i); }
  for (let i = m - w; i < m; i++) backward(i);
  for (let j = nextW; j < m; j++) out.push(act("W", r, j));
  return out;
}

// Python: schedule(name, p, m, v=1) -> per rank [Action(op, stage, microbatch), ...]
export function schedule(name, p, m, v = 1) {
  checkSchedule(name, p, m, v);
  return Array.from({length: p}, (_, r) => rankList(name, r, p, m, v));
}

// Python: simulate(actions, m, t_f, t_b, t_w, comm) (schedules from schedule() only: no checks).
// Done actions are kept in typed arrays indexed by (op, stage, micro-batch), not in a map of
// strings, so p·m·v = 4096 simulates in milliseconds; same order, same floating-point sums.
export function simulate(actions, m, tF = 1.0, tB = 1.0, tW = 1.0, comm = 0.0) {
  const p = actions.length;
  let nSt = 0, nMb = 0;
  for (const l of actions) for (const a of l) { nSt = Math.max(nSt, a.stage + 1); nMb = Math.max(nMb, a.microbatch + 1); }
  const v = nSt / p;
  const split = actions.some((l) => l.some((a) => a.op === "W"));
  const dur = {F: tF / v, B: (split ? tB : tB + tW) / v, W: tW / v};
  const OPI = {F: 0, B: 1, W: 2};
  const idx = (op, stage, mb) => (OPI[op] * nSt + stage) * nMb + mb;
  const endAt = new Float64Array(3 * nSt * nMb);
  const rankAt = new Int32Array(3 * nSt * nMb).fill(-1);   // -1: not done yet
  const pos = new Array(p).fill(0), free = new Array(p).fill(0.0), busy = new Array(p).fill(0.0);
  const live = new Array(p).fill(0), peak = new Array(p).fill(0);
  const timeline = [];
  const release = split ? "W" : "B";
  const ds = [];                                     // the dependencies of one action (indices)
  const deps = (a) => {
    ds.length = 0;
    if (a.op === "F") { if (a.stage) ds.push(idx("F", a.stage - 1, a.microbatch)); } else if (a.op === "B") {
      ds.push(idx("F", a.stage, a.microbatch));
      if (a.stage < nSt - 1) ds.push(idx("B", a.stage + 1, a.microbatch));
    } else ds.push(idx("B", a.stage, a.microbatch));
    return ds;
  };
  let left = actions.reduce((n, l) => n + l.length, 0);
  while (left > 0) {
    let progressed = false;
    for (let r = 0; r < p; r++) {
      while (pos[r] < actions[r].length) {
        const a = actions[r][pos[r]];
        const dd = deps(a);
        let ready = true;
        for (let j = 0; j < dd.length; j++) if (rankAt[dd[j]] < 0) ready = false;
        if (!ready) break;
        let start = free[r];
        for (let j = 0; j < dd.length; j++) start = Math.max(start, endAt[dd[j]] + (rankAt[dd[j]] !== r ? comm : 0.0));
        const end = start + dur[a.op];
        const k = idx(a.op, a.stage, a.microbatch);
        endAt[k] = end;
        rankAt[k] = r;
        free[r] = end;
        busy[r] += dur[a.op];
        timeline.push([r, a, start, end]);
        if (a.op === "F") { live[r] += 1; peak[r] = Math.max(peak[r], live[r]); } else if (a.op === release) live[r] -= 1;
        pos[r] += 1;
        left -= 1;
        progressed = true;
      }
    }
    if (!progressed) throw new Error("deadlock: every rank waits");
  }
  const makespan = Math.max(...free);
  return {makespan, busy, peak_in_flight: peak, timeline};
}

// The summary of a simulation that ppModel returns (drawn from the one simulation the explorer runs).
function ppSummary(sim, p, v) {
  const idle = sim.busy.map((b) => 1 - b / sim.makespan);
  return {bubble: idle.reduce((x, y) => x + y, 0) / p, makespan: sim.makespan,
          peak_in_flight: sim.peak_in_flight, peak_stages: sim.peak_in_flight.map((k) => k / v)};
}

// Python: minipar.widgets.pipeline_parallel.pp_model
// Python: minipar.widgets.pipeline_parallel.check_times
function checkTimes(tF, tB, tW) {
  for (const [k, x] of [["t_F", tF], ["t_B", tB], ["t_W", tW]]) {
    if (typeof x !== "number" || !Number.isFinite(x) || x < 0) throw new Error(`${k} (${x}) must be a number >= 0`);
  }
  if (tF + tB + tW <= 0) throw new Error(`t_F + t_B + t_W (${tF + tB + tW}) must be > 0`);
}

export function ppModel(name, p, m, v, tF, tB, tW) {
  checkNumbers(COUNT, [["p", p], ["m", m], ["v", v]]);
  checkNumbers(NONNEGATIVE, [["t_F", tF], ["t_B", tB], ["t_W", tW]]);
  checkTimes(tF, tB, tW);
  return ppSummary(simulate(schedule(name, p, m, v), m, tF, tB, tW), p, v);
}

const COL = {F: "#4c78a8", B: "#e45756", W: "#54a24b"};

// The schedule and v change together: choosing "interleaved" sets v to 2 when it was below 2,
// choosing any other schedule sets v to 1 (the only value those accept). Returns the controls to set.
export function ppLink(values, changed) {
  if (changed !== "schedule") return {};
  if (values.schedule !== "interleaved") return {v: 1};
  return typeof values.v === "number" && values.v >= 2 ? {} : {v: 2};
}

// v applies only to the interleaved schedule: its box is disabled for the others.
export function ppDisabled(values) {
  return values.schedule === "interleaved" ? [] : ["v"];
}

// config: {} (nothing lives in Python but the model itself)
registerExplorer("pp-schedule", {
  title: "Pipeline schedules: timeline, bubble and activations held",
  controls: [
    {name: "schedule", label: "schedule", type: "select", options: NAMES, value: "1f1b"},
    {name: "p", label: "p (ranks)", type: "number", min: 1, max: 64, why: "and p·m·v at most 4096 for a drawing", step: 1, value: 4},
    {name: "m", label: "m (micro-batches)", type: "number", min: 1, max: 512, why: "and p·m·v at most 4096 for a drawing", step: 1, value: 8},
    {name: "v", label: "v (chunks per rank; interleaved only, >= 2)", type: "number", min: 1, max: 64, step: 1, value: 1},
    {name: "tF", label: "t_F", type: "number", min: 0, max: 1000, why: "a time in any unit: only the ratios of t_F, t_B and t_W matter", step: 0.25, value: 1},
    {name: "tB", label: "t_B (input gradient)", type: "number", min: 0, max: 1000, why: "a time in any unit: only the ratios of t_F, t_B and t_W matter", step: 0.25, value: 1},
    {name: "tW", label: "t_W (weight gradient)", type: "number", min: 0, max: 1000, why: "a time in any unit: only the ratios of t_F, t_B and t_W matter", step: 0.25, value: 1},
  ],
  link: ppLink,
  disabled: ppDisabled,
  draw(v) {
    // v is used as given: the interleaved schedule with v = 1 is refused with the rule it breaks
    const vv = v.v;
    checkSchedule(v.schedule, v.p, v.m, vv);
    checkTimes(v.tF, v.tB, v.tW);
    if (v.p * v.m * vv > 4096) throw new Error(`p·m·v (${v.p * v.m * vv}) must be <= 4096 for a drawing`);
    const sim = simulate(schedule(v.schedule, v.p, v.m, vv), v.m, v.tF, v.tB, v.tW);
    const r = ppSummary(sim, v.p, vv);   // ppModel's numbers, from the same simulation
    const rows = Array.from({length: v.p}, (_, k) => ({label: `rank ${k}`, segments: []}));
    const named = sim.timeline.length <= TIMELINE_SEGMENTS;   // above it the chart is binned: no tooltips
    for (const [rk, a, s, e] of sim.timeline) rows[rk].segments.push({start: s, end: e, color: COL[a.op], name: named ? `${a.op} stage ${a.stage} mb ${a.microbatch}` : ""});
    const svg = timeline({title: `${v.schedule}, p = ${v.p}, m = ${v.m}${v.schedule === "interleaved" ? `, v = ${vv}` : ""}`,
      rows, xlabel: "time (in the unit of t_F, t_B, t_W)", legend: [{name: "F", color: COL.F}, {name: "B", color: COL.B}, {name: "W", color: COL.W}]});
    const closed = v.schedule === "zb-h1" ? null : (v.p - 1) / (vv * v.m + v.p - 1);
    return svg + `<p>Bubble (idle fraction of the step, mean over ranks): <b>${r.bubble.toFixed(3)}</b>`
      + (closed === null ? "" : `; equal stages give (p−1)/(v·m+p−1) = ${closed.toFixed(3)}`)
      + `. Relative to the ideal time: ${(r.bubble / (1 - r.bubble)).toFixed(3)}.</p>`
      + `<p>Micro-batches whose activations each rank holds at its peak: [${r.peak_in_flight.join(", ")}]`
      + (vv > 1 ? ` chunks, i.e. [${r.peak_stages.map((x) => x.toFixed(2)).join(", ")}] stage-equivalents` : "")
      + `. Step time ${fmtNumber(r.makespan, 2)}.</p>`;
  },
});
