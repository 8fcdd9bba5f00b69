"""Keeping the experts evenly loaded, beyond Switch's auxiliary loss (:mod:`.routing`'s symbols).

* **Sequence-level auxiliary loss** (DeepSeek-AI 2024, "DeepSeek-V3", Eq. 17–20): Switch's
  E·Σ f_e P_e on each sequence of T tokens, averaged, so no sequence piles onto a few experts.
* **Global-batch auxiliary loss** (Qiu et al. 2025, "Demons in the Detail"; Megatron-Core
  ``--moe-router-load-balancing-type global_aux_loss``): f_e over the whole global batch (an
  all-reduce of E counts), P_e over the local tokens: a micro-batch may be unbalanced as long as
  the batch is not, which leaves experts room to specialise.
* **Router z-loss** (Zoph et al. 2022, "ST-MoE", Eq. 5): mean of (log Σ_e exp(logit_e))². It
  balances nothing; it keeps router logits small, so low-precision rounding flips no choices.
* **Auxiliary-loss-free bias** (DeepSeek-V3 §2.1.2, Eq. 16): a bias b_e added to the scores only
  to CHOOSE the top-K, b_e ← b_e + γ·sign(mean load − load_e) after each step. No gradient, no
  loss term, no token dropped.
* **Drop by probability** (Megatron-Core ``--moe-token-drop-policy probs``): with a capacity C,
  an expert keeps its C most probable assignments instead of the first C in queue order.
* **Group-limited routing**: DeepSeek-V2 (§2.2.2, "device-limited") picks the M = 3 devices whose
  best expert scores highest, then the top-K among their experts; DeepSeek-V3 (§2.1.2,
  "node-limited") the M = 4 nodes with the largest sum of their K/M highest scores.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.dist import group_size

from .routing import load_balancing_loss, slot_counts


def sequence_load_balancing_loss(
    probs: torch.Tensor, experts: torch.Tensor, seq_len: int
) -> torch.Tensor:
    """Mean over sequences of T = ``seq_len`` consecutive tokens of Switch's loss on each."""
    n = probs.shape[0]
    if n % seq_len:
        raise ValueError(f"tokens ({n}) must be divisible by seq_len ({seq_len})")
    losses = [
        load_balancing_loss(p, e) for p, e in zip(probs.split(seq_len), experts.split(seq_len))
    ]
    return torch.stack(losses).mean()


def global_load_balancing_loss(
    probs: torch.Tensor, experts: torch.Tensor, counts: torch.Tensor | None = None, group=None
) -> torch.Tensor:
    """E·Σ_e f_e P_e with f_e from ``counts`` (E,) assignments per expert over the global batch
    (default: this call's, all-reduced over ``group``) and P_e the mean probability here."""
    n, E = probs.shape
    if counts is None:
        counts = slot_counts(experts, E).sum(0)  # (E,)
        if group_size(group) > 1:
            counts = counts.clone()
            dist.all_reduce(counts, group=group)
    f = counts.to(probs.dtype) / counts.sum().clamp(min=1)  # (E,) sums to 1
    return E * (f * probs.mean(0)).sum()


def router_z_loss(logits: torch.Tensor) -> torch.Tensor:
    """ST-MoE's z-loss: mean over tokens of logsumexp(logits)²."""
    return torch.logsumexp(logits, dim=-1).pow(2).mean()


def update_bias(bias: torch.Tensor, load: torch.Tensor, rate: float) -> torch.Tensor:
    """DeepSeek-V3's bias step: b_e + γ·sign(mean load − load_e) (in place, returned)."""
    with torch.no_grad():
        bias += rate * torch.sign(load.to(bias.dtype).mean() - load.to(bias.dtype))
    return bias


def keep_by_probability(
    probs_of_choice: torch.Tensor, experts: torch.Tensor, num_experts: int, capacity: int
) -> torch.Tensor:
    """(n, K) probabilities of the chosen experts -> (n, K) bool: each expert keeps its C most
    probable assignments (ties to the earlier slot-major position)."""
    n, K = experts.shape
    p = probs_of_choice.detach().T.reshape(-1)  # (K·n,) slot-major
    e = experts.T.reshape(-1)
    order = torch.argsort(-p, stable=True)  # most probable first
    oh = torch.nn.functional.one_hot(e[order], num_experts)  # (K·n, E)
    rank = ((oh.cumsum(0) - oh) * oh).sum(-1)  # place in its expert's queue
    keep = torch.empty_like(e, dtype=torch.bool)
    keep[order] = rank < capacity
    return keep.view(K, n).T


def group_limited_top_k(
    scores: torch.Tensor, top_k: int, groups: int, max_groups: int, group_score: str = "max"
) -> torch.Tensor:
    """(n, E) scores -> (n, K) experts chosen among the ``max_groups`` best of ``groups``
    equal groups of experts (devices or nodes). ``group_score``: "max" (DeepSeek-V2's devices)
    or "top_sum" (DeepSeek-V3's nodes: the sum of a group's K/M highest scores)."""
    n, E = scores.shape
    if E % groups:
        raise ValueError(f"experts ({E}) must be divisible by groups ({groups})")
    if not 1 <= max_groups <= groups:
        raise ValueError(f"max_groups ({max_groups}) must be between 1 and groups ({groups})")
    per = scores.view(n, groups, E // groups)  # (n, G, E/G)
    if group_score == "max":
        gs = per.max(-1).values
    elif group_score == "top_sum":
        gs = per.topk(max(1, top_k // max_groups), dim=-1).values.sum(-1)
    else:
        raise ValueError(f"group_score ({group_score!r}) must be 'max' or 'top_sum'")
    best = gs.topk(max_groups, dim=-1).indices  # (n, M)
    allowed = torch.zeros(n, groups, dtype=torch.bool).scatter(1, best, True)
    masked = scores.masked_fill(~allowed.repeat_interleave(E // groups, 1), float("-inf"))
    return masked.topk(top_k, dim=-1).indices  # (n, K)
