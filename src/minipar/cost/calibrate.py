"""The reader's machine: calibrated constants, and the predicted step time of the course's tiny
3D GPT under every (d, t, p) layout of its ranks.

Pure Python. :mod:`minipar.three_d.calibrate` measures the constants (torch, gloo) and times the
real runs; this module fits and predicts. The same step model as :mod:`minipar.cost.three_d`,
with the terms that matter for a tiny model on CPU ranks:

  compute   one transformer layer's forward + backward on one rank, b sequences:
            c₀ + 3·F/(t·R), F = 24bsh² + 4bs²h forward FLOPs (Narayanan et al. 2021 §5.1), R the
            measured FLOP rate and c₀ the measured fixed cost of a layer (kernel launches and
            Python: a tiny layer is overhead-bound, so F/R alone would predict nothing). Both
            come from one straight-line fit of measured layer times against F
            (:func:`fit_compute`), with all ranks computing at once, so that sharing the cores is in
            R and c₀. The head (logits 2bshV/t, backward twice) and the embedding at the same R.
  TP        the course's sequence-parallel block: per layer and micro-batch 4 all-gathers and
            4 reduce-scatters of the (b, s, h) activation over t ranks (ring α-β, Thakur et al.
            2005), plus the layer-norm/bias gradient all-reduce over t once per step.
  PP        2 point-to-point messages of (b, s/t, h) per micro-batch and stage boundary (α-β of
            one message), 1F1B over m + p − 1 slots (Narayanan et al. 2021 §2.2).
  DP        ZeRO-1: reduce-scatter of the stage's gradients + all-gather of its parameters over
            d; the tied-embedding gradient all-reduce between first and last stage (p > 1).
α and the bandwidth are fitted per group size n (:func:`minipar.cost.collectives.fit_alpha_beta`)
from all-reduces timed with every group of that size busy at once, as in a layout.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .collectives import collective_time
from .validation import spearman  # noqa: F401  (one rank correlation for both comparisons)


@dataclass(frozen=True)
class Machine:
    """Calibrated constants of one machine at a given number of concurrent ranks."""
    ranks: int
    layer_overhead: float            # c₀, seconds per layer forward + backward
    flop_rate: float                 # R, FLOP/s per rank with every rank computing
    links: dict = field(default_factory=dict)   # group size n -> (α s, bandwidth bytes/s)
    p2p: tuple[float, float] = (0.0, 1.0)        # (α, bandwidth) of one send/recv
    bytes_per_elem: int = 4


def fit_line(xs, ys) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y = a + c·x, each point weighted by 1/y² (relative
    error, as :func:`~minipar.cost.collectives.fit_alpha_beta`). Pure Python."""
    xs, ys = [float(x) for x in xs], [float(y) for y in ys]
    if len(xs) != len(ys) or len(set(xs)) < 2 or min(ys) <= 0:
        raise ValueError(f"need >= 2 distinct x and as many positive y (got {len(xs)} x, "
                         f"{len(ys)} y)")
    ws = [1.0 / y ** 2 for y in ys]
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs)) / sw
    my = sum(w * y for w, y in zip(ws, ys)) / sw
    c = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / \
        sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    return my - c * mx, c


def fit_link(sizes_bytes, seconds, n: int) -> tuple[float, float]:
    """(α, bandwidth) of a ring all-reduce over n ranks from timed sizes
    (:func:`~minipar.cost.collectives.fit_alpha_beta`); on a machine so noisy that the weighted
    fit's slope is not positive, the two-point line through the smallest and the largest size
    (α clipped at 0). The model needs α ≥ 0 and a positive bandwidth."""
    from .collectives import collective_time, fit_alpha_beta
    try:
        alpha, bw = fit_alpha_beta(sizes_bytes, seconds, "all-reduce", n)
        return max(alpha, 0.0), bw
    except ValueError:
        pts = sorted(zip(sizes_bytes, seconds))
        (x0, t0), (x1, t1) = pts[0], pts[-1]
        A = collective_time("all-reduce", "ring", n, 0.0, 1.0, 1.0)
        Bf = collective_time("all-reduce", "ring", n, 1.0, 0.0, 1.0)
        slope = max((t1 - t0) / (Bf * (x1 - x0)), 1e-15)
        return max((t0 - slope * Bf * x0) / A, 0.0), 1.0 / slope


