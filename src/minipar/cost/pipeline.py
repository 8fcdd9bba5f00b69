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
        raise ValueError(f"interleaved schedule needs microbatches m ({m}) to be a multiple "
                         f"of p ({p})")


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
