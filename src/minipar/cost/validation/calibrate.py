"""The reader's machine: calibrated constants, and the predicted step time of the course's tiny
3D GPT under every (d, t, p) layout of its ranks.

Pure Python. :mod:`minipar.three_d.calibrate` measures the constants (torch, gloo) and times the
real runs; this module fits and predicts. The step of :mod:`minipar.cost.planner.three_d` (SP inside
TP, 1F1B, ZeRO-1), written for CPU ranks that may outnumber the cores:

  cores     n ranks share c cores (measured: :func:`effective_cores`). While k ranks compute, each
            gets min(1, c/k) of a core (Linux's fair scheduler shares a core equally between
            runnable processes), so a phase lasts its CPU seconds × max(1, k/c)
            (:attr:`Machine.share`, :func:`_share`). And no schedule beats the cores: the step
            is at least the compute CPU seconds of all ranks over c (the work law, Cormen et
            al., Introduction to Algorithms, 3rd ed., §27.1). Step = max(critical path, that
            bound). Only compute is counted (c₀ + 3F/(tR) per layer, the ends, Adam): gloo's
            CPU in a collective is not a fixed amount of work (measured here, all-gathers of
            32 KiB: 0.17 ms of CPU per rank in groups of 2, 0.84 ms in groups of 4, with 4 ranks
            on 2 cores), and counted, the bound overshot the t = 4 layouts of 8 ranks by up to
            70 % (one run at load 6–8); part of the work still bounds the step from below.
  layer     one layer's forward + backward on one rank at TP degree t, micro-batch b, measured
            as the course runs it: the sequence-parallel block with its 4 all-gathers and
            4 reduce-scatters of (b, s, h) (Korthikanti et al. 2022), every TP group busy at
            once; wall seconds, a line in b. Measured whole because on shared cores a
            collective waits until its peers are scheduled, and they are busy computing:
            compute and α-β collectives timed apart, then added, made the t = 2 and t = 4 blocks
            15–55 % too short in five calibrations on 2 cores. Without that measurement:
            c₀ + 3·F/(t·R) at the shared rate plus 4 + 4 collectives, F = 24bsh² + 4bs²h
            forward FLOPs (Narayanan et al. 2021 §5.1), c₀ and R fitted on a plain layer's CPU
            seconds (:func:`fit_compute`); the cores' bound uses that compute in any case.
  ends      embedding, final layer norm, tied head, cross-entropy, forward + backward, and the
            pipeline executor's own work, per micro-batch: CPU seconds e₀ + e₁·b (a one-layer
            model's micro-batch through the executor, less its layer), on every TP rank of the
            end stages (charged to the last, the slowest). Measured: more than a layer, with
            4 % of its FLOPs.
  TP        beyond the layers: the (b, s, h) all-gather before the head per micro-batch, the
            layer-norm/bias gradient all-reduce over t once per step.
  PP        2 messages of (b, s/t, h) per micro-batch and slot, α + bytes/bandwidth of a timed
            send/recv. 1F1B over m + p − 1 slots (Narayanan et al. 2021 §2.2): m at the shared
            rate (every stage busy), and the p − 1 bubble slots with only k·d·t ranks busy in
            the k-th (fill and drain), so on oversubscribed cores the bubble is partly free.
            The α is the idle one: a hand-off timed while the other ranks compute took
            0.5–1.8 ms here (0.1–0.25 ms idle), but counted, it overshot p = 4 by 26–65 % in
            three runs: in the steady state the waiting rank's core runs the other stages.
  DP        ZeRO-1: reduce-scatter of the stage's gradients + all-gather of its parameters over
            d, the tied-embedding gradient all-reduce between first and last stage (p > 1), and
            Adam on the rank's shard (CPU seconds o₀ + o₁·elements; memory-bound).
Collectives are timed as the operation (α + bytes/bandwidth of the whole buffer, nccl-tests'
size; :func:`fit_op`) per group size n with every group of that size busy at once; a machine
without them uses the ring α-β of ``links`` (Thakur et al. 2005).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..network.collectives import collective_time, fit_alpha_beta
from .published import spearman  # noqa: F401  (one rank correlation for both comparisons)


@dataclass(frozen=True)
class Machine:
    """Calibrated constants of one machine at a given number of concurrent ranks.

    Compute terms (``layer_overhead``, ``flop_rate``, ``ends``, ``optimizer``) are CPU seconds of
    one rank; ``cores`` says how many ranks run at once (None: every rank has its own core).
    Communication terms are wall seconds measured with every group of that size busy at once:
    ``ops[(op, n)] = (α, bandwidth)`` for a time α + bytes/bandwidth of the whole buffer
    (nccl-tests' size), else the ring α-β of ``links`` (fitted on all-reduce).

    ``cores`` is what the ranks get, measured (:func:`effective_cores`): the usable CPUs on an
    idle machine, fewer while other processes run."""

    ranks: int
    layer_overhead: float  # c₀, seconds per layer forward + backward
    flop_rate: float  # R, FLOP/s per rank
    links: dict = field(default_factory=dict)  # group size n -> (α s, bandwidth bytes/s)
    p2p: tuple[float, float] = (0.0, 1.0)  # (α, bandwidth) of one send/recv
    bytes_per_elem: int = 4
    cores: float | None = None  # CPU cores the ranks get (may be < usable)
    ends: tuple[float, float] = (0.0, 0.0)  # (s, s/sequence): embedding, head, loss, executor
    optimizer: tuple[float, float] = (0.0, 0.0)  # (s, s per element): one Adam step
    ops: dict = field(default_factory=dict)  # (op, n) -> (α s, bandwidth bytes/s)
    layers: dict = field(default_factory=dict)  # t -> (s, s per sequence): SP block, wall

    def __post_init__(self):
        if self.cores is not None and not (isinstance(self.cores, (int, float)) and self.cores > 0):
            raise ValueError(f"cores ({self.cores!r}) must be a positive number or None")

    @property
    def share(self) -> float:
        """Wall seconds per CPU second of a rank when every rank computes at once: ranks/cores
        when the ranks outnumber the cores (each gets cores/ranks of one; Linux's fair
        scheduler shares a core equally between runnable processes), else 1."""
        return 1.0 if self.cores is None else max(1.0, self.ranks / self.cores)


def fit_line(xs, ys) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y = a + c·x, each point weighted by 1/y² (relative
    error, as :func:`~minipar.cost.network.collectives.fit_alpha_beta`). Pure Python."""
    xs, ys = [float(x) for x in xs], [float(y) for y in ys]
    if len(xs) != len(ys) or len(set(xs)) < 2 or min(ys) <= 0:
        raise ValueError(
            f"need >= 2 distinct x and as many positive y (got {len(xs)} x, {len(ys)} y)"
        )
    ws = [1.0 / y**2 for y in ys]
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs)) / sw
    my = sum(w * y for w, y in zip(ws, ys)) / sw
    c = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sum(
        w * (x - mx) ** 2 for w, x in zip(ws, xs)
    )
    return my - c * mx, c


