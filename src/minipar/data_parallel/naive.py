"""The simplest correct data parallelism: after ``loss.backward()``, average every gradient.

Each of the n ranks computes g_r = ∇ℓ(w; B_r) on its own equal-sized slice B_r of the global
batch B (the loss is a mean over the slice). The full-batch gradient is the mean of the slices'
gradients, ∇ℓ(w; B) = (1/n) Σ_r g_r, so after an all-reduce (sum) and a division by n every rank
holds the gradient a single process would compute on B and takes the same optimizer step.

Communication: one all-reduce per parameter tensor, Ψ·4 bytes (fp32) per step in total whatever
the batch size, and none of it starts before backward has finished (no overlap). Frozen
parameters (``requires_grad=False``) have no gradient and are skipped; a tied parameter appears
once in ``model.parameters()`` and is reduced once.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def broadcast_parameters(model: torch.nn.Module, group=None, src: int = 0) -> None:
    """Copy rank ``src``'s parameters and buffers to every rank (replicas must start equal)."""
    if dist.get_world_size(group) == 1:
        return
    for t in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(t.data, src=dist.get_global_rank(group, src) if group else src,
                       group=group)


def all_reduce_gradients(model: torch.nn.Module, group=None) -> None:
    """Replace each gradient by its mean over the ranks of ``group``: g ← (1/n) Σ_r g_r."""
    n = dist.get_world_size(group)
    if n == 1:
        return
    for p in model.parameters():           # deduplicated: a tied weight comes once
        if p.grad is None:                 # frozen, or not used in this step's forward
            continue
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, group=group)  # (same shape as p)
        p.grad.div_(n)                     # sum -> mean: the full-batch gradient
