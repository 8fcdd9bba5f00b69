"""α-β cost of collective operations, and nccl-tests' algorithm / bus bandwidth.

Model (Hockney; used throughout Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1)): sending one message of k bytes costs
``α + k·β`` with α the latency (s) and β = 1/bandwidth (s/byte), bandwidth per direction. Links are
full duplex, so a rank can send and receive k bytes at once in α + kβ. The reduction compute
term γ of Thakur et al. is ignored (we assume the arithmetic is much faster than the link).

Size convention (nccl-tests PERFORMANCE.md): ``nbytes`` S is the whole buffer. For all-reduce,
broadcast and reduce that is the buffer each rank holds; for all-gather the full *output* (each
rank contributes S/n); for reduce-scatter the full *input* (each rank keeps S/n); for all-to-all
the per-rank send buffer (S/n to each peer).

Non-power-of-two n: recursive doubling / halving exchange with partner ``rank XOR 2^k`` and so
need n = 2^k. For all-reduce and reduce we apply the standard MPICH fix-up (Thakur et al. §4.4):
the r = n − n' extra ranks (n' the largest power of two ≤ n) first send their whole buffer to a
partner (α + Sβ), the n' ranks run the algorithm, and for all-reduce the result is sent back
(another α + Sβ). For all-gather and reduce-scatter we raise ``ValueError`` instead (MPICH
switches to Bruck / pairwise algorithms there, not modelled).
"""

from __future__ import annotations

from ..kernels.hardware import Link

OPS = ("all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce", "all-to-all")

ALGORITHMS: dict[str, tuple[str, ...]] = {
    # all-reduce: ring = reduce-scatter + all-gather; binomial-tree = reduce then broadcast;
    # rabenseifner = recursive-halving reduce-scatter + recursive-doubling all-gather.
    "all-reduce": (
        "ring",
        "recursive-doubling",
        "rabenseifner",
        "binomial-tree",
        "parameter-server",
    ),
    "all-gather": ("ring", "recursive-doubling"),
    "reduce-scatter": ("ring", "recursive-halving"),
    "broadcast": ("binomial-tree", "scatter-allgather"),  # scatter-allgather: van de Geijn
    "reduce": ("binomial-tree", "rabenseifner"),  # rabenseifner: reduce-scatter + gather
    "all-to-all": ("pairwise-exchange",),
}

_POW2_ONLY = {("all-gather", "recursive-doubling"), ("reduce-scatter", "recursive-halving")}


def _lg(n: int) -> int:
    """⌈log2 n⌉: number of rounds of a binomial tree / recursive doubling."""
    return (n - 1).bit_length()


def _is_pow2(n: int) -> bool:
    return n & (n - 1) == 0


def _check(op: str, n: int, nbytes: float, algorithm: str | None = None) -> None:
    if op not in OPS:
        raise ValueError(f"op ({op!r}) must be one of {', '.join(OPS)}")
    if algorithm is not None and algorithm not in ALGORITHMS[op]:
        raise ValueError(
            f"algorithm ({algorithm!r}) is not one for {op}; "
            f"choose from {', '.join(ALGORITHMS[op])}"
        )
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"ranks n ({n}) must be an integer >= 1")
    if nbytes < 0:
        raise ValueError(f"nbytes ({nbytes}) must be >= 0")
    if algorithm is not None and (op, algorithm) in _POW2_ONLY and not _is_pow2(n):
        raise ValueError(f"{algorithm} {op} needs n a power of two, got n ({n})")


def busbw_factor(op: str, n: int) -> float:
    """busbw / algbw, from nccl-tests PERFORMANCE.md: the fraction of S one link must carry.

    all-reduce 2(n−1)/n; all-gather, reduce-scatter, all-to-all (n−1)/n; broadcast, reduce 1.
    """
    _check(op, n, 0)
    if op == "all-reduce":
        return 2 * (n - 1) / n
    if op in ("all-gather", "reduce-scatter", "all-to-all"):
        return (n - 1) / n
    return 1.0


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth S / t in bytes/s (nccl-tests PERFORMANCE.md)."""
    if seconds <= 0:
        raise ValueError(f"seconds ({seconds}) must be > 0")
    return nbytes / seconds


def busbw(op: str, n: int, nbytes: float, seconds: float) -> float:
    """Bus bandwidth algbw × busbw_factor(op, n), comparable to a link's per-direction peak."""
    return algbw(nbytes, seconds) * busbw_factor(op, n)


def ring_bytes_per_rank(op: str, n: int, nbytes: float) -> float:
    """Bytes each rank SENDS in a ring: all-reduce 2(n−1)/n·S, all-gather/reduce-scatter (n−1)/n·S.

    (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms"; Thakur et al. 2005 §4.)
    """
    _check(op, n, nbytes)
    if op not in ("all-reduce", "all-gather", "reduce-scatter"):
        raise ValueError(
            f"op ({op!r}) has no ring algorithm here; ring covers "
            "all-reduce, all-gather, reduce-scatter"
        )
    return busbw_factor(op, n) * nbytes


