"""The planner against measured runs: published A100 runs, and whole steps measured on one H200.

Pure Python. Two tables, kept apart by what set each constant:

**Published runs** (:func:`published_runs`): training runs whose authors published the layout
and the measured throughput, each predicted by :func:`minipar.cost.planner.three_d.evaluate` with the
inputs as run. Published TFLOP/s are turned into a step time with the authors' FLOP count
(Narayanan et al. 2021 Eq. 3, full recomputation, :func:`minipar.cost.model.flops_per_iteration`
with ``"full"``): step = Eq. 3 / (N · X).

  * Narayanan et al. 2021 ("PTD-P") Table 1, all ten rows (1.7 B … 1 T; V = 51,200, s = 2048,
    full recomputation), Selene: DGX A100, NVLink 3 (300 GB/s per direction), one HDR 200 Gb/s
    NIC per GPU (25 GB/s). The paper does not print the micro-batch or the interleaving; its
    reproduction scripts do (Megatron-LM, ``examples/sc21/run_table_1.sh``, the paper's
    artifact): micro-batch 16, 16, 16, 8, 4, 2, 2, 1, 1, 1 and layers per virtual stage 5, 5,
    3, 1 for 76 B, 145 B, 310 B and 530 B (v = 3, 2, 2, 3; §5.1 says Table 1 ran the
    interleaved schedule with scatter/gather), PyTorch DDP (its gradient all-reduce overlaps
    the backward) for the four p = 1 rows, Megatron's own DDP (reduce after the flush) for the
    rest. Each row is predicted three ways: as run (that b and v), at b = 1 (the v as run),
    and at the micro-batch the planner picks for the published (d, t, p) and v
    (:func:`planner_micro_batch`, as ``minipar plan`` would).
  * GPT-3 175B (PTD-P §5.1, an ASSUMED 140 TFLOP/s, not a measured run; layout by Megatron's
    rule, :func:`minipar.cost.planner.three_d.megatron_rule_layout`), MT-NLG 530B (Smith et
    al. 2022 §2.4) and BLOOM 176B (BigScience 2022 §3.4, Jean Zay's 6.25 GB/s Omni-Path per
    GPU), as run: ``measurements/published_2021_other.json``. BLOOM's 70 layers and the
    embedding and head are 72 pipeline units, 6 per stage; the row keeps the even split it was
    set with (p | L) and prices the last stage: 60 layers (5 per stage, + the head, within 1 %
    of a 6-layer middle stage) and the real 70 for the FLOPs.

**Measured on one H200** (:func:`h200_runs`): the rows of ``measurements/h200_step_times.json``,
whole training steps of GPTs on one GPU (d = t = p = 1, no recomputation, ZeRO 0), predicted
step time and peak memory from the H200's measured constants, with the attention kernel and
the precision recipe that ran. Its fused-attention (SDPA) rows are in-sample for step time
(the element-wise rate) and its peak memories for the third fp32 logit tensor.

What set each constant, calibration apart from validation: ``measurements/README.md`` for the
H200's (and the in-sample rows), :mod:`minipar.cost.kernels.hardware` for the A100's η and
bytes per attention score (:func:`fit_a100` on :data:`CALIBRATION_ROWS`, checked on the other
Table 1 rows, GPT-3, BLOOM, MT-NLG and §5.2) and the links (datasheets, α assumed). ZeRO-3's
flat ring and its 2 gradient bytes were chosen on §5.2 itself (in-sample there); the memory
headroom, the modern recipes' reserve and every α are assumptions.

ZeRO-3 against PTD-P (Narayanan et al. 2021 §5.2, Table 2; :func:`zero3_comparison`): each
layout as run, full recomputation; :func:`zero3_missing_effect` says what the model leaves out
there. The plain-text tables are the book's: ``python book/glue/validation_tables.py``.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..kernels import compute
from ..kernels.hardware import GPU, GPUS
from ..model import flops_per_iteration
from ..planner import three_d
from ..planner.three_d_terms import Options

SEQ, VOCAB = 2048, 51200

# Narayanan et al. 2021, Table 1 with the reproduction script's micro-batch, interleaving and DDP
# (measurements/published_2021.json, its columns and source named there), as tuples
# (params, a, h, L, t, p, GPUs, B, TFLOP/s per GPU, b, layers per virtual stage, DDP).
_MEASUREMENTS = Path(__file__).resolve().parent / "measurements"
_PUBLISHED = json.loads((_MEASUREMENTS / "published_2021.json").read_text())
PTD_P_TABLE1 = [tuple(r) for r in _PUBLISHED["rows"]]
# GPT-3 175B, MT-NLG 530B and BLOOM 176B as run, and §5.2's Table 2, their sources named there
_OTHER = json.loads((_MEASUREMENTS / "published_2021_other.json").read_text())

ERA_2021 = {"attention": "unfused", "precision": "2021"}
"""The inputs that changed since the A100 runs, passed explicitly as those runs had them:
Megatron-LM's unfused attention kernels (the b·a·s² scores through HBM) and the "2021"
precision pricing (:data:`minipar.cost.planner.three_d_terms.RECIPES`)."""

H200_RECIPE = "megatron"
"""The recipe the H200 steps trained with: bf16 weights, fp32 main gradients, fp32 master
weights and Adam moments (18 bytes per parameter), fp32 loss (the measurements' README)."""

MICRO_BATCH_MODES = ("as run", "1", "planner")
"""How :func:`published_runs` sets each run's micro-batch: the one that ran (where published),
1 (every row before), or the one the planner picks for the published layout."""

PLANNER_MAX_MICRO_BATCH = three_d.Space().max_micro_batch
"""The largest micro-batch ``minipar plan`` tries (its search's default)."""


@dataclass(frozen=True)
class Run:
    """One published run: what was run and what was measured."""

    name: str
    source: str  # BibTeX key in book/references.bib
    where: str  # table or section of the source
    model: three_d.ModelShape
    gpus: int
    layout: tuple[int, int, int]  # (t, p, d) as the sources print it; shown as (d, t, p)
    batch: int  # B, sequences per step
    micro_batch: int = 1
    chunks: int = 1  # v, interleaved model chunks per GPU
    recompute: str = "full"
    zero: int = 0
    published_tflops: float | None = None  # per GPU, with the source's FLOP count (Eq. 3)
    published_step: float | None = None  # seconds, when the source gives the time itself
    intra: str = "nvlink3-a100"
    inter: str = "ib-hdr200"
    dp_overlap: bool = False
    flops_layers: int | None = None  # layers for the FLOP count when != model.layers
    note: str = ""


@dataclass(frozen=True)
class Row:
    name: str
    source: str
    where: str
    layout: tuple[int, int, int]  # (t, p, d)
    gpus: int
    batch: int
    published_step: float  # s
    published_tflops: float  # TFLOP/s per GPU (Eq. 3 FLOPs)
    predicted_step: float
    predicted_tflops: float
    error: float  # (predicted − published) / published step time, in %
    fits: bool
    config: three_d.Config = field(repr=False)
    note: str = ""
    micro_batch: int = 1  # b the prediction used
    chunks: int = 1  # v the prediction used
    mode: str = "as run"  # one of MICRO_BATCH_MODES


def _ptd_p_runs() -> list[Run]:
    out = []
    for name, a, h, L, t, p, n, B, x, b, per_chunk, ddp in PTD_P_TABLE1:
        v = L // (p * per_chunk) if per_chunk else 1
        out.append(
            Run(
                f"PTD-P {name}",
                "narayanan2021",
                "Table 1",
                three_d.ModelShape(L, h, a, SEQ, VOCAB),
                n,
                (t, p, n // (t * p)),
                B,
                micro_batch=b,
                chunks=v,
                published_tflops=x,
                dp_overlap=ddp == "torch",
                note=f"b = {b}, v = {v}, {ddp} DDP (examples/sc21/run_table_1.sh)",
            )
        )
    return out


def _other_run(r: dict) -> Run:
    """A run of ``published_2021_other.json``: its model a preset's name or (L, h, a, s, V)."""
    shape = r["model"]
    model = three_d.MODELS[shape] if isinstance(shape, str) else three_d.ModelShape(*shape)
    return Run(**(r | {"model": model, "layout": tuple(r["layout"])}))


RUNS: list[Run] = _ptd_p_runs() + [_other_run(r) for r in _OTHER["runs"]]


def _evaluate(run: Run, b: int, **kw) -> three_d.Config:
    """``run`` at micro-batch ``b``. ``eta``, ``gemm_rule`` and ``score_bytes`` (``None``: the
    preset's) replace the A100's η, its GEMM rule (:data:`minipar.cost.kernels.compute.GEMM_RULES`)
    and its bytes per attention score; the other keywords go to
    :func:`minipar.cost.planner.three_d.evaluate` (e.g. ``grad_reduce_bytes``)."""
    t, p, d = run.layout
    eta, rule, sb = (kw.pop(k, None) for k in ("eta", "gemm_rule", "score_bytes"))
    cluster = three_d.cluster(
        run.gpus, 8, "A100-80GB", intra=run.intra, inter=run.inter, gemm_efficiency=eta
    )
    swap = {k: v for k, v in (("gemm_rule", rule), ("attention_score_bytes", sb)) if v is not None}
    if swap:
        cluster = replace(cluster, gpu=replace(cluster.gpu, **swap))
    layout = three_d.Layout(run.batch, t, p, d, b, run.chunks, run.recompute, zero=run.zero)
    opts = Options(**(ERA_2021 | dict(dp_overlap=run.dp_overlap) | kw))
    return three_d.evaluate(run.model, cluster, layout, opts)


def planner_micro_batch(run: Run, max_micro_batch: int = PLANNER_MAX_MICRO_BATCH, **kw) -> int:
    """The micro-batch the planner picks for a run's published layout, v, recomputation and
    ZeRO stage: the fastest predicted b among the powers of two up to ``max_micro_batch`` that
    the layout admits (d·b | B, and m a multiple of p when interleaved) and that fit
    (``minipar plan --tp t --pp p --dp d`` ranks the same candidates); ``kw`` as
    :func:`_evaluate`'s."""
    best = None
    for k in range(max_micro_batch.bit_length()):
        b = 1 << k
        if b > max_micro_batch:
            break
        try:
            c = _evaluate(run, b, **kw)
        except ValueError:
            continue
        if c.fits and (best is None or c.step_seconds < best[1]):
            best = (b, c.step_seconds)
    if best is None:
        raise ValueError(f"no micro-batch up to {max_micro_batch} fits {run.name}'s layout")
    return best[0]


def predict(run: Run, micro_batch: str | int = "as run", *, interleaved: bool = True, **kw) -> Row:
    """The planner's prediction for one published run. ``micro_batch``: ``"as run"`` (the
    run's own), ``"1"``, ``"planner"`` (:func:`planner_micro_batch`) or an integer;
    ``interleaved=False`` drops the run's interleaving (v = 1: with b = 1, the inputs every
    Table 1 row had before, on which η was settled); ``kw``: ``eta``, ``gemm_rule``,
    ``score_bytes`` and the model's options, as :func:`_evaluate`'s."""
    if not interleaved:
        run = replace(run, chunks=1)
    if micro_batch == "as run":
        b, mode = run.micro_batch, "as run"
    elif micro_batch == "planner":
        b, mode = planner_micro_batch(run, **kw), "planner"
    elif str(micro_batch).isdigit() and int(micro_batch) >= 1:
        b, mode = int(micro_batch), str(micro_batch)
    else:
        raise ValueError(
            f"micro_batch ({micro_batch!r}) must be one of "
            f"{', '.join(MICRO_BATCH_MODES)} or an integer >= 1"
        )
    c = _evaluate(run, b, **kw)
    model = run.model
    flops = flops_per_iteration(
        run.batch, model.seq, run.flops_layers or model.layers, model.hidden, model.vocab, "full"
    )
    if run.published_step is not None:
        pub_step = run.published_step
        pub_x = flops / (run.gpus * pub_step) / 1e12
    else:
        pub_x = run.published_tflops
        pub_step = flops / (run.gpus * pub_x * 1e12)
    return Row(
        run.name,
        run.source,
        run.where,
        run.layout,
        run.gpus,
        run.batch,
        pub_step,
        pub_x,
        c.step_seconds,
        flops / (run.gpus * c.step_seconds) / 1e12,
        100 * (c.step_seconds / pub_step - 1),
        c.fits,
        c,
        run.note,
        b,
        run.chunks,
        mode,
    )


def published_runs(
    micro_batch: str | int = "as run", *, interleaved: bool = True, **model_options
) -> list[Row]:
    """Every published run of :data:`RUNS` with its predicted step time and TFLOP/s per GPU
    (:class:`Row`), the micro-batch set by ``micro_batch`` (:func:`predict`)."""
    return [predict(r, micro_batch, interleaved=interleaved, **model_options) for r in RUNS]


def table1_summary(micro_batch: str | int = "as run", *, interleaved: bool = True, **kw) -> dict:
    """Table 1's ten rows at one micro-batch choice (``interleaved`` and ``kw``: as
    :func:`predict`): ``rows``, ``within10`` (how many within ±10 % of the published step
    time), ``worst`` (largest |error| in %), ``too_fast`` (rows predicted more than 10 % too
    fast) and ``spearman`` (predicted vs published TFLOP/s)."""
    rows = [
        predict(r, micro_batch, interleaved=interleaved, **kw) for r in RUNS if r.where == "Table 1"
    ]
    return {
        "mode": str(micro_batch),
        "rows": rows,
        "within10": sum(abs(r.error) <= 10 for r in rows),
        "worst": max(abs(r.error) for r in rows),
        "too_fast": [r.name for r in rows if r.error < -10],
        "spearman": spearman(
            [r.predicted_tflops for r in rows], [r.published_tflops for r in rows]
        ),
    }


CALIBRATION_ROWS = tuple(f"PTD-P {r[0]}" for r in PTD_P_TABLE1[::2])
"""Every other Table 1 row (1.7 B, 7.5 B, 39.1 B, 145.6 B, 529.6 B): the calibration half of
:func:`split_check`; the other five are held out from the fit of η and the bytes per score,
not from the choice of the model's form, which was made with all ten in view (a constant
145 TFLOP/s per GPU already puts 8 of the 10 within ±10 %)."""


def _named(rows: tuple[str, ...]) -> list[Run]:
    runs = [r for r in RUNS if r.name in rows]
    if len(runs) != len(rows):
        raise ValueError(f"rows ({', '.join(rows)}) must name runs of RUNS")
    return runs


def calibration_loss(
    eta: float,
    score_bytes: float,
    micro_batch: str | int = "planner",
    rows: tuple[str, ...] = CALIBRATION_ROWS,
    gemm_rule: str | None = None,
) -> float:
    """Σ log²(predicted / published step time) over ``rows`` with the A100's η and bytes per
    attention score set to ``eta`` and ``score_bytes`` (the other constants as the preset)."""
    preds = [
        predict(r, micro_batch, eta=eta, gemm_rule=gemm_rule, score_bytes=score_bytes)
        for r in _named(rows)
    ]
    return sum(math.log(x.predicted_step / x.published_step) ** 2 for x in preds)


@functools.lru_cache(maxsize=8)
def fit_a100(
    micro_batch: str | int = "planner",
    rows: tuple[str, ...] = CALIBRATION_ROWS,
    gemm_rule: str | None = None,
) -> dict:
    """The A100's two fitted constants, η and the bytes per attention score, that minimise
    :func:`calibration_loss` on ``rows`` (least squares of the log error, every other Table 1
    row by default): a grid of step 0.02 × 5 bytes, then 0.005 × 1 byte around its best.
    Returns ``eta``, ``score_bytes`` and ``loss``. Two constants because the error has two
    shapes: a level (η moves every row alike) and a slope in the model's size (scores per
    FLOP fall as a/h², so the score bytes weigh on the small models only)."""

    def best(etas, sbs):
        return min(
            (calibration_loss(e, b, micro_batch, rows, gemm_rule), e, b) for e in etas for b in sbs
        )

    _, e0, b0 = best([0.5 + 0.02 * i for i in range(23)], [5.0 * j for j in range(1, 21)])
    loss, eta, sb = best(
        [e0 + 0.005 * i for i in range(-4, 5) if e0 + 0.005 * i > 0],
        [b0 + j for j in range(-5, 6) if b0 + j >= 0],
    )
    return {"eta": eta, "score_bytes": sb, "loss": loss}


def settle_eta(
    micro_batch: str | int = "as run",
    rows: tuple[str, ...] = CALIBRATION_ROWS,
    lo: float = 0.3,
    hi: float = 1.0,
    gemm_rule: str | None = None,
    score_bytes: float | None = None,
) -> float:
    """The A100 η alone that makes the geometric mean of predicted over published step time 1
    on ``rows`` (bisection; the step time falls as η grows), at ``micro_batch``
    (:func:`predict`): the one-constant calibration of the negative controls."""
    runs = _named(rows)

    def log_ratio(eta: float) -> float:
        rows_ = [
            predict(r, micro_batch, eta=eta, gemm_rule=gemm_rule, score_bytes=score_bytes)
            for r in runs
        ]
        return sum(math.log(x.predicted_step / x.published_step) for x in rows_)

    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if log_ratio(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


def split_check(
    micro_batch: str | int = "planner",
    gemm_rule: str | None = None,
    score_bytes: float | None = None,
    *,
    fit: str = "both",
) -> dict:
    """Constants set on :data:`CALIBRATION_ROWS` at ``micro_batch``, checked on the other five
    Table 1 rows. ``fit="both"``: η and the score bytes by :func:`fit_a100`; ``fit="eta"``: η
    alone (:func:`settle_eta`) with ``score_bytes`` fixed (the preset's if None). ``gemm_rule``
    prices the A100's GEMMs by another rule of :mod:`minipar.cost.kernels.compute` (``"waves"``: the
    2021 tile/wave rule, the negative control). Returns ``eta``, ``score_bytes``,
    ``calibration`` and ``held_out`` (:class:`Row` lists), ``held_out_within10``,
    ``held_out_worst`` (|error| in %), ``within10`` and ``worst`` over all ten, and
    ``spearman`` over all ten rows."""
    if fit == "both":
        f = fit_a100(micro_batch, gemm_rule=gemm_rule)
        eta, sb = f["eta"], f["score_bytes"]
    elif fit == "eta":
        sb = GPUS["A100-80GB"].attention_score_bytes if score_bytes is None else score_bytes
        eta = settle_eta(micro_batch, gemm_rule=gemm_rule, score_bytes=sb)
    else:
        raise ValueError(f"fit ({fit!r}) must be one of both, eta")
    summary = table1_summary(micro_batch, eta=eta, gemm_rule=gemm_rule, score_bytes=sb)
    rows = summary["rows"]
    held = [r for r in rows if r.name not in CALIBRATION_ROWS]
    return {k: summary[k] for k in ("mode", "within10", "worst", "spearman")} | {
        "eta": eta,
        "score_bytes": sb,
        "gemm_rule": gemm_rule or GPUS["A100-80GB"].gemm_rule,
        "calibration": [r for r in rows if r.name in CALIBRATION_ROWS],
        "held_out": held,
        "held_out_within10": sum(abs(r.error) <= 10 for r in held),
        "held_out_worst": max(abs(r.error) for r in held),
    }


def wave_quantisation_evidence(q_below: float = 0.8) -> dict:
    """Why no preset keeps the 2021 tile/wave GEMM rule (:func:`minipar.cost.kernels.compute
    .wave_efficiency`, one 256×128 tile): checked against the H200 GEMM calibration set
    (``measurements/h200_layer_gemm_times.json``, every GEMM of a layer at b·s = 2048-8192
    rows).

    For the non-batched GEMMs the rule quantises to q < ``q_below``: ``q`` (the rule's median)
    against ``measured`` (the median measured fraction of the 8192³ ceiling), and ``n``.
    cuBLAS picks smaller tiles (and split-K) for such shapes, so the rule over-penalises the
    small-M GEMMs of b = 1, and a larger micro-batch looks faster than it runs."""
    data = json.loads((_MEASUREMENTS / "h200_layer_gemm_times.json").read_text())
    sms = GPUS["H200"].sms
    qs, meas = [], []
    for g in data["gemms"]:
        if g["batch"] != 1:
            continue
        q = compute.wave_efficiency(g["M"], g["N"], sms)
        if q < q_below:
            qs.append(q)
            meas.append(g["tflops"] * 1e12 / data["gemm_ceiling_flops"])
    return {"n": len(qs), "q": statistics.median(qs), "measured": statistics.median(meas)}


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


ZERO3_TABLE2: dict[str, dict] = _OTHER["zero3_table2"]
"""Narayanan et al. 2021 §5.2, Table 2, as run (``measurements/published_2021_other.json``, its
columns and the transcription's check named there): per model PTD-P's ``ptdp_layout`` (t, p)
and ``rows`` of (PTD-P GPUs, B, TFLOP/s per GPU) and (ZeRO-3 GPUs, B, micro-batch, TFLOP/s)."""

ZERO3_PUBLISHED_DOUBLED = 1.7
"""Narayanan et al. 2021 §5.2: PTD-P's throughput over ZeRO-3's once the GPU count doubles at
a fixed global batch (175B and 530B alike)."""


def _tflops(model: three_d.ModelShape, batch: int, gpus: int, step: float) -> float:
    """TFLOP/s per GPU with the paper's FLOP count (Eq. 3, full recomputation)."""
    return (
        flops_per_iteration(batch, model.seq, model.layers, model.hidden, model.vocab, "full")
        / (gpus * step)
        / 1e12
    )


ZERO3_GRAD_REDUCE_BYTES = 2
"""Bytes per gradient element in ZeRO-3's reduce-scatter as §5.2 ran it: DeepSpeed reduces in
its ``communication_data_type``, which defaults to the 16-bit training dtype (fp16) unless
configured; Megatron-LM's own data-parallel reduction defaults to fp32
(:data:`minipar.cost.planner.three_d.GRAD_REDUCE_BYTES`)."""


def _slowed(cluster: three_d.Cluster, factor: float) -> three_d.Cluster:
    """``cluster`` with both links' bandwidth divided by ``factor``."""
    if factor == 1:
        return cluster
    return replace(
        cluster,
        intra=replace(cluster.intra, bandwidth=cluster.intra.bandwidth / factor),
        inter=replace(cluster.inter, bandwidth=cluster.inter.bandwidth / factor),
    )


def zero3_comparison(
    model: str = "gpt3-175b",
    *,
    zero3_overlap: bool = True,
    zero3_collectives: str = "flat-ring",
    bandwidth_factor: float = 1.0,
    zero3_grad_reduce_bytes: float = ZERO3_GRAD_REDUCE_BYTES,
) -> list[dict]:
    """Narayanan et al. 2021 §5.2 (Table 2): PTD-P against ZeRO-3 without model parallelism at a
    fixed global batch as the GPU count doubles, each layout as run (:data:`ZERO3_TABLE2`; full
    recomputation, no sequence parallelism, PTD-P with ZeRO 0 and no DP overlap, ZeRO-3 with
    t = p = 1).

    Per GPU count: ``gpus`` (ZeRO-3's), ``ptdp_gpus``, the two :class:`~three_d.Config`
    (``ptdp``, ``zero3``), predicted and published TFLOP/s per GPU (Eq. 3 FLOPs) and
    ``ratio`` = PTD-P's predicted TFLOP/s over ZeRO-3's (> 1: PTD-P faster; with equal GPU
    counts and batches, ZeRO-3's step over PTD-P's), against ``published_ratio``.
    ``zero3_overlap=False`` exposes all of ZeRO-3's collectives; ``zero3_collectives`` picks
    their algorithm (:func:`minipar.cost.planner.three_d.zero3_collective_seconds`; ``"hierarchical"``
    is the NCCL-ideal one); ``bandwidth_factor`` divides both links' bandwidth for ZeRO-3 only;
    ``zero3_grad_reduce_bytes`` is ZeRO-3's gradient element in its reduce-scatter (and its
    unsharded layer-gradient buffer): 2 as DeepSpeed ran it (:data:`ZERO3_GRAD_REDUCE_BYTES`),
    4 for Megatron's fp32 default."""
    if model not in ZERO3_TABLE2:
        raise ValueError(
            f"model ({model!r}) must be one of {', '.join(ZERO3_TABLE2)} (the models of §5.2)"
        )
    if not bandwidth_factor > 0:
        raise ValueError(f"bandwidth_factor ({bandwidth_factor}) must be > 0")
    model_shape = three_d.MODELS[model]
    t, p = ZERO3_TABLE2[model]["ptdp_layout"]
    ptdp_opts = Options(**ERA_2021, dp_overlap=False)
    z3_opts = Options(
        **ERA_2021,
        zero3_overlap=zero3_overlap,
        zero3_collectives=zero3_collectives,
        grad_reduce_bytes=zero3_grad_reduce_bytes,
    )
    out = []
    for (n_p, b_p, x_p), (n_z, b_z, mb_z, x_z) in ZERO3_TABLE2[model]["rows"]:
        layout = three_d.Layout(b_p, t, p, n_p // (t * p), 1, recompute="full", zero=0)
        ptdp = three_d.evaluate(
            model_shape, three_d.cluster(n_p, 8, "A100-80GB"), layout, ptdp_opts
        )
        cluster = _slowed(three_d.cluster(n_z, 8, "A100-80GB"), bandwidth_factor)
        layout = three_d.Layout(b_z, 1, 1, n_z, mb_z, recompute="full", zero=3)
        z3 = three_d.evaluate(model_shape, cluster, layout, z3_opts)
        xp, xz = (
            _tflops(model_shape, b_p, n_p, ptdp.step_seconds),
            _tflops(model_shape, b_z, n_z, z3.step_seconds),
        )
        out.append(
            {
                "gpus": n_z,
                "ptdp_gpus": n_p,
                "ptdp": ptdp,
                "zero3": z3,
                "ptdp_tflops": xp,
                "zero3_tflops": xz,
                "published_ptdp_tflops": x_p,
                "published_zero3_tflops": x_z,
                "ratio": xp / xz,
                "published_ratio": x_p / x_z,
            }
        )
    return out


def zero3_missing_effect(model: str = "gpt3-175b") -> dict:
    """§5.2 as modelled, with the evidence for what the model still leaves out (no fit).

    ``ratios`` / ``published``: PTD-P over ZeRO-3 TFLOP/s per GPU, predicted (flat-ring ZeRO-3
    collectives, prefetch bounded by one layer's compute, 3 all-gathers + 1 reduce-scatter per
    layer and micro-batch) and measured. ``hierarchical``: the same with the NCCL-ideal
    algorithm (the old model: ZeRO-3 ahead). ``no_overlap``: with none of ZeRO-3's collectives
    hidden. ``zero3_error``: the predicted ZeRO-3 TFLOP/s against the measured, in % (> 0: the
    model's ZeRO-3 too fast); ``zero3_step``, ``zero3_step_no_overlap`` and
    ``zero3_step_published``: ZeRO-3's step in s with prefetching, with none of its collectives
    hidden, and as measured (Eq. 3 FLOPs over the published TFLOP/s). ``zero3_fits``: whether
    the model's memory admits each ZeRO-3 layout that ran, with ``zero3_gib`` its predicted GiB
    per GPU, ``limit_gib`` the limit and ``gpu_gib`` the GPU's memory it is taken from (the
    limit is the GPU's memory less the 2021 runs' headroom). Numbers only: the chapter's
    sentences are written around them in the book's glue (``book/glue/three_d.py``)."""
    rows = zero3_comparison(model)
    exposed = zero3_comparison(model, zero3_overlap=False)
    return {
        "model": model,
        "gpus": [x["gpus"] for x in rows],
        "micro_batch": [x["zero3"].micro_batch for x in rows],
        "zero3_step": [x["zero3"].step_seconds for x in rows],
        "zero3_step_no_overlap": [x["zero3"].step_seconds for x in exposed],
        "zero3_step_published": [
            x["zero3"].step_seconds * x["zero3_tflops"] / x["published_zero3_tflops"] for x in rows
        ],
        "ptdp_gpus": [x["ptdp_gpus"] for x in rows],
        "ratios": [x["ratio"] for x in rows],
        "published": [x["published_ratio"] for x in rows],
        "hierarchical": [
            x["ratio"] for x in zero3_comparison(model, zero3_collectives="hierarchical")
        ],
        "no_overlap": [x["ratio"] for x in exposed],
        "zero3_error": [100 * (x["zero3_tflops"] / x["published_zero3_tflops"] - 1) for x in rows],
        "ptdp_error": [100 * (x["ptdp_tflops"] / x["published_ptdp_tflops"] - 1) for x in rows],
        "zero3_fits": [x["zero3"].fits for x in rows],
        "zero3_gib": [x["zero3"].bytes_per_gpu / 2**30 for x in rows],
        "limit_gib": rows[0]["zero3"].memory_limit / 2**30,
        "gpu_gib": three_d.cluster(8, 8, "A100-80GB").gpu.memory_bytes / 2**30,
        "published_doubled": ZERO3_PUBLISHED_DOUBLED,
    }


# --- measured on one H200: the validation set -------------------------------------------------

H200_VOCAB = 50304
"""Vocabulary of the measured GPTs (``h200_step_times.json``'s method)."""


def h200_gpu() -> GPU:
    """The ``"H200"`` preset of :mod:`minipar.cost.kernels.hardware` (what set each of its
    constants: its comment there); :func:`h200_calibration_check` compares η and the HBM rate
    with the calibration file."""
    return GPUS["H200"]


def h200_calibration_check(gpu: GPU | None = None) -> dict:
    """The measured η (the 8192³ bf16 matmul's FLOP/s over the dense peak) and HBM rate (the
    2 GiB device copy) of the calibration file, against ``gpu``'s (default :func:`h200_gpu`)."""
    data = json.loads((_MEASUREMENTS / "h200_layer_gemm_times.json").read_text())
    g = gpu or h200_gpu()
    return {
        "eta": g.gemm_efficiency,
        "eta_measured": data["gemm_ceiling_flops"] / g.peak_flops["bf16"],
        "hbm": g.hbm_bandwidth,
        "hbm_measured": data["copy_bytes_per_s"],
    }


@dataclass(frozen=True)
class H200Row:
    name: str
    attention: str  # "sdpa" (PyTorch's fused flash kernel) or "unfused"
    micro_batch: int
    microbatches: int
    measured_step: float  # s
    predicted_step: float | None  # s; None when the planner refuses the layout
    measured_gib: float  # torch.cuda.max_memory_allocated, GiB
    predicted_gib: float  # the planner's bytes per GPU, GiB
    fits: bool  # the planner admits the layout that ran
    config: three_d.Config | None = field(default=None, repr=False)

    @property
    def time_error(self) -> float:
        """(predicted − measured) / measured step time, in % (inf when refused)."""
        if self.predicted_step is None:
            return math.inf
        return 100 * (self.predicted_step / self.measured_step - 1)

    @property
    def memory_error(self) -> float:
        return 100 * (self.predicted_gib / self.measured_gib - 1)


def _supported(options: dict) -> dict:
    """The options :func:`minipar.cost.planner.three_d.evaluate` accepts: the fields of
    :class:`minipar.cost.planner.three_d_terms.Options` (the planner grows inputs)."""
    return {k: v for k, v in options.items() if k in Options.__dataclass_fields__}


def h200_runs(
    gpu: GPU | None = None, *, attention: str | None = None, **model_options
) -> list[H200Row]:
    """Every row of ``measurements/h200_step_times.json`` predicted on one H200
    (:func:`h200_gpu` unless ``gpu``): step time and peak memory of d = t = p = 1, b and m as
    measured, no recomputation, ZeRO 0; the measured GPTs are the planner's default shape
    (LayerNorm, biases, learned positions, tied embedding), V = 50,304. The row's attention
    kernel is the shape's ``attention`` (``"flash"`` for PyTorch's fused SDPA, ``"unfused"``);
    ``attention`` forces one kernel for every row (a negative control). ``model_options`` go to
    ``evaluate`` where it accepts them."""
    data = json.loads((_MEASUREMENTS / "h200_step_times.json").read_text())
    gpu = gpu or h200_gpu()
    out = []
    for r in data["rows"]:
        kernel = attention or {"sdpa": "flash"}.get(r["attention"], r["attention"])
        model = three_d.ModelShape(r["L"], r["h"], r["a"], r["s"], H200_VOCAB, attention=kernel)
        cluster = replace(three_d.cluster(1, 1, "H200"), gpu=gpu)
        layout = three_d.Layout(r["b"] * r["m"], 1, 1, 1, r["b"], recompute="none", zero=0)
        opts = Options(**_supported({"precision": H200_RECIPE} | model_options))
        c = three_d.evaluate(model, cluster, layout, opts)
        out.append(
            H200Row(
                r["name"],
                r["attention"],
                r["b"],
                r["m"],
                r["measured_s"],
                c.step_seconds if c.fits else None,
                r["peak_bytes"] / 2**30,
                c.bytes_per_gpu / 2**30,
                c.fits,
                c,
            )
        )
    return out


def h200_targets(row: H200Row) -> tuple[float, float]:
    """The tolerance in % on step time and on peak memory: ±15 % for the fused (SDPA) rows,
    ±25 % for the unfused attention row (its many small kernels are harder to price)."""
    return (15.0, 15.0) if row.attention == "sdpa" else (25.0, 25.0)


def h200_summary(rows: list[H200Row] | None = None) -> dict:
    """``rows``, ``n``, ``refused`` (rows that ran but the planner refuses), ``time_ok`` and
    ``memory_ok`` (rows within :func:`h200_targets`), the largest |time| and |memory| errors."""
    rows = h200_runs() if rows is None else rows
    return {
        "rows": rows,
        "n": len(rows),
        "refused": [r.name for r in rows if not r.fits],
        "time_ok": sum(abs(r.time_error) <= h200_targets(r)[0] for r in rows),
        "memory_ok": sum(abs(r.memory_error) <= h200_targets(r)[1] for r in rows),
        "worst_time": max(abs(r.time_error) for r in rows),
        "worst_memory": max(abs(r.memory_error) for r in rows),
    }
