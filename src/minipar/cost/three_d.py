"""``minipar plan``: search data × tensor × pipeline layouts and rank them by predicted step time.

Pure Python. Every number comes from a cost-model function that already names its source:
  parameters and FLOPs      :mod:`minipar.cost.model` (Narayanan et al. 2021 Eq. 2-3,
                            Korthikanti et al. 2022 Eq. 7-8)
  memory                    :mod:`minipar.cost.memory` (ZeRO §5; Korthikanti Table 2, §4.2.3)
  bubble                    :mod:`minipar.cost.pipeline` (GPipe and Megatron conventions)
  collectives               :mod:`minipar.cost.collectives` (α-β, Thakur et al. 2005; the
                            hierarchical all-reduce of Mikami et al. 2018)
  links and GPUs            :mod:`minipar.cost.hardware`

How one step is timed (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM", §2.2 and §3). N = d·t·p GPUs, B = d·b·m sequences per step.
  rank order   t innermost (consecutive ranks), then d, then p outermost (Megatron's order), so a
               TP group stays inside a node when t ≤ GPUs per node.
  per micro-batch on one stage
      compute  hardware FLOPs of b sequences / (t·p) / (peak · gemm_efficiency)
      TP       4 all-reduces of the (b, s, h) activation per layer (6 with full recomputation,
               whose extra forward repeats them), ring on the TP link, NOT overlapped: they sit
               between the GEMMs that need their result (Shoeybi et al. 2019 §3). Sequence
               parallelism turns each into all-gather + reduce-scatter: same ring time.
      PP       the (b, s, h)/t activation forward and its gradient backward cross each stage
               boundary (scatter/gather optimisation, Narayanan §4.1), v times with v chunks;
               counted on the critical path (not overlapped).
  pipeline     (m + (p−1)/v) micro-batch slots: m useful, (p−1)/v bubble (Narayanan §2.2).
  DP           ZeRO 0-2: one all-reduce (or reduce-scatter + all-gather, same ring bytes) of the
               stage's 2-byte gradients over d ranks after the last micro-batch. Overlapped with
               that micro-batch's backward only when p = 1 (DDP buckets, Li et al. 2020); with
               p > 1 it runs after the pipeline flush, fully exposed (Narayanan §3.3).
               ZeRO 3 (p = 1 only): per micro-batch all-gather in forward, again in backward,
               reduce-scatter of gradients, 1.5× the all-reduce (Rajbhandari et al. 2020 §7),
               issued per layer (one FSDP unit per transformer block, so L/p collectives each
               paying the α terms), overlapped with compute by prefetching (Zhao et al. 2023),
               exposed only beyond it.
  memory       the first stage's: L/p layers + the whole (V+s)·h embedding (split over t),
               ZeRO on the states; activations of min(p, m) micro-batches (1F1B) or the
               interleaved factor (Korthikanti §4.2.3). "fits" = total ≤ the GPU's memory; no
               headroom for buffers or fragmentation is kept.
  ignored      optimizer step, embedding-gradient all-reduce between first and last stage,
               kernel launch gaps, stragglers, GEMM efficiency falling as t shrinks matrices.

``gemm_efficiency`` (default 0.6) is an ASSUMPTION, not a measurement: the fraction of the dense
peak that the large matrix multiplications reach. With it the model predicts 49-51 % of peak
(hardware FLOPs, full recomputation) for Megatron's published layouts from 18B to 1T parameters,
which measured 43-52 % (Narayanan et al. 2021 Table 1; tests/test_cost_planner.py).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable

from .breakdown import check_layout
from .collectives import collective_time, hierarchical_all_reduce_time
from .hardware import GPU, Link, gpu as gpu_preset, link as link_preset
from .memory import (ZERO_STAGES, check_zero_stage, model_state_bytes,
                     pipeline_first_stage_activation_bytes)
from .model import RECOMPUTE, flops_per_iteration, param_count
from .pipeline import bubble_fraction_of_total, bubble_relative_to_ideal

@dataclass(frozen=True)
class ModelShape:
    """GPT-style transformer (Narayanan et al. 2021's assumptions: MHA, 4h MLP, tied embedding)."""
    layers: int   # L
    hidden: int   # h
    heads: int    # a
    seq: int      # s
    vocab: int    # V
    note: str = ""

    @property
    def params(self) -> int:
        return param_count(self.layers, self.hidden, self.vocab, self.seq)


# Shapes as published. Llama 2 70B uses grouped-query attention and a SwiGLU MLP (h → 28672),
# which the GPT formula does not model: it counts 64.7 B of its 69 B parameters.
MODELS: dict[str, ModelShape] = {
    "gpt3-175b": ModelShape(96, 12288, 96, 2048, 51200,
                            "Brown et al. 2020 Table 2.1; Narayanan et al. 2021 §5"),
    "bloom-176b": ModelShape(70, 14336, 112, 2048, 250880,
                             "BigScience 2022, BLOOM paper Table 3 and §3.4"),
    "mt-nlg-530b": ModelShape(105, 20480, 128, 2048, 51200,
                              "Smith et al. 2022, Megatron-Turing NLG 530B, §3"),
    "llama2-70b": ModelShape(80, 8192, 64, 4096, 32000,
                             "Touvron et al. 2023 (Llama 2); GQA and SwiGLU not modelled"),
    "megatron-1t": ModelShape(128, 25600, 160, 2048, 51200, "Narayanan et al. 2021 Table 1"),
}


@dataclass(frozen=True)
class Cluster:
    gpus: int
    gpus_per_node: int
    gpu: GPU
    intra: Link            # inside a node (NVLink, PCIe)
    inter: Link            # between nodes, one NIC per GPU (rail-optimised)
    dtype: str = "bf16"

    @property
    def peak(self) -> float:
        return self.gpu.peak_flops[self.dtype]


@dataclass(frozen=True)
class Config:
    """One layout and its predicted costs (bytes, seconds, fractions)."""
    tp: int
    pp: int
    dp: int
    micro_batch: int
    microbatches: int
    chunks: int               # v, interleaved stages per GPU (1 = plain 1F1B)
    recompute: str
    sp: bool
    zero: int
    bytes_per_gpu: float
    model_state_bytes: float
    activation_bytes: float
    fits: bool
    bubble: float             # fraction of the step (GPipe convention)
    bubble_relative: float    # bubble / ideal time (Megatron convention)
    compute_seconds: float    # m micro-batches of compute on one stage
    tp_seconds: float         # TP collectives on the critical path, per step
    pp_seconds: float         # p2p sends on the critical path, per step
    dp_seconds: float         # DP/ZeRO collectives, total
    dp_exposed_seconds: float  # the part not hidden behind compute
    step_seconds: float
    mfu: float
    hfu: float
    tp_link: str
    pp_link: str
    dp_link: str

    def as_dict(self) -> dict:
        return asdict(self)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _ring(op: str, n: int, nbytes: float, lk: Link) -> float:
    return collective_time(op, "ring", n, nbytes, lk.alpha, lk.bandwidth)


def dp_allreduce_seconds(nbytes: float, d: int, t: int, cl: Cluster) -> tuple[float, str]:
    """All-reduce of ``nbytes`` over the d ranks of one DP group (stride t in the rank order).

    Inside one node: a ring on the intra link. Spanning nodes with k = gpus_per_node/t group
    members per node: the hierarchical all-reduce (intra reduce-scatter, inter all-reduce on
    each rail, intra all-gather; Mikami et al. 2018). One member per node: a ring on the inter
    link.
    """
    g = cl.gpus_per_node
    if d == 1:
        return 0.0, "-"
    if t * d <= g:
        return _ring("all-reduce", d, nbytes, cl.intra), cl.intra.name
    k = max(1, g // t)
    if k > 1 and d % k == 0:
        return hierarchical_all_reduce_time(d // k, k, nbytes, cl.intra, cl.inter), \
            f"{cl.intra.name}+{cl.inter.name}"
    return _ring("all-reduce", d, nbytes, cl.inter), cl.inter.name


def evaluate(m_: ModelShape, cl: Cluster, global_batch: int, *, tp: int, pp: int, dp: int,
             micro_batch: int, chunks: int = 1, recompute: str = "selective", sp: bool = False,
             zero: int = 1, gemm_efficiency: float = 0.6) -> Config:
    """Predicted memory and step time of one layout (see the module docstring for the model)."""
    t, p, d, b, v = tp, pp, dp, micro_batch, chunks
    L, h, a, s, V = m_.layers, m_.hidden, m_.heads, m_.seq, m_.vocab
    check(m_, cl, global_batch, tp=t, pp=p, dp=d, micro_batch=b, chunks=v, zero=zero)
    m = global_batch // (d * b)
    psi = m_.params
    # memory of the first (fullest) stage: its L/p layers plus the (V + s)·h embedding, which
    # Megatron keeps whole on the first stage (and a tied copy on the last), split over t only
    emb = (V + s) * h
    psi_first = (psi - emb) / p + emb
    states = model_state_bytes(psi_first * p, d=d, t=t, p=p, zero=zero).total
    schedule = "interleaved" if v > 1 else "1f1b"
    act = pipeline_first_stage_activation_bytes(s, b, h, a, L, p, m=m, t=t, sp=sp,
                                                recompute=recompute, schedule=schedule, v=v)
    total = states + act
    # per micro-batch on one stage
    peak = cl.peak
    hw_flops_mb = flops_per_iteration(b, s, L, h, V, recompute)
    c_mb = hw_flops_mb / (t * p) / (peak * gemm_efficiency)
    act_bytes = b * s * h * 2                                  # (b, s, h) in 16-bit
    tp_link = cl.intra if t <= cl.gpus_per_node else cl.inter
    n_ar = 6 if recompute == "full" else 4
    tp_mb = (L // p) * n_ar * _ring("all-reduce", t, act_bytes, tp_link)
    pp_link = cl.intra if t * d * p <= cl.gpus_per_node else cl.inter
    pp_mb = 0.0 if p == 1 else 2 * v * (pp_link.alpha + act_bytes / t / pp_link.bandwidth)
    slot = c_mb + tp_mb + pp_mb
    r = 0.0 if p == 1 else bubble_relative_to_ideal(schedule, p, m, v)
    f = 0.0 if p == 1 else bubble_fraction_of_total(schedule, p, m, v)
    pipe = m * slot * (1 + r)                                  # (m + (p−1)/v) slots
    # data parallelism
    grad_bytes = 2 * psi / (t * p)                             # 16-bit gradients of one stage
    ar, dp_name = dp_allreduce_seconds(grad_bytes, d, t, cl)
    if zero == 3:                                              # one FSDP unit per layer
        ar_layer, _ = dp_allreduce_seconds(grad_bytes / (L // p), d, t, cl)
        dp_total = m * 1.5 * (L // p) * ar_layer
        exposed = max(0.0, dp_total - m * c_mb)
    else:
        dp_total = ar
        window = (2 / 3) * c_mb if p == 1 else 0.0             # backward ≈ 2/3 of F+B
        exposed = max(0.0, dp_total - window)
    step = pipe + exposed
    n = t * p * d
    model_flops = flops_per_iteration(global_batch, s, L, h, V, "none")
    hw_flops = flops_per_iteration(global_batch, s, L, h, V, recompute)
    return Config(
        tp=t, pp=p, dp=d, micro_batch=b, microbatches=m, chunks=v, recompute=recompute, sp=sp,
        zero=zero, bytes_per_gpu=total, model_state_bytes=states, activation_bytes=act,
        fits=total <= cl.gpu.memory_bytes, bubble=f, bubble_relative=r,
        compute_seconds=m * c_mb, tp_seconds=m * (1 + r) * tp_mb,
        pp_seconds=m * (1 + r) * pp_mb, dp_seconds=dp_total, dp_exposed_seconds=exposed,
        step_seconds=step, mfu=model_flops / (step * n * peak), hfu=hw_flops / (step * n * peak),
        tp_link=tp_link.name if t > 1 else "-", pp_link=pp_link.name if p > 1 else "-",
        dp_link=dp_name)


def check(m_: ModelShape, cl: Cluster, global_batch: int, *, tp: int, pp: int, dp: int,
          micro_batch: int, chunks: int = 1, zero: int = 1) -> None:
    """Raise ``ValueError`` naming the first rule the layout breaks: the cost model's layout
    rules (:func:`minipar.cost.breakdown.check_layout`), then the planner's own."""
    t, p, d, b, v = tp, pp, dp, micro_batch, chunks
    check_layout(m_.layers, m_.hidden, m_.heads, d=d, t=t, p=p, zero=zero)
    if m_.layers % (p * v):
        raise ValueError(f"layers ({m_.layers}) must be divisible by p·v ({p}·{v})")
    if t * p * d != cl.gpus:
        raise ValueError(f"gpus ({cl.gpus}) must equal t·p·d ({t}·{p}·{d})")
    if global_batch % (d * b):
        raise ValueError(f"global batch ({global_batch}) must be divisible by d·b ({d}·{b})")
    m = global_batch // (d * b)
    if v > 1 and (p == 1 or m % p):
        raise ValueError(f"interleaving (v={v}) needs p > 1 and microbatches m ({m}) a multiple "
                         f"of p ({p})")
    if check_zero_stage(zero) >= 2 and p > 1:
        raise ValueError(f"ZeRO stage ({zero}) >= 2 needs p = 1 (gradients are accumulated "
                         f"over micro-batches under PP), got p ({p})")


def search(m_: ModelShape, cl: Cluster, global_batch: int, *, tp: int | None = None,
           pp: int | None = None, dp: int | None = None, micro_batch: int | None = None,
           zero: int | None = None, gemm_efficiency: float = 0.6, max_micro_batch: int = 8,
           max_chunks: int = 4) -> list[Config]:
    """Every valid layout, fitting ones first, each group ordered by predicted step time.

    Search space: t a divisor of the heads and at most the GPUs per node (Megatron's rule: keep
    TP inside the NVLink domain, Narayanan et al. 2021 §3.3 Takeaway 1) unless ``tp`` fixes it;
    p a divisor of L; d = N/(t·p); b a power of two up to ``max_micro_batch`` dividing B/d;
    v in 1, 2, 4; recomputation none/selective/full; sequence parallelism on or off (t > 1);
    ZeRO 0-3 (2 and 3 only with p = 1; 1-3 only with d > 1).
    """
    out: list[Config] = []
    ts = [tp] if tp else [k for k in _divisors(m_.heads) if k <= cl.gpus_per_node]
    ps = [pp] if pp else _divisors(m_.layers)
    for t in ts:
        for p in ps:
            if cl.gpus % (t * p):
                continue
            d = cl.gpus // (t * p)
            if dp and d != dp:
                continue
            if global_batch % d:
                continue
            bs = [micro_batch] if micro_batch else \
                [1 << k for k in range(max_micro_batch.bit_length()) if 1 << k <= max_micro_batch]
            for b in bs:
                if global_batch % (d * b):
                    continue
                m = global_batch // (d * b)
                vs = [1] + [v for v in (2, 4) if v <= max_chunks and p > 1 and m % p == 0
                            and m_.layers % (p * v) == 0]
                zs = [0] if d == 1 else (list(ZERO_STAGES) if p == 1 else [0, 1])
                if zero is not None:
                    zs = [zero]
                for v in vs:
                    for rc in RECOMPUTE:
                        for sp in ((False, True) if t > 1 else (False,)):
                            for z in zs:
                                try:
                                    out.append(evaluate(m_, cl, global_batch, tp=t, pp=p, dp=d,
                                                        micro_batch=b, chunks=v, recompute=rc,
                                                        sp=sp, zero=z,
                                                        gemm_efficiency=gemm_efficiency))
                                except ValueError:
                                    continue
    out.sort(key=lambda c: (not c.fits, c.step_seconds, c.bytes_per_gpu))
    return out


def why_nothing_fits(m_: ModelShape, cl: Cluster, configs: Iterable[Config]) -> str:
    """One line: why no layout fits one GPU's memory."""
    psi = m_.params
    floor = 16 * psi / cl.gpus
    cap = cl.gpu.memory_bytes
    if floor > cap:
        return (f"model states alone need 16 B × {psi / 1e9:.1f} B params / {cl.gpus} GPUs = "
                f"{floor / 2**30:.1f} GiB per GPU even fully sharded, more than the "
                f"{cap / 2**30:.0f} GiB of one {cl.gpu.name}")
    configs = list(configs)
    if not configs:
        return "no layout satisfies the divisibility rules (t | heads, p | layers, t·p·d = gpus, d·b | global batch)"
    best = min(configs, key=lambda c: c.bytes_per_gpu)
    return (f"smallest layout (t={best.tp}, p={best.pp}, d={best.dp}, b={best.micro_batch}, "
            f"{best.recompute} recomputation, ZeRO-{best.zero}) needs "
            f"{best.bytes_per_gpu / 2**30:.1f} GiB per GPU, more than the {cap / 2**30:.0f} GiB "
            f"of one {cl.gpu.name}")


# --- whole runs and money -------------------------------------------------------------------

def training_seconds(params: float, tokens: float, gpus: int, flops_per_gpu: float,
                     recompute: bool = True) -> float:
    """End-to-end training time ≈ 8·T·P/(n·X) with activation recomputation, 6·T·P/(n·X)
    without (Narayanan et al. 2021 §5.1, Eq. 4): T tokens, P parameters, n GPUs, X achieved
    FLOP/s per GPU."""
    if min(params, tokens, gpus, flops_per_gpu) <= 0:
        raise ValueError("params, tokens, gpus and flops_per_gpu must be > 0")
    return (8 if recompute else 6) * tokens * params / (gpus * flops_per_gpu)


def implied_mfu(gpu_hours: float, params: float, tokens: float, peak: float) -> float:
    """MFU implied by a reported GPU-hour total: 6·N·D (Kaplan et al. 2020) / (hours·3600·peak)."""
    if min(gpu_hours, params, tokens, peak) <= 0:
        raise ValueError("gpu_hours, params, tokens and peak must be > 0")
    return 6 * params * tokens / (gpu_hours * 3600 * peak)


def dollars_per_million_tokens(step_seconds: float, gpus: int, tokens_per_step: float,
                               dollars_per_gpu_hour: float) -> float:
    """Price of training on one million tokens: GPU-hours per token × $/GPU-hour × 10⁶."""
    if min(step_seconds, gpus, tokens_per_step) <= 0 or dollars_per_gpu_hour < 0:
        raise ValueError("step_seconds, gpus, tokens_per_step must be > 0 and the price >= 0")
    return step_seconds * gpus / 3600 / tokens_per_step * dollars_per_gpu_hour * 1e6


def cluster(gpus: int, gpus_per_node: int = 8, gpu: str = "A100-80GB",
            intra: str = "nvlink4-h100", inter: str = "ib-ndr400", **links: float) -> Cluster:
    """A :class:`Cluster` from presets; ``intra_bandwidth``, ``intra_alpha``, ``inter_bandwidth``,
    ``inter_alpha`` keywords override a preset link's numbers."""
    if gpus < 1 or gpus_per_node < 1:
        raise ValueError(f"gpus ({gpus}) and gpus_per_node ({gpus_per_node}) must be >= 1")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise ValueError(f"gpus ({gpus}) must be a multiple of gpus_per_node ({gpus_per_node})")
    li, le = link_preset(intra), link_preset(inter)
    if links.get("intra_bandwidth") or links.get("intra_alpha") is not None:
        li = Link(f"{li.name}*", links.get("intra_bandwidth") or li.bandwidth,
                  li.alpha if links.get("intra_alpha") is None else links["intra_alpha"],
                  "given on the command line")
    if links.get("inter_bandwidth") or links.get("inter_alpha") is not None:
        le = Link(f"{le.name}*", links.get("inter_bandwidth") or le.bandwidth,
                  le.alpha if links.get("inter_alpha") is None else links["inter_alpha"],
                  "given on the command line")
    return Cluster(gpus, gpus_per_node, gpu_preset(gpu), li, le)


def megatron_rule_layout(m_: ModelShape, cl: Cluster, global_batch: int, micro_batch: int = 1,
                         recompute: str = "full", zero: int = 0,
                         gemm_efficiency: float = 0.6) -> Config | None:
    """Narayanan et al. 2021 §3.3's rule of thumb: t = GPUs per node (largest valid), then the
    smallest p that fits, then d = N/(t·p). ``None`` when no p fits."""
    t = max(k for k in _divisors(m_.heads) if k <= cl.gpus_per_node and cl.gpus % k == 0)
    for p in _divisors(m_.layers):
        if cl.gpus % (t * p) or global_batch % ((cl.gpus // (t * p)) * micro_batch):
            continue
        c = evaluate(m_, cl, global_batch, tp=t, pp=p, dp=cl.gpus // (t * p),
                     micro_batch=micro_batch, recompute=recompute, zero=zero,
                     gemm_efficiency=gemm_efficiency)
        if c.fits:
            return c
    return None


__all__ = ["ModelShape", "MODELS", "Cluster", "Config", "cluster", "evaluate", "check", "search",
           "why_nothing_fits", "training_seconds", "implied_mfu", "dollars_per_million_tokens",
           "dp_allreduce_seconds", "megatron_rule_layout", "add_parser"]


# --- the command line -----------------------------------------------------------------------

def _plan(args) -> int:
    import json

    from .cli import input_error
    from .units import fmt_bytes, fmt_seconds

    dims = ("layers", "hidden", "heads", "seq", "vocab")
    given = [k for k in dims if getattr(args, k) is not None]
    if args.model is not None:
        base = MODELS[args.model]
        m_ = ModelShape(*(getattr(args, k) or getattr(base, k) for k in dims))
    else:
        missing = [k for k in dims if k not in given]
        if missing:
            raise input_error("give --model NAME or all of --layers --hidden --heads --seq --vocab "
                         f"(missing --{' --'.join(missing)})")
        m_ = ModelShape(*(getattr(args, k) for k in dims))
    cl = cluster(args.gpus, args.gpus_per_node, args.gpu, args.intra, args.inter,
                 intra_bandwidth=args.intra_bandwidth, intra_alpha=args.intra_alpha,
                 inter_bandwidth=args.inter_bandwidth, inter_alpha=args.inter_alpha)
    fixed = {k: getattr(args, k) for k in ("tp", "pp", "dp", "micro_batch", "zero")}
    if fixed["tp"] and m_.heads % fixed["tp"]:
        raise input_error(f"heads ({m_.heads}) must be divisible by t ({fixed['tp']})")
    if fixed["pp"] and m_.layers % fixed["pp"]:
        raise input_error(f"layers ({m_.layers}) must be divisible by p ({fixed['pp']})")
    prod = math.prod(v for k, v in fixed.items() if k in ("tp", "pp", "dp") and v)
    if cl.gpus % prod:
        raise input_error(f"gpus ({cl.gpus}) must be divisible by the fixed t·p·d ({prod})")
    configs = search(m_, cl, args.global_batch, gemm_efficiency=args.gemm_efficiency, **fixed)
    fitting = [c for c in configs if c.fits]
    if not fitting:
        raise input_error("nothing fits: " + why_nothing_fits(m_, cl, configs))
    shown = fitting if args.top == 0 else fitting[:args.top]
    if args.json:
        print(json.dumps({"model": asdict(m_), "params": m_.params, "gpus": cl.gpus,
                          "gpu": cl.gpu.name, "intra": cl.intra.name, "inter": cl.inter.name,
                          "gemm_efficiency": args.gemm_efficiency,
                          "configs": [c.as_dict() for c in shown]}))
        return 0
    print(f"minipar plan: {m_.params / 1e9:.1f} B params on {cl.gpus} × {cl.gpu.name} "
          f"({cl.gpus_per_node}/node, intra {cl.intra.name}, inter {cl.inter.name}), "
          f"B = {args.global_batch}; {len(fitting)} of {len(configs)} layouts fit")
    print("  overlap: TP and PP on the critical path; DP after the flush (p>1) or under the last "
          "backward (p=1); ZeRO-3 gathers prefetched")
    print(f"  {'t':>2} {'p':>3} {'d':>4} {'b':>2} {'m':>4} {'v':>1} {'recomp':<9} {'sp':<2} "
          f"{'Z':>1} {'mem/GPU':>10} {'bubble':>6} {'TP':>9} {'PP':>9} {'DP exp':>9} "
          f"{'step':>9} {'MFU':>5}")
    for c in shown:
        print(f"  {c.tp:>2} {c.pp:>3} {c.dp:>4} {c.micro_batch:>2} {c.microbatches:>4} "
              f"{c.chunks:>1} {c.recompute:<9} {'y' if c.sp else 'n':<2} {c.zero:>1} "
              f"{fmt_bytes(c.bytes_per_gpu):>10} {c.bubble:>6.1%} {fmt_seconds(c.tp_seconds):>9} "
              f"{fmt_seconds(c.pp_seconds):>9} {fmt_seconds(c.dp_exposed_seconds):>9} "
              f"{fmt_seconds(c.step_seconds):>9} {c.mfu:>5.1%}")
    return 0


def add_parser(subparsers) -> None:
    """Register ``minipar plan`` (called by :mod:`minipar.cli`)."""
    from . import hardware
    from .cli import guarded, nonnegative_float, parse_number, positive_float, positive_int

    def fraction(text: str) -> float:
        return parse_number(text, float, lambda v: 0 < v <= 1, "a number in (0, 1]")

    def nonneg_int(text: str) -> int:
        return parse_number(text, int, lambda v: v >= 0, "an integer >= 0")

    help_ = "rank data × tensor × pipeline layouts by predicted step time"
    p = subparsers.add_parser("plan", help=help_, description=help_)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=guarded("plan", _plan))
    p.add_argument("--model", choices=tuple(MODELS), help="a preset shape (flags override it)")
    for name, sym in (("layers", "L"), ("hidden", "h"), ("heads", "a"), ("seq", "s"),
                      ("vocab", "V")):
        p.add_argument(f"--{name}", type=positive_int, help=sym)
    p.add_argument("--gpus", type=positive_int, required=True, help="N")
    p.add_argument("--gpus-per-node", type=positive_int, default=8)
    p.add_argument("--gpu", choices=tuple(hardware.GPUS), default="A100-80GB")
    p.add_argument("--intra", choices=tuple(hardware.LINKS), default="nvlink4-h100")
    p.add_argument("--inter", choices=tuple(hardware.LINKS), default="ib-ndr400")
    p.add_argument("--intra-bandwidth", type=positive_float, help="bytes/s per direction")
    p.add_argument("--intra-alpha", type=nonnegative_float, help="s per message")
    p.add_argument("--inter-bandwidth", type=positive_float, help="bytes/s per direction")
    p.add_argument("--inter-alpha", type=nonnegative_float, help="s per message")
    p.add_argument("--global-batch", type=positive_int, required=True, help="B, sequences/step")
    p.add_argument("--tp", type=positive_int, help="fix t")
    p.add_argument("--pp", type=positive_int, help="fix p")
    p.add_argument("--dp", type=positive_int, help="fix d")
    p.add_argument("--micro-batch", type=positive_int, help="fix b")
    p.add_argument("--zero", type=int, choices=ZERO_STAGES, help="fix the ZeRO stage")
    p.add_argument("--gemm-efficiency", type=fraction, default=0.6,
                   help="assumed fraction of dense peak reached by GEMMs")
    p.add_argument("--top", type=nonneg_int, default=10, help="rows to show (0 = all)")
