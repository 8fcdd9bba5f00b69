"""The planner against published measurements: step time and TFLOP/s per GPU, predicted vs run.

Pure Python. Each row is a training run whose authors published its layout and its measured
throughput; :func:`published_runs` sets the planner's model (:func:`minipar.cost.three_d.evaluate`,
one set of A100 constants, nothing fitted per row) against it.

Published TFLOP/s are turned into a step time with the FLOP count the authors used: Narayanan et
al. 2021 Eq. 3 (full recomputation, :func:`minipar.cost.model.flops_per_iteration` with
``"full"``), step = Eq. 3 / (N · X). MT-NLG published the step time itself (60.1 s).

Rows (all on A100-80GB, seq 2048, micro-batch 1 unless said, full recomputation as run):
  * Narayanan et al. 2021 Table 1, all ten rows (1.7 B … 1 T; V = 51,200), Selene: DGX A100,
    NVLink 3 (300 GB/s per direction), 8 × HDR 200 Gb/s per node (25 GB/s per GPU). Megatron-LM
    of 2021 reduced the fp32 gradients after the backward (no DP overlap), ZeRO 0.
  * GPT-3 175B on 1024 A100, B = 1536: 140 TFLOP/s per GPU (Narayanan et al. 2021 §5.1, the X
    of their training-time estimate), layout t = 8, p = 16, d = 8 (Megatron's rule of thumb,
    :func:`minipar.cost.three_d.megatron_rule_layout`).
  * MT-NLG 530B (Smith et al. 2022 §3): 2240 A100 (280 DGX nodes), t = 8, p = 35, d = 8,
    B = 1920: 60.1 s per iteration.
  * BLOOM 176B (BigScience 2022 §3.4): 384 A100 on Jean Zay (4 × 100 Gb/s Omni-Path per 8-GPU
    node = 6.25 GB/s per GPU), t = 4, p = 12, d = 8, b = 2, B = 2048, V = 250,880: about 150
    TFLOP/s per GPU. Its 70 layers are split over 12 stages together with the embedding and the
    head (72 units); the planner needs p | L, so the row uses 72 layers for the stage (one stage
    = 6 layers) and the real 70 for the FLOPs.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from . import three_d
from .model import flops_per_iteration

SEQ, VOCAB = 2048, 51200

# Narayanan et al. 2021, Table 1: (params, a, h, L, t, p, GPUs, B, TFLOP/s per GPU)
PTD_P_TABLE1 = [
    ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137),
    ("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138),
    ("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142),
    ("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135),
    ("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138),
    ("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140),
    ("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148),
    ("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155),
    ("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163),
    ("1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


@dataclass(frozen=True)
class Run:
    """One published run: what was run and what was measured."""
    name: str
    source: str                # BibTeX key in book/references.bib
    where: str                 # table or section of the source
    model: three_d.ModelShape
    gpus: int
    layout: tuple[int, int, int]   # (t, p, d)
    batch: int                 # B, sequences per step
    micro_batch: int = 1
    recompute: str = "full"
    zero: int = 0
    published_tflops: float | None = None     # per GPU, with the source's FLOP count (Eq. 3)
    published_step: float | None = None       # seconds, when the source gives the time itself
    intra: str = "nvlink3-a100"
    inter: str = "ib-hdr200"
    dp_overlap: bool = False
    flops_layers: int | None = None           # layers for the FLOP count when != model.layers
    note: str = ""


@dataclass(frozen=True)
class Row:
    name: str
    source: str
    where: str
    layout: tuple[int, int, int]
    gpus: int
    batch: int
    published_step: float          # s
    published_tflops: float        # TFLOP/s per GPU (Eq. 3 FLOPs)
    predicted_step: float
    predicted_tflops: float
    error: float                   # (predicted − published) / published step time, in %
    fits: bool
    config: three_d.Config = field(repr=False)
    note: str = ""


def _ptd_p_runs() -> list[Run]:
    return [Run(f"PTD-P {name}", "narayanan2021", "Table 1",
                three_d.ModelShape(L, h, a, SEQ, VOCAB), n, (t, p, n // (t * p)), B,
                published_tflops=x)
            for name, a, h, L, t, p, n, B, x in PTD_P_TABLE1]


RUNS: list[Run] = _ptd_p_runs() + [
    Run("GPT-3 175B", "narayanan2021", "§5.1", three_d.MODELS["gpt3-175b"], 1024, (8, 16, 8),
        1536, published_tflops=140,
        note="the X = 140 TFLOP/s of the paper's 34-day estimate; layout by Megatron's rule"),
    Run("MT-NLG 530B", "smith2022mtnlg", "§3", three_d.MODELS["mt-nlg-530b"], 2240, (8, 35, 8),
        1920, published_step=60.1,
        note="DeepSpeed's pipeline engine with Megatron's tensor parallelism"),
    Run("BLOOM 176B", "bigscience2022bloom", "§3.4",
        three_d.ModelShape(72, 14336, 112, 2048, 250880), 384, (4, 12, 8), 2048,
        micro_batch=2, zero=1, published_tflops=150, inter="opa-jean-zay", flops_layers=70,
        note="Jean Zay: 4 × 100 Gb/s Omni-Path per 8 GPUs; 70 layers + 2 embedding units "
             "= 72 pipeline units"),
]


def predict(run: Run, **model_options) -> Row:
    """The planner's prediction for one published run (``model_options`` go to
    :func:`minipar.cost.three_d.evaluate`, e.g. ``grad_reduce_bytes``)."""
    t, p, d = run.layout
    m_ = run.model
    cl = three_d.cluster(run.gpus, 8, "A100-80GB", intra=run.intra, inter=run.inter)
    opts = dict(dp_overlap=run.dp_overlap) | model_options
    c = three_d.evaluate(m_, cl, run.batch, tp=t, pp=p, dp=d, micro_batch=run.micro_batch,
                         recompute=run.recompute, zero=run.zero, **opts)
    flops = flops_per_iteration(run.batch, m_.seq, run.flops_layers or m_.layers, m_.hidden,
                                m_.vocab, "full")
    if run.published_step is not None:
        pub_step = run.published_step
        pub_x = flops / (run.gpus * pub_step) / 1e12
    else:
        pub_x = run.published_tflops
        pub_step = flops / (run.gpus * pub_x * 1e12)
    return Row(run.name, run.source, run.where, run.layout, run.gpus, run.batch, pub_step, pub_x,
               c.step_seconds, flops / (run.gpus * c.step_seconds) / 1e12,
               100 * (c.step_seconds / pub_step - 1), c.fits, c, run.note)


def published_runs(**model_options) -> list[Row]:
    """Every published run of :data:`RUNS` with its predicted step time and TFLOP/s per GPU:
    rows of (name, source, where, layout (t, p, d), gpus, batch, published_step,
    published_tflops, predicted_step, predicted_tflops, error %, fits, config, note)."""
    return [predict(r, **model_options) for r in RUNS]


def spearman(xs, ys) -> float:
    """Spearman's rank correlation (average ranks for ties), pure Python."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"need two sequences of equal length >= 2 (got {len(xs)}, {len(ys)})")
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return cov / (vx * vy)


