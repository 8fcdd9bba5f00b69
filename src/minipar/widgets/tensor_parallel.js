// minipar-requires: memory_time
// Tensor-parallel chapter: JavaScript twins of minipar.cost.chapters.tensor_parallel (layer_forward_flops,
// comm_compute_ratio, layer_comm_fraction, tp_sent_bytes_per_layer) and of
// minipar.widgets.tensor_parallel.tp_layer_model; the tp-layer explorer. Sources: Shoeybi et al.
// 2019 §3 (4 all-reduces of bsh per layer); Narayanan et al. 2021 §5.1 (24bsh² + 4bs²h forward
// FLOPs); Korthikanti et al. 2022 Table 2. Parity with Python: tests/test_tensor_parallel_explorer.py.

function checkInts(pairs) {
  for (const [k, v] of pairs) if (!Number.isInteger(v) || v < 1) throw new Error(`${k} (${v}) must be an integer >= 1`);
}

// Python: layer_forward_flops(b, s, h, t)
export function layerForwardFlops(b, s, h, t = 1) {
  checkInts([["b", b], ["s", s], ["h", h], ["t", t]]);
  return (24 * b * s * h * h + 4 * b * s * s * h) / t;
}

// Python: comm_compute_ratio(b, s, h, t, *, flops, bandwidth, alpha, bytes_per_elem)
export function commComputeRatio(b, s, h, t, flops, bandwidth, alpha = 0.0, bytesPerElem = 2) {
  if (flops <= 0 || bandwidth <= 0 || alpha < 0) {
    throw new Error(`flops (${flops}) and bandwidth (${bandwidth}) must be > 0, alpha (${alpha}) >= 0`);
  }
  if (t === 1) return 0.0;
  const msg = b * s * h * bytesPerElem;
  const comm = 2 * (2 * (t - 1) * alpha + ((2 * (t - 1)) / t) * msg / bandwidth);
  return comm / (layerForwardFlops(b, s, h, t) / flops);
}

// Python: layer_comm_fraction(b, s, h, t, *, flops, bandwidth, alpha, bytes_per_elem)
export function layerCommFraction(b, s, h, t, flops, bandwidth, alpha = 0.0, bytesPerElem = 2) {
  const x = (2 * commComputeRatio(b, s, h, t, flops, bandwidth, alpha, bytesPerElem)) / 3;
  return x / (1 + x);
}

// Python: tp_sent_bytes_per_layer(b, s, h, t, bytes_per_elem, sp): 4 · 2(t−1)/t · bsh · bytes
export function tpSentBytesPerLayer(b, s, h, t, bytesPerElem = 2, sp = false) {
  checkInts([["b", b], ["s", s], ["h", h], ["t", t]]);
  if (t === 1) return 0;
  const size = b * s * h * bytesPerElem;
  return sp ? 4 * ((t - 1) / t) * size + 4 * ((t - 1) / t) * size : 4 * ((2 * (t - 1)) / t) * size;
}

// Python: minipar.widgets.tensor_parallel.tp_layer_model
export function tpLayerModel(h, a, s, b, t, flops, bandwidth, alpha, sp) {
  checkNumbers(COUNT, [["t", t], ["h", h], ["a", a], ["s", s], ["b", b]]);
  const act = activationBytesPerLayer(s, b, h, a, t, sp);
  return {
    ratio: commComputeRatio(b, s, h, t, flops, bandwidth, alpha),
    share: layerCommFraction(b, s, h, t, flops, bandwidth, alpha),
    sent_bytes: tpSentBytesPerLayer(b, s, h, t, 2, sp),
    activation_bytes: act,
  };
}

const TS = [1, 2, 4, 8, 16, 32, 64];
const HS = [1024, 2048, 4096, 5120, 8192, 12288, 16384, 20480, 25600];
const SS = [512, 1024, 2048, 4096, 8192, 16384, 32768];
const COLORS = {"nvlink4-h100": "#3182bd", "pcie5-x16": "#31a354", "ib-ndr400": "#e6550d", "eth-100g": "#756bb1"};

// Controls that do not apply (greyed out): at t = 1 nothing is communicated, so neither the
// link nor sequence parallelism changes anything.
export function tpDisabled(v) {
  return v.t === 1 ? ["link", "sp"] : [];
}

