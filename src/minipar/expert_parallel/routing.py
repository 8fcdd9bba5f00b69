"""Routing a token to its experts: top-K gates, the capacity limit, and the balancing loss.

Pure functions shared by the one-process :class:`~minipar.expert_parallel.MoE` and the
expert-parallel layer, so both make exactly the same decisions. Symbols: E experts, K experts per
token, n tokens, C tokens an expert may take (its capacity), c_f the capacity factor.

* **Gates** (Shazeer et al. 2017, "Outrageously Large Neural Networks", §2.1; Jiang et al. 2024,
  "Mixtral of Experts", Eq. 1): p = softmax(router logits) over all E experts, the K largest
  renormalised to sum 1 (with K = 1 the gate is then 1 and the router learns only through the
  balancing loss; Switch keeps the unnormalised p: ``renormalize=False``).
* **Capacity** (Lepikhin et al. 2021, "GShard", §2.2; Fedus et al. 2022, "Switch Transformers",
  §2.2): C = ⌈c_f · K · n / E⌉, an expert's share of a perfectly even load times c_f.
* **Dropping order**: an expert accepts assignments in *priority order*, slot first, then token
  index (every first choice before any second choice, as GShard's Algorithm 1); those past C are
  dropped and contribute zero (the residual connection, not modelled here, carries the token on).
* **Balancing loss** (Fedus et al. 2022, Eq. 4–6): aux = E · Σ_e f_e · P_e, f_e the fraction of
  the n·K assignments routed to e (before dropping), P_e the mean router probability of e: 1 for
  an even router, at most E/K; only P carries a gradient. (Dividing the counts by n·K keeps
  aux = 1 at balance for any K, as Megatron-LM's ``switch_load_balancing_loss_func`` does.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minipar.cost.chapters.expert_parallel import capacity  # noqa: F401  one definition, the cost model's


def top_k_gates(
    logits: torch.Tensor, top_k: int, renormalize: bool = True, bias: torch.Tensor | None = None
):
    """Router logits (n, E) -> (probs (n, E), gates (n, K), experts (n, K)): ``experts[i, j]``
    token i's j-th choice (largest probability first, ties to the lower index as ``torch.topk``),
    ``gates[i]`` summing to 1 when ``renormalize``. ``bias`` (E,), DeepSeek-V3's balancing bias,
    only chooses: the gates are the unbiased probabilities of the chosen experts."""
    E = logits.shape[-1]
    if not 1 <= top_k <= E:
        raise ValueError(f"top_k ({top_k}) must be between 1 and experts ({E})")
    probs = torch.softmax(logits, dim=-1)  # (n, E)
    if bias is None:
        top_p, experts = probs.topk(top_k, dim=-1)  # (n, K), (n, K)
    else:
        experts = (probs.detach() + bias).topk(top_k, dim=-1).indices
        top_p = probs.gather(-1, experts)  # (n, K) unbiased
    gates = top_p / top_p.sum(-1, keepdim=True) if renormalize else top_p
    return probs, gates, experts


def slot_counts(experts: torch.Tensor, num_experts: int) -> torch.Tensor:
    """(n, K) expert choices -> (K, E) int64: how many tokens chose expert e as their j-th choice."""
    onehot = F.one_hot(experts.T, num_experts)  # (K, n, E)
    return onehot.sum(1)  # (K, E)


def priority_positions(
    experts: torch.Tensor, num_experts: int, ahead: torch.Tensor | None = None
) -> torch.Tensor:
    """(n, K) choices -> (n, K) position of each assignment in its expert's queue (kept: < C),
    priority (slot j, token i). ``ahead`` (K, E) counts the assignments queued before this
    block's j-th choices at expert e: None for one process (this block's earlier slots); with
    expert parallelism the block is one rank's tokens and :func:`queue_ahead` adds the others'."""
    onehot = F.one_hot(experts.T, num_experts)  # (K, n, E)
    if ahead is None:
        counts = onehot.sum(1)  # (K, E)
        ahead = counts.cumsum(0) - counts  # slots < j
    within = onehot.cumsum(1) - onehot  # (K, n, E) same slot, tokens < i
    pos = within + ahead[:, None, :]
    return (pos * onehot).sum(-1).T  # (n, K)


def queue_ahead(all_counts: torch.Tensor, rank: int) -> torch.Tensor:
    """(ranks, K, E) every rank's :func:`slot_counts` -> (K, E) assignments queued before rank
    ``rank``'s j-th choices: all ranks' slots < j, then lower ranks' slot j. This makes the
    expert-parallel queue the one-process queue of all ranks' tokens concatenated in rank order."""
    total = all_counts.sum(0)  # (K, E)
    return total.cumsum(0) - total + all_counts[:rank].sum(0)


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """Switch's auxiliary loss E · Σ_e f_e · P_e (Fedus et al. 2022, Eq. 4), f over n·K choices."""
    n, E = probs.shape
    f = slot_counts(experts, E).sum(0).to(probs.dtype) / (n * experts.shape[1])  # (E,)
    P = probs.mean(0)  # (E,)
    return E * (f * P).sum()