def zero3_comparison(model: str = "gpt3-175b", batch: int = 1536,
                     gpus: tuple[int, ...] = (384, 768, 1536), *, zero3_overlap: bool = True,
                     bandwidth_factor: float = 1.0) -> list[dict]:
    """Narayanan et al. 2021 §5.2 (Figure 10): PTD-P against ZeRO-3 without model parallelism at
    a fixed global batch as the GPU count doubles, both with full recomputation and no sequence
    parallelism (as run in 2021). For each N: the best PTD-P layout (t = 8, ZeRO ≤ 1, no DP
    overlap), the best ZeRO-3 layout (t = p = 1), and ``ratio`` = ZeRO-3 step / PTD-P step
    (> 1: PTD-P faster). The paper measured PTD-P ahead, by about 70 % once N doubles; this
    model, whose ZeRO-3 collectives run at the NCCL-ideal hierarchical bandwidth and hide under
    one layer's compute, does not reproduce that gap (see tests/test_cost_validation.py).
    ``zero3_overlap=False`` exposes all of ZeRO-3's collectives; ``bandwidth_factor`` divides
    both links' bandwidth for ZeRO-3 only (:func:`zero3_missing_effect`)."""
    m_ = three_d.MODELS[model]
    out = []
    for n in gpus:
        cl = three_d.cluster(n, 8, "A100-80GB")
        slow = cl if bandwidth_factor == 1 else replace(
            cl, intra=replace(cl.intra, bandwidth=cl.intra.bandwidth / bandwidth_factor),
            inter=replace(cl.inter, bandwidth=cl.inter.bandwidth / bandwidth_factor))
        ptdp = [c for z in (0, 1) for c in three_d.search(m_, cl, batch, tp=8, zero=z,
                                                          recompute="full", dp_overlap=False)
                if c.fits and not c.sp]
        z3 = [c for c in three_d.search(m_, slow, batch, tp=1, pp=1, zero=3, recompute="full",
                                        zero3_overlap=zero3_overlap) if c.fits]
        best_p = min(ptdp, key=lambda c: c.step_seconds) if ptdp else None
        best_z = min(z3, key=lambda c: c.step_seconds) if z3 else None
        out.append({"gpus": n, "ptdp": best_p, "zero3": best_z,
                    "ratio": (best_z.step_seconds / best_p.step_seconds
                              if best_p and best_z else None)})
    return out


ZERO3_PUBLISHED_DOUBLED = 1.7
"""Narayanan et al. 2021 §5.2: PTD-P's throughput over ZeRO-3's once the GPU count doubles at
a fixed global batch (175B and 530B alike)."""


