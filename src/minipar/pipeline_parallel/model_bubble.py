"""What each schedule should achieve, in closed form (equal stages, free communication): the bubble
as a fraction of the step (GPipe's convention) and the peak micro-batches whose activations a
rank holds, both from :mod:`minipar.cost.chapters.pipeline_parallel`, which cites each formula
(Huang et al. 2019; Narayanan et al. 2021 §2.2; Qi et al. 2024 §3 for ZB-H1).
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
    """Idle fraction of the step, averaged over ranks; t_F, t_B, t_W (one micro-batch's forward,
    input- and weight-gradient work on a rank's whole share) matter for ZB-H1 only."""
    if name == "zb-h1":
        return zb_h1_bubble_fraction(p, m, t_f, t_b, t_w)
    return bubble_fraction_of_total(name, p, m, v)


def peak_in_flight(name: str, rank: int, p: int, m: int, v: int = 1) -> int:
    """Peak micro-batches (chunks when interleaved) with stored activations on ``rank``."""
    return peak_microbatches(name, rank, p, m, v)