def fit_link(sizes_bytes, seconds, n: int) -> tuple[float, float]:
    """(α, bandwidth) of a ring all-reduce over n ranks from timed sizes
    (:func:`~minipar.cost.network.collectives.fit_alpha_beta`); on a machine so noisy that the weighted
    fit's slope is not positive, the two-point line through the smallest and the largest size
    (α clipped at 0). The model needs α ≥ 0 and a positive bandwidth."""
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
        raise ValueError(
            f"need >= 2 distinct FLOP counts and as many positive times (got {len(xs)}, {len(ys)})"
        )
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    c0 = my - slope * mx
    if c0 < 0:
        c0, slope = 0.0, sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    if slope <= 0:
        raise ValueError(
            f"fitted seconds per FLOP ({slope:.3g}) must be > 0: times do not grow with FLOPs"
        )
    return c0, 1.0 / slope


def effective_cores(ranks: int, cpu_seconds, wall_seconds, usable: int) -> float:
    """Cores the ranks got while all of them computed: ``ranks`` × CPU seconds / wall seconds
    (each rank ran cpu/wall of the time), at most ``usable`` (the affinity mask). Sums over the
    timed points; the least served rank's ratio (a layout waits for it).
    ``cpu_seconds[r]`` and ``wall_seconds[r]`` are rank r's lists."""
    if not cpu_seconds or len(cpu_seconds) != len(wall_seconds) or usable < 1:
        raise ValueError(
            f"need per-rank CPU and wall times ({len(cpu_seconds)} and "
            f"{len(wall_seconds)} ranks) and usable >= 1 ({usable})"
        )
    ratio = min(sum(c) / sum(w) for c, w in zip(cpu_seconds, wall_seconds))
    if ratio <= 0:
        raise ValueError(f"CPU / wall ({ratio:.3g}) must be > 0")
    return min(float(usable), ranks * ratio)