def zero3_missing_effect(model: str = "gpt3-175b", batch: int = 1536,
                         gpus: tuple[int, ...] = (384, 768, 1536)) -> dict:
    """What the model would need to reproduce §5.2, with evidence rather than a fit.

    ``ratios``: ZeRO-3 step / PTD-P step as modelled (prefetch overlap, NCCL-ideal bandwidth).
    ``no_overlap``: the same with none of ZeRO-3's collectives hidden: the most that missing
    overlap can explain. ``bandwidth_factor``: by how much ZeRO-3's achieved bandwidth (both
    links) would have to fall below the α-β model's, with prefetching kept, for the ratio at
    ``gpus[1]`` (the doubled count) to reach :data:`ZERO3_PUBLISHED_DOUBLED`; found by bisection,
    reported, never used by the planner."""
    def ratio_at(k: float, overlap: bool = True) -> float:
        return zero3_comparison(model, batch, gpus[1:2], zero3_overlap=overlap,
                                bandwidth_factor=k)[0]["ratio"]
    lo, hi = 1.0, 64.0
    if ratio_at(hi) < ZERO3_PUBLISHED_DOUBLED:
        k = float("inf")
    else:
        for _ in range(30):
            mid = (lo * hi) ** 0.5
            lo, hi = (mid, hi) if ratio_at(mid) < ZERO3_PUBLISHED_DOUBLED else (lo, mid)
        k = hi
    return {"gpus": list(gpus),
            "ratios": [x["ratio"] for x in zero3_comparison(model, batch, gpus)],
            "no_overlap": [x["ratio"] for x in zero3_comparison(model, batch, gpus,
                                                                  zero3_overlap=False)],
            "bandwidth_factor": k, "published_doubled": ZERO3_PUBLISHED_DOUBLED}


def table(rows: list[Row] | None = None) -> str:
    """The validation table as plain text (one line per row), layouts in the course's
    (d, t, p) order (book/notation.md)."""
    rows = published_runs() if rows is None else rows
    lines = [f"{'run':<16} {'d,t,p':>10} {'GPUs':>5} {'B':>5} {'pub s':>7} {'pred s':>7} "
             f"{'pub TF':>6} {'pred TF':>7} {'err':>6}"]
    for r in rows:
        t, p, d = r.layout                             # stored as published: (t, p, d)
        lines.append(f"{r.name:<16} {f'{d},{t},{p}':>10} {r.gpus:>5} {r.batch:>5} "
                     f"{r.published_step:>7.2f} {r.predicted_step:>7.2f} "
                     f"{r.published_tflops:>6.1f} {r.predicted_tflops:>7.1f} {r.error:>+5.1f}%")
    return "\n".join(lines)


def zero3_sentence(effect: dict | None = None) -> str:
    """The chapter's §5.2 clause, written from :func:`zero3_missing_effect`'s numbers whichever
    way they go (the book cannot say more than the model computes)."""
    e = zero3_missing_effect() if effect is None else effect
    ratios, gpus = e["ratios"], ", ".join(map(str, e["gpus"]))
    if all(r > 1 for r in ratios):
        head = (f"the planner also puts PTD-P ahead, by {100 * (min(ratios) - 1):.0f}–"
                f"{100 * (max(ratios) - 1):.0f} % on {gpus} GPUs, "
                + ("and its gap grows with the GPU count" if ratios[-1] > ratios[0]
                   else "but its gap does not grow with the GPU count as the measured one did"))
    elif all(r < 1 for r in ratios):
        head = (f"the planner disagrees: it predicts ZeRO-3 faster by "
                f"{100 * (1 / max(ratios) - 1):.0f}–{100 * (1 / min(ratios) - 1):.0f} % on "
                f"{gpus} GPUs")
    else:
        head = (f"the planner's ratios (ZeRO-3 step over PTD-P step: "
                f"{', '.join(f'{r:.2f}' for r in ratios)} on {gpus} GPUs) change sign, "
                "unlike the measurement")
    no = ", ".join(f"{r:.2f}" for r in e["no_overlap"])
    k = e["bandwidth_factor"]
    need = (f"ZeRO-3's collectives would have to run {k:.1f} times slower than the α-β model's "
            "NCCL-ideal bandwidth" if k != float("inf") else
            "no bandwidth deficit up to 64 times is enough")
    return (f"{head}. Missing overlap cannot explain the gap: with none of ZeRO-3's "
            f"collectives hidden the ratios become {no}. To reach the measured "
            f"{e['published_doubled']:.1f} at {e['gpus'][1]} GPUs with prefetching kept, {need}: "
            "the achieved bandwidth of that implementation at that scale is the missing effect. "
            "The ring's latency term cannot supply it either: even over all N ranks, α(N−1) "
            "per collective is small next to one layer's compute")
