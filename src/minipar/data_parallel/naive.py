"""The simplest correct data parallelism: after ``loss.backward()``, average every gradient.

Each of the n ranks computes g_r = ∇ℓ(w; B_r) on its own equal-sized slice B_r of the global
batch B (the loss is a mean over the slice). The full-batch gradient is the mean of the slices'
gradients, ∇ℓ(w; B) = (1/n) Σ_r g_r, so after an all-reduce (sum) and a division by n every rank
holds the gradient a single process would compute on B and takes the same optimizer step.

Communication: one all-reduce per parameter tensor, Ψ·4 bytes (fp32) per step in total whatever
the batch size, and none of it starts before backward has finished (no overlap). Frozen
parameters (``requires_grad=False``) have no gradient and are skipped; a tied parameter appears
once in ``model.parameters()`` and is reduced once.

Unused parameters follow PyTorch DDP (:mod:`.bucketed`): a ``None`` gradient raises before any
collective (the ranks would otherwise issue different collectives and hang), unless
``find_unused_parameters=True``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def broadcast_parameters(model: torch.nn.Module, group=None, src: int = 0) -> None:
    """Copy the parameters and buffers of rank ``src`` of ``group`` to every rank of ``group``
    (replicas must start equal; DDP does this when it wraps a model)."""
    if dist.get_world_size(group) == 1:
        return
    root = dist.get_global_rank(group, src) if group is not None else src
    for t in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(t.data, src=root, group=group)  # (same shape as t)


def all_reduce_gradients(
    model: torch.nn.Module, group=None, find_unused_parameters: bool = False
) -> None:
    """Replace each gradient by its mean over the ranks of ``group``: g ← (1/n) Σ_r g_r."""
    n = dist.get_world_size(group)
    if n == 1:
        return
    params = [p for p in model.parameters() if p.requires_grad]  # deduplicated: tied once
    if find_unused_parameters:
        used = torch.tensor(
            [float(p.grad is not None) for p in params], device=params[0].device
        )  # (number of parameters,)
        dist.all_reduce(used, group=group)
        params = [p for p, u in zip(params, used.tolist()) if u > 0]
        for p in params:
            if p.grad is None:  # unused here, used elsewhere
                p.grad = torch.zeros_like(p)
    else:
        missing = [
            name for name, p in model.named_parameters() if p.requires_grad and p.grad is None
        ]
        if missing:
            raise RuntimeError(
                "every trainable parameter must have a gradient unless "
                "find_unused_parameters=True; no gradient for: " + ", ".join(missing)
            )
    for p in params:
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, group=group)  # (same shape as p)
        p.grad.div_(n)  # sum -> mean: the full-batch gradient