def fit_op(sizes_bytes, seconds) -> tuple[float, float]:
    """(α, bandwidth) of a measured operation's time α + bytes/bandwidth (Hockney's model, as
    in :mod:`~minipar.cost.network.collectives`, but of the operation as timed, not of one link):
    :func:`fit_line`, and on a machine so noisy that its slope is not positive, the two-point
    line through the smallest and the largest size. α is clipped at 0 (noise); the model needs a
    positive bandwidth."""
    alpha, slope = fit_line(sizes_bytes, seconds)
    if slope <= 0:
        (x0, t0), (x1, t1) = min(zip(sizes_bytes, seconds)), max(zip(sizes_bytes, seconds))
        slope = max((t1 - t0) / (x1 - x0), 1e-15)
        alpha = t0 - slope * x0
    return max(alpha, 0.0), 1.0 / slope


def _coll(machine: Machine, op: str, n: int, nbytes: float) -> float:
    """Wall seconds of one collective over n ranks, ``nbytes`` the whole buffer: the measured
    operation if calibrated, an all-reduce as reduce-scatter + all-gather (Rabenseifner;
    Thakur et al. 2005 §4), else the ring α-β of the link."""
    if n == 1:
        return 0.0
    if (op, n) in machine.ops:
        alpha, bw = machine.ops[(op, n)]
        return alpha + nbytes / bw
    if op == "all-reduce" and ("reduce-scatter", n) in machine.ops:
        return _coll(machine, "reduce-scatter", n, nbytes) + _coll(machine, "all-gather", n, nbytes)
    alpha, bw = machine.links[n]
    return collective_time(op, "ring", n, nbytes, max(alpha, 0.0), bw)


@dataclass(frozen=True)
class TinyPrediction:
    d: int
    t: int
    p: int
    m: int
    compute_s: float  # m micro-batches of the last stage, at the shared rate
    tp_s: float
    pp_s: float
    dp_s: float  # ZeRO-1's reduce-scatter + all-gather, tied embedding, SP grads
    bubble_s: float
    step_s: float
    optimizer_s: float = 0.0
    critical_s: float = 0.0  # the critical path: m·slot + bubble + dp + optimizer
    cores_s: float = 0.0  # CPU seconds of all ranks / cores: the cores' lower bound


def _line(c: tuple[float, float], x: float) -> float:
    return max(c[0] + c[1] * x, 0.0)


def _share(machine: Machine, busy: int) -> float:
    """Wall seconds per CPU second while ``busy`` ranks compute (:attr:`Machine.share`)."""
    return 1.0 if machine.cores is None else max(1.0, busy / machine.cores)


@dataclass(frozen=True)
class TinyShape:
    """The tiny GPT and its batch: ``L`` layers of width ``h`` with ``a`` heads, sequences of
    ``s`` tokens, a vocabulary of ``V``, a global batch of ``B`` sequences."""

    L: int
    h: int
    a: int
    s: int
    V: int
    B: int