// config (Python: minipar.widgets.tensor_parallel.tp_config): {links: {name: {alpha, bandwidth}}, gpus: {name: bf16 flops}}
registerExplorer("tp-layer", {
  title: "Tensor parallelism, one transformer layer (bf16, no overlap)",
  controls: [
    {name: "t", label: "t", type: "number", min: 1, max: 64, step: 1, value: 8},
    {name: "h", label: "h", type: "range", values: HS, value: 12288},
    {name: "a", label: "a (heads)", type: "number", min: 1, max: 512, step: 1, value: 96},
    {name: "s", label: "s", type: "range", values: SS, value: 2048},
    {name: "b", label: "b", type: "number", min: 1, max: 1024, step: 1, value: 1},
    {name: "link", label: "link between the t GPUs", type: "select", options: ["nvlink4-h100", "pcie5-x16", "ib-ndr400", "eth-100g"], value: "nvlink4-h100", configOptions: "links"},
    {name: "gpu", label: "GPU", type: "select", options: ["H100-SXM"], value: "H100-SXM", configOptions: "gpus"},
    {name: "sp", label: "sequence parallelism", type: "checkbox", value: false},
  ],
  disabled: tpDisabled,
  draw(v, config) {
    const L = configEntry(config, "links", v.link), F = configEntry(config, "gpus", v.gpu);
    const links = config.links;
    const r = tpLayerModel(v.h, v.a, v.s, v.b, v.t, F, L.bandwidth, L.alpha, v.sp);
    const series = Object.entries(links).map(([name, l]) => ({
      name, color: COLORS[name], xs: TS, ys: TS.map((t) => 100 * layerCommFraction(v.b, v.s, v.h, t, F, l.bandwidth, l.alpha)),
    }));
    const svg = lineChart({
      title: `share of the layer's time in TP all-reduces, h = ${v.h}, s = ${v.s}`,
      xlabel: "t (tensor-parallel GPUs)", ylabel: "communication share (%)", xlog: true,
      series, points: [{x: v.t, y: 100 * r.share, color: "#c00", label: `t = ${v.t} over ${v.link}`}],
    });
    // saved activations per GPU against t, both modes; the checkbox picks the marked curve
    const fits = (t) => { try { activationBytesPerLayer(v.s, v.b, v.h, v.a, t, false); return v.a % t === 0; } catch (e) { return false; } };
    const tsMem = TS.filter(fits);
    const GiB = 2 ** 30;
    const memSeries = [false, true].map((sp) => ({
      name: sp ? "TP + sequence parallelism" : "TP alone", color: sp ? "#e6550d" : "#3182bd",
      xs: tsMem, ys: tsMem.map((t) => activationBytesPerLayer(v.s, v.b, v.h, v.a, t, sp) / GiB),
    }));
    const mode = v.sp ? "TP + SP" : "TP alone";
    const memSvg = lineChart({
      title: `saved activations per GPU per layer (16-bit, no recomputation), b = ${v.b}`,
      xlabel: "t (tensor-parallel GPUs)", ylabel: "GiB per GPU per layer", xlog: true,
      series: memSeries, points: [{x: v.t, y: r.activation_bytes / GiB, color: "#c00", label: `t = ${v.t}, ${mode}`}],
    });
    const other = activationBytesPerLayer(v.s, v.b, v.h, v.a, v.t, !v.sp);
    const colls = v.sp ? "four all-gathers and four reduce-scatters (sequence parallelism; the same bytes as four all-reduces)"
      : "four all-reduces";
    return svg + `<p>At t = ${v.t} over ${escapeHtml(v.link)}: communication / GEMM time in forward = <b>${r.ratio.toFixed(3)}</b>; `
      + `the collectives take <b>${(100 * r.share).toFixed(1)} %</b> of forward + backward if nothing overlaps. `
      + `Each GPU sends ${fmtBytes(r.sent_bytes, false)} (decimal: 1 MB = 10⁶ bytes, as link speeds) per layer per micro-batch in ${colls}. `
      + `Only the latency term α of the ratio shrinks as b grows; its bandwidth term does not change with b, since traffic and FLOPs both grow with b·s.</p>`
      + memSvg
      + `<p>Saved activations per GPU per layer with ${mode}: <b>${fmtBytes(r.activation_bytes, true)}</b> `
      + `(${v.sp ? "TP alone" : "with sequence parallelism"}: ${fmtBytes(other, true)}; binary, as the chart: 1 GiB = 2³⁰ bytes; Korthikanti et al. 2023 Table 2, 16-bit, no recomputation).</p>`;
  },
});
