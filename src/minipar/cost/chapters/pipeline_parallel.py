"""The pipeline bubble, in both conventions the literature uses.

Fraction of total time (GPipe, Huang et al. 2019 §2.3): idle / (idle + useful) = (p−1)/(m+p−1).
Relative to ideal time (Megatron, Narayanan et al. 2021 §2.2.1): t_bubble / t_ideal = (p−1)/m.
They describe the same schedule: f_total = r / (1 + r) with r the relative figure. With p = 4,
m = 4 that is 3/7 ≈ 43% of the step, or 75% on top of the ideal time.
"""

from __future__ import annotations

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def _check(schedule: str, p: int, m: int, v: int) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule ({schedule!r}) must be one of {', '.join(SCHEDULES)}")
    for k, x in (("p", p), ("m", m), ("v", v)):
        if not isinstance(x, int) or x < 1:
            raise ValueError(f"{k} ({x}) must be an integer >= 1")
    if schedule != "interleaved" and v != 1:
        raise ValueError(f"chunks v ({v}) apply only to the interleaved schedule, not {schedule}")
    if schedule == "interleaved" and m % p:
        raise ValueError(
            f"interleaved schedule needs microbatches m ({m}) to be a multiple of p ({p})"
        )


def bubble_relative_to_ideal(schedule: str, p: int, m: int, v: int = 1) -> float:
    """Bubble time / ideal time: (p−1)/m for GPipe and 1F1B, (p−1)/(v·m) interleaved.

    Narayanan et al. 2021 §2.2.1–2.2.2. 1F1B has GPipe's bubble; it saves activation memory.
    Interleaving needs m a multiple of p (Megatron-LM's constraint) and costs v× more p2p.
    """
    _check(schedule, p, m, v)
    return (p - 1) / (m * (v if schedule == "interleaved" else 1))


def bubble_fraction_of_total(schedule: str, p: int, m: int, v: int = 1) -> float:
    """Bubble time / total time: (p−1)/(m+p−1) (Huang et al. 2019, GPipe), and with v chunks
    ((p−1)/v) / (m + (p−1)/v) — the same as r/(1+r) for r = bubble_relative_to_ideal."""
    r = bubble_relative_to_ideal(schedule, p, m, v)
    return r / (1 + r)


def zb_h1_bubble_fraction(
    p: int, m: int, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0
) -> float:
    """ZB-H1's idle fraction of the step (Qi et al. 2024 §3): each rank idles
    (p−1)(t_F + t_B − t_W), with t_B the input-gradient and t_W the weight-gradient time, against
    1F1B's (p−1)(t_F + t_B + t_W); with equal times (p−1)/(3m+p−1). Needs m >= p."""
    for k, x in (("p", p), ("m", m)):
        if not isinstance(x, int) or x < 1:
            raise ValueError(f"{k} ({x}) must be an integer >= 1")
    if m < p:
        raise ValueError(f"the ZB-H1 bubble formula needs m ({m}) >= p ({p})")
    idle = (p - 1) * (t_f + t_b - t_w)
    return idle / (m * (t_f + t_b + t_w) + idle)


def peak_microbatches(schedule: str, rank: int, p: int, m: int, v: int = 1) -> int:
    """Most micro-batches (chunks when interleaved) whose activations rank ``rank`` holds:
    GPipe m (Huang et al. 2019); 1F1B min(p−r, m) (Narayanan et al. 2021 §2.2.1); interleaved
    min(v·m, 2(p−r−1) + (v−1)p + 1) chunks (Megatron-LM's warm-up plus one); ZB-H1 min(p, m)
    (Qi et al. 2024; a micro-batch counts until its W has run)."""
    if schedule == "zb-h1":
        return min(p, m)
    _check(schedule, p, m, v)
    if not 0 <= rank < p:
        raise ValueError(f"rank ({rank}) must be in 0..{p - 1}")
    if schedule == "gpipe":
        return m
    if schedule == "1f1b":
        return min(p - rank, m)
    return min(v * m, 2 * (p - rank - 1) + (v - 1) * p + 1)


def pp_p2p_bytes_per_microbatch(b: int, s: int, h: int, bytes_per_elem: float = 2) -> float:
    """Bytes crossing one pipeline-stage boundary per micro-batch: the (b, s, h) activation
    forward plus its gradient backward, 2·bsh·bytes (Narayanan et al. 2021 §3.2; with tensor
    parallelism Megatron's scatter/gather optimisation divides each rank's share by t)."""
    return 2 * b * s * h * bytes_per_elem