def _check_layout(shape: TinyShape, d: int, t: int, p: int, b: int) -> None:
    """Raise unless (d, t, p) and b are positive integers that divide the shape."""
    for k, v in (("d", d), ("t", t), ("p", p), ("b", b)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{k} ({v}) must be a positive integer")
    L, a, s, B = shape.L, shape.a, shape.s, shape.B
    if L % p or a % t or s % t or B % (d * b):
        raise ValueError(
            f"layout (d, t, p) = ({d}, {t}, {p}), b = {b} breaks a rule: "
            f"p | L ({L}), t | a ({a}), t | s ({s}), d·b | B ({B})"
        )


def predict_tiny_step(
    machine: Machine, shape: TinyShape, *, d: int, t: int, p: int, b: int
) -> TinyPrediction:
    """Predicted seconds of one training step of the tiny GPT of ``shape`` (module docstring)
    under the layout (d, t, p) with micro-batch b: max(critical path, CPU seconds of all
    ranks / cores)."""
    _check_layout(shape, d, t, p, b)
    h, s, V = shape.h, shape.s, shape.V
    m = shape.B // (d * b)
    q, R, f = machine.bytes_per_elem, machine.flop_rate, machine.share
    lp = shape.L // p
    act = b * s * h * q  # (b, s, h), whole
    ag, rs = (_coll(machine, op, t, act) for op in ("all-gather", "reduce-scatter"))
    layer_cpu = machine.layer_overhead + 3 * layer_flops(b, s, h) / (t * R)  # compute only
    if t in machine.layers:  # measured: the SP block, its 8 collectives
        layer_wall, layer_tp = _line(machine.layers[t], b), 0.0
    else:  # c₀ + 3F/(tR) shared, 4 + 4 collectives
        layer_wall, layer_tp = f * layer_cpu, 4 * (ag + rs)
    ends = (
        _line(machine.ends, b) if machine.ends != (0.0, 0.0) else 3 * 2 * b * s * h * V / (t * R)
    )  # uncalibrated: the head's FLOPs
    # the last stage, slowest: its layers, head and loss, the (b, s, h) gather before the head
    stage = lp * layer_wall + f * ends
    tp = lp * layer_tp + ag
    a_p2p, bw_p2p = machine.p2p
    msg = act / t  # (b, s/t, h)
    pp = 0.0 if p == 1 else 2 * (a_p2p + msg / bw_p2p)  # forward, backward
    slot = stage + tp + pp  # every rank busy: at the shared rate
    bubble = slot * sum(_share(machine, k * d * t) for k in range(1, p)) / f
    layer_params = 12 * h * h + 13 * h
    stage_params = (lp * layer_params + (V + s) * h) / t
    dp = 0.0
    if d > 1:
        dp = _coll(machine, "reduce-scatter", d, stage_params * q) + _coll(
            machine, "all-gather", d, stage_params * q
        )
    emb = 0.0
    if p > 1 and (2 in machine.links or ("reduce-scatter", 2) in machine.ops):
        emb = _coll(machine, "all-reduce", 2, V * h * q)  # tied (V, h), whole on TP ranks
    sp_grads = _coll(machine, "all-reduce", t, lp * 6 * h * q)
    opt = _line(machine.optimizer, stage_params / d)  # ZeRO-1: Adam on this rank's shard, CPU
    critical = m * slot + bubble + dp + emb + sp_grads + f * opt
    # the cores' bound: the compute CPU seconds of every rank (d·t copies of each stage's work)
    cpu = d * t * (p * (m * lp * layer_cpu + opt) + m * ends)
    cores_bound = cpu / machine.cores if machine.cores else 0.0
    step = max(critical, cores_bound)
    return TinyPrediction(
        d,
        t,
        p,
        m,
        m * stage,
        m * tp,
        m * pp,
        dp + emb + sp_grads,
        bubble,
        step,
        f * opt,
        critical,
        cores_bound,
    )


def layouts(ranks: int) -> list[tuple[int, int, int]]:
    """Every (d, t, p) with d·t·p = ``ranks``."""
    return [
        (d, t, ranks // (d * t))
        for d in range(1, ranks + 1)
        if ranks % d == 0
        for t in range(1, ranks // d + 1)
        if (ranks // d) % t == 0
    ]