def layer_flops(b: int, s: int, h: int) -> float:
    """Forward FLOPs of one layer, 24bsh² + 4bs²h (Narayanan et al. 2021 §5.1)."""
    return 24 * b * s * h * h + 4 * b * s * s * h


def fit_compute(flops, seconds) -> tuple[float, float]:
    """(c₀, R) from layer forward + backward times: seconds = c₀ + 3·flops/R, ordinary least
    squares (the large, compute-bound layers carry the slope; the small ones, whose times are
    mostly overhead and noise on a shared machine, mostly set c₀). A negative c₀ (noise) is not
    clipped after the fact, which would keep a slope that needed it: the line is refitted
    through the origin."""
    xs, ys = [3.0 * f for f in flops], [float(y) for y in seconds]
    if len(xs) != len(ys) or len(set(xs)) < 2 or min(ys) <= 0:
        raise ValueError(f"need >= 2 distinct FLOP counts and as many positive times (got "
                         f"{len(xs)}, {len(ys)})")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    c0 = my - slope * mx
    if c0 < 0:
        c0, slope = 0.0, sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    if slope <= 0:
        raise ValueError(f"fitted seconds per FLOP ({slope:.3g}) must be > 0: times do not "
                         "grow with FLOPs")
    return c0, 1.0 / slope


def _coll(machine: Machine, op: str, n: int, nbytes: float) -> float:
    if n == 1:
        return 0.0
    alpha, bw = machine.links[n]
    return collective_time(op, "ring", n, nbytes, max(alpha, 0.0), bw)


@dataclass(frozen=True)
class TinyPrediction:
    d: int
    t: int
    p: int
    m: int
    compute_s: float
    tp_s: float
    pp_s: float
    dp_s: float
    bubble_s: float
    step_s: float


def predict_tiny_step(machine: Machine, L: int, h: int, a: int, s: int, V: int, B: int, *,
                      d: int, t: int, p: int, b: int) -> TinyPrediction:
    """Predicted seconds of one training step of the tiny GPT (module docstring)."""
    for k, v in (("d", d), ("t", t), ("p", p), ("b", b)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{k} ({v}) must be a positive integer")
    if L % p or a % t or s % t or B % (d * b):
        raise ValueError(f"layout (d, t, p) = ({d}, {t}, {p}), b = {b} breaks a rule: "
                         f"p | L ({L}), t | a ({a}), t | s ({s}), d·b | B ({B})")
    m = B // (d * b)
    q, R = machine.bytes_per_elem, machine.flop_rate
    lp = L // p
    layer = machine.layer_overhead + 3 * layer_flops(b, s, h) / (t * R)
    head = 3 * 2 * b * s * h * V / (t * R)
    stage = lp * layer + head                                   # the last stage, slowest
    act = b * s * h * q
    tp = lp * 4 * (_coll(machine, "all-gather", t, act) + _coll(machine, "reduce-scatter", t, act))
    a_p2p, bw_p2p = machine.p2p
    pp = 0.0 if p == 1 else 2 * (a_p2p + act / t / bw_p2p)
    slot = stage + tp + pp
    bubble = (p - 1) * slot
    layer_params = 12 * h * h + 13 * h
    stage_params = (lp * layer_params + (V + s) * h) / t
    dp = 0.0
    if d > 1:
        dp = _coll(machine, "reduce-scatter", d, stage_params * q) + \
            _coll(machine, "all-gather", d, stage_params * q)
    emb = 0.0 if p == 1 else _coll(machine, "all-reduce", 2, V * h * q / t) \
        if 2 in machine.links else 0.0
    sp_grads = _coll(machine, "all-reduce", t, lp * 6 * h * q)
    step = m * slot + bubble + dp + emb + sp_grads
    return TinyPrediction(d, t, p, m, m * stage, m * tp, m * pp, dp + emb + sp_grads, bubble,
                          step)


def layouts(ranks: int) -> list[tuple[int, int, int]]:
    """Every (d, t, p) with d·t·p = ``ranks``."""
    return [(d, t, ranks // (d * t)) for d in range(1, ranks + 1) if ranks % d == 0
            for t in range(1, ranks // d + 1) if (ranks // d) % t == 0]