def parameter_server_time(n: int, nbytes: float, alpha: float, bandwidth: float) -> float:
    """One server (one of the n ranks) collects n−1 gradients, sums, then sends n−1 copies back.

    Assumptions: the server has one full-duplex link of ``bandwidth`` bytes/s per direction, the
    n−1 workers' messages stream back to back through it (latency paid once per phase), and the
    send phase starts only when the sum is complete: t = 2·(α + (n−1)·S·β). Its cost grows with n,
    unlike the ring's, which is why ring all-reduce replaced it (Li et al. 2014 "Scaling distributed
    machine learning with the parameter server"; Sergeev & Del Balso 2018, Horovod).
    """
    _check("all-reduce", n, nbytes)
    if n == 1:
        return 0.0
    return 2 * (alpha + (n - 1) * nbytes / bandwidth)


def collective_time(
    op: str, algorithm: str, n: int, nbytes: float, alpha: float, bandwidth: float
) -> float:
    """Seconds for one collective on n ranks, S = ``nbytes`` (see module docstring), α-β model.

    Formulas from Thakur, Rabenseifner & Gropp 2005 (§3–4), β = 1/bandwidth, L = ⌈log2 n⌉:
      all-reduce   ring                2(n−1)α + 2(n−1)/n·Sβ
                   recursive-doubling  L(α + Sβ)
                   rabenseifner        2Lα + 2(n−1)/n·Sβ
                   binomial-tree       2L(α + Sβ)        (reduce, then broadcast)
                   parameter-server    see parameter_server_time
      all-gather   ring (n−1)α + (n−1)/n·Sβ;   recursive-doubling Lα + (n−1)/n·Sβ
      reduce-scatter ring (n−1)α + (n−1)/n·Sβ; recursive-halving Lα + (n−1)/n·Sβ
      broadcast    binomial-tree L(α + Sβ); scatter-allgather (L + n − 1)α + 2(n−1)/n·Sβ
      reduce       binomial-tree L(α + Sβ); rabenseifner 2Lα + 2(n−1)/n·Sβ
      all-to-all   pairwise-exchange (n−1)α + (n−1)/n·Sβ
    """
    _check(op, n, nbytes, algorithm)
    if bandwidth <= 0:
        raise ValueError(f"bandwidth ({bandwidth}) must be > 0 bytes/s")
    if alpha < 0:
        raise ValueError(f"alpha ({alpha}) must be >= 0 s")
    if n == 1:
        return 0.0
    if (op, algorithm) == ("all-reduce", "parameter-server"):
        return parameter_server_time(n, nbytes, alpha, bandwidth)
    beta, S = 1.0 / bandwidth, nbytes
    extra = 0.0
    if (op, algorithm) in {
        ("all-reduce", "recursive-doubling"),
        ("all-reduce", "rabenseifner"),
        ("reduce", "rabenseifner"),
    } and not _is_pow2(n):
        extra = (2 if op == "all-reduce" else 1) * (alpha + S * beta)  # Thakur §4.4 fix-up
        n = 1 << (n.bit_length() - 1)  # n' = 2^⌊log2 n⌋
    L, frac = _lg(n), (n - 1) / n
    if algorithm in ("ring", "pairwise-exchange"):
        steps = 2 * (n - 1) if op == "all-reduce" else n - 1
        return steps * alpha + busbw_factor(op, n) * S * beta
    if algorithm == "recursive-doubling" and op == "all-reduce":
        return extra + L * (alpha + S * beta)
    if algorithm in ("recursive-doubling", "recursive-halving"):
        return L * alpha + frac * S * beta
    if algorithm == "rabenseifner":
        return extra + 2 * L * alpha + 2 * frac * S * beta
    if algorithm == "binomial-tree":
        return (2 if op == "all-reduce" else 1) * L * (alpha + S * beta)
    if algorithm == "scatter-allgather":
        return (L + n - 1) * alpha + 2 * frac * S * beta
    raise AssertionError(f"unhandled {op}/{algorithm}")


def double_binary_tree_all_reduce_time(
    n: int, nbytes: float, alpha: float, bandwidth: float
) -> float:
    """All-reduce over two complementary binary trees, pipelined in chunks (NCCL's "tree"):
    2⌈log2 n⌉α + 2·S·β, latency logarithmic in n, bandwidth term 2Sβ (≈ the ring's 2(n−1)/n·Sβ).

    Each tree reduces half of S up to its root and broadcasts it back down; a rank is interior in
    at most one tree, so in the pipelined limit every link carries S in each direction. We charge
    the ⌈log2 n⌉ depth once up and once down (the pipeline fill) and ignore the chunk count.
    Sanders, Speck & Träff 2009 ("Two-tree algorithms for full bandwidth broadcast, reduction and
    scan", Parallel Computing 35(12)); NCCL 2.4 adopted it for inter-node all-reduce (Jeaugey 2019,
    "Massively Scale Your Deep Learning Training with NCCL 2.4", NVIDIA blog).
    """
    _check("all-reduce", n, nbytes)
    if bandwidth <= 0 or alpha < 0:
        raise ValueError(f"bandwidth ({bandwidth}) must be > 0 and alpha ({alpha}) >= 0")
    if n == 1:
        return 0.0
    return 2 * _lg(n) * alpha + 2 * nbytes / bandwidth


