"""Process-group helpers every chapter shares, each correct for a single process too (no
``torch.distributed`` set up, or a group of one rank), so the same model code runs sharded and
unsharded. The process group is always an argument, never a module-level global.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def group_size(group=None) -> int:
    """Ranks in ``group`` (the default group when None); 1 when torch.distributed is not set up."""
    if not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


def group_rank(group=None) -> int:
    """This rank's index in ``group``; 0 when torch.distributed is not set up."""
    if not dist.is_available() or not dist.is_initialized():
        return 0
    return dist.get_rank(group)


def allreduce_flat(grads: list[torch.Tensor], group=None) -> int:
    """Sum the tensors ``grads`` over ``group`` in one all-reduce of their flattened
    concatenation, then copy each sum back in place (forward: nothing; this runs after backward
    on gradients). Returns the number of elements reduced; 0 for no tensors or a group of one."""
    if not grads or group_size(group) == 1:
        return 0
    flat = torch.cat([g.reshape(-1) for g in grads])  # (n,)
    dist.all_reduce(flat, group=group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))  # back to g's shape
        offset += g.numel()
    return flat.numel()


def all_gather_dim0(x: torch.Tensor, group=None) -> torch.Tensor:
    """(m, ...) on each of n ranks -> (n·m, ...), blocks in rank order: one all-gather (no
    autograd; the chapters wrap it with its adjoint). ``x`` itself for a group of one."""
    n = group_size(group)
    if n == 1:
        return x
    out = x.new_empty((n * x.shape[0], *x.shape[1:]))
    dist.all_gather_single(out, x.contiguous(), group=group)
    return out


def reduce_scatter_dim0(x: torch.Tensor, group=None) -> torch.Tensor:
    """(n·m, ...) partial sums on each of n ranks -> (m, ...), block r summed over the ranks on
    rank r: one reduce-scatter (no autograd). ``x`` itself for a group of one."""
    n = group_size(group)
    if n == 1:
        return x
    out = x.new_empty((x.shape[0] // n, *x.shape[1:]))
    dist.reduce_scatter_single(out, x.contiguous(), group=group)
    return out
