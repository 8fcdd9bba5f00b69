"""What each schedule should achieve, in closed form (equal stages, free communication); the
formulas live in :mod:`minipar.cost.chapters.pipeline_parallel`.

Bubble as a fraction of the step (GPipe's convention), with t_F, t_B, t_W the times of one
micro-batch's forward, input-gradient and weight-gradient work on one rank's whole share:

    gpipe, 1f1b   (p−1)/(m+p−1)            Huang et al. 2019 §2.3; Narayanan et al. 2021 §2.2.1
    interleaved   (p−1)/(v·m+p−1)          Narayanan et al. 2021 §2.2.2 (bubble ÷ v)
    zb-h1         (p−1)(t_F+t_B−t_W) / (m(t_F+t_B+t_W) + (p−1)(t_F+t_B−t_W)), m >= p
                                           Qi et al. 2024 §3 (ZB-H1)

Peak micro-batches whose activations a rank holds (in chunk units for interleaved):

    gpipe         m on every rank
    1f1b          min(p−r, m) on rank r
    interleaved   min(v·m, 2(p−r−1) + (v−1)p + 1) chunks on rank r (Megatron's warm-up + 1)
    zb-h1         min(p, m) on every rank (a micro-batch counts until its W has run)
"""

from __future__ import annotations

from minipar.cost.chapters.pipeline_parallel import (
    bubble_fraction_of_total,
    peak_microbatches,
    zb_h1_bubble_fraction,
)


def bubble_fraction(
    name: str, p: int, m: int, v: int = 1, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0
) -> float:
    """Idle fraction of the step, averaged over ranks (see the module docstring)."""
    if name == "zb-h1":
        return zb_h1_bubble_fraction(p, m, t_f, t_b, t_w)
    return bubble_fraction_of_total(name, p, m, v)


def peak_in_flight(name: str, rank: int, p: int, m: int, v: int = 1) -> int:
    """Peak micro-batches (chunks when interleaved) with stored activations on ``rank``."""
    return peak_microbatches(name, rank, p, m, v)
