"""Bytes each rank sends per step for data, ZeRO, tensor and pipeline parallelism.

All sizes are BYTES (multiply element counts by ``bytes_per_elem``); "per rank" means what one
rank puts on its outgoing link, which is what a per-direction bandwidth divides.
"""
from __future__ import annotations

from .memory import check_zero_stage


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"ranks n ({n}) must be an integer >= 1")


def dp_allreduce_bytes_per_rank(grad_bytes_total: float, n: int) -> float:
    """Ring all-reduce of all gradients over n data-parallel ranks: 2(n−1)/n·S bytes sent.

    Patarasuk & Yuan 2009; it tends to 2S, independent of n (unlike a parameter server).
    """
    _check_n(n)
    return 2 * (n - 1) / n * grad_bytes_total


def zero_bytes_per_rank(stage: int, param_bytes: float, n: int) -> float:
    """Bytes one rank sends per step under ZeRO stage 0–3 over n ranks (Rajbhandari et al. 2020 §7).

    Stages 0–2: 2(n−1)/n·S — a reduce-scatter of gradients then an all-gather of updated
    parameters (stage 0 calls the pair an all-reduce; stages 1 and 2 keep only their shard).
    Stage 3: 3(n−1)/n·S — all-gather parameters in forward, again in backward, and
    reduce-scatter gradients: 1.5× data parallelism. S = ``param_bytes`` (Ψ × bytes per element
    of the communicated dtype).
    """
    _check_n(n)
    check_zero_stage(stage)
    return (3 if stage == 3 else 2) * (n - 1) / n * param_bytes


def tp_bytes_per_layer(b: int, s: int, h: int, t: int, bytes_per_elem: float = 2) -> float:
    """Bytes one rank sends per transformer layer per micro-batch under Megatron tensor parallelism.

    Shoeybi et al. 2019 (Megatron-LM) §3, Fig. 4: each layer does 2 all-reduces in forward (g
    after attention and after the MLP) and 2 in backward (f before each), every one on the (b, s, h)
    activation; a ring all-reduce sends 2(t−1)/t·bsh·bytes per rank. Total 4 × that. Sequence
    parallelism replaces each all-reduce by an all-gather + reduce-scatter: same bytes.
    """
    if t < 1:
        raise ValueError(f"t ({t}) must be >= 1")
    return 4 * 2 * (t - 1) / t * b * s * h * bytes_per_elem


def pp_p2p_bytes_per_microbatch(b: int, s: int, h: int, bytes_per_elem: float = 2) -> float:
    """Bytes crossing one pipeline-stage boundary per micro-batch: the (b, s, h) activation
    forward plus its gradient backward, 2·bsh·bytes (Narayanan et al. 2021 §3.2; with tensor
    parallelism Megatron's scatter/gather optimisation divides each rank's share by t)."""
    return 2 * b * s * h * bytes_per_elem