def hierarchical_all_reduce_time(
    nodes: int,
    gpus_per_node: int,
    nbytes: float,
    intra: Link,
    inter: Link,
    inter_algorithm: str = "ring",
) -> float:
    """All-reduce of S bytes over ``nodes × gpus_per_node`` ranks in three phases (g = gpus/node):

    1. ring reduce-scatter inside each node over ``intra`` (each GPU then owns S/g);
    2. all-reduce of those S/g bytes across nodes over ``inter``, g of them in parallel
       (``inter_algorithm``: an all-reduce algorithm of :data:`ALGORITHMS`, or
       ``"double-binary-tree"``, see :func:`double_binary_tree_all_reduce_time`);
    3. ring all-gather inside each node over ``intra``.
    Assumes each GPU has its own inter-node link (rail-optimised, one NIC per GPU as in DGX
    H100), so the g phase-2 all-reduces do not share a NIC. Source: the 2D-torus all-reduce of
    Mikami et al. 2018 ("Massively Distributed SGD: ImageNet/ResNet-50 Training in a Flash",
    arXiv:1811.05233); each phase costed with Thakur et al. 2005.
    """
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"nodes ({nodes}) and gpus_per_node ({gpus_per_node}) must be >= 1")
    g = gpus_per_node
    t_rs = collective_time("reduce-scatter", "ring", g, nbytes, intra.alpha, intra.bandwidth)
    if inter_algorithm == "double-binary-tree":
        t_ar = double_binary_tree_all_reduce_time(nodes, nbytes / g, inter.alpha, inter.bandwidth)
    else:
        t_ar = collective_time(
            "all-reduce", inter_algorithm, nodes, nbytes / g, inter.alpha, inter.bandwidth
        )
    t_ag = collective_time("all-gather", "ring", g, nbytes, intra.alpha, intra.bandwidth)
    return t_rs + t_ar + t_ag


def fit_alpha_beta(
    sizes_bytes, seconds, op: str, n: int, algorithm: str = "ring"
) -> tuple[float, float]:
    """Least-squares fit of measured times to the α-β model of ``collective_time(op, algorithm)``.

    That model is t = A·α + B·S/bandwidth with A, B fixed by (op, algorithm, n) (for a ring
    all-reduce A = 2(n−1), B = 2(n−1)/n). We fit the line t = a + c·(B·S) and return
    (α, bandwidth) = (a / A, 1 / c): α per message, bandwidth per direction, so that
    ``collective_time(op, algorithm, n, S, α, bandwidth)`` reproduces the fitted line.

    The fit minimises the *relative* error, Σ((a + c·x − t)/t)², i.e. weights 1/t²: sizes span
    several decades, and an ordinary fit would let the largest messages set α too. With noisy
    data α can come out negative; we return it as fitted. Pure Python.
    """
    _check(op, n, 0, algorithm)
    xs, ts = [float(x) for x in sizes_bytes], [float(t) for t in seconds]
    if len(xs) != len(ts) or len(set(xs)) < 2:
        raise ValueError(
            f"need >= 2 distinct sizes and as many times (got {len(xs)} sizes, {len(ts)} times)"
        )
    A = collective_time(op, algorithm, n, 0.0, 1.0, 1.0)  # seconds per unit α
    B = collective_time(op, algorithm, n, 1.0, 0.0, 1.0)  # bytes on the wire per byte of S
    if A == 0 or B == 0:
        raise ValueError(f"n ({n}) = 1: a collective on one rank costs nothing, nothing to fit")
    if min(ts) <= 0:
        raise ValueError(f"measured times must be > 0 seconds, got {min(ts)}")
    xs = [B * x for x in xs]
    ws = [1.0 / t**2 for t in ts]  # weighted least squares
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs)) / sw
    mt = sum(w * t for w, t in zip(ws, ts)) / sw
    c = sum(w * (x - mx) * (t - mt) for w, x, t in zip(ws, xs, ts)) / sum(
        w * (x - mx) ** 2 for w, x in zip(ws, xs)
    )
    if c <= 0:
        raise ValueError(
            f"fitted seconds per byte ({c:.3g}) must be > 0: times do not grow with size"
        )
    return (mt - c * mx) / A, 1.0 / c
