"""The all-to-all of expert parallelism, as an autograd function, and the count exchange.

GShard (Lepikhin et al. 2021, §3.2) writes the MoE layer as two all-to-alls: *dispatch* sends
each token to the rank that owns its expert, *combine* brings the results back. With tokens
routed unevenly, rank r sends ``in_splits[d]`` rows to rank d and receives ``out_splits[s]``
rows from rank s: ``torch.distributed.all_to_all_single`` with uneven splits (gloo supports it
on CPU in torch 2.13; tested in ``tests/test_expert_parallel.py``).

Backward of an all-to-all is the all-to-all with the splits swapped: the gradient of the rows
rank r received from s goes back to s.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.dist import all_gather_dim0, group_size, reduce_scatter_dim0


def _a2a(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
    """(Σ in_splits, ...) -> (Σ out_splits, ...): rows [in_splits[:d]] go to rank d."""
    if group_size(group) == 1:
        return x
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out


class _AllToAll(torch.autograd.Function):
    """Forward: all-to-all with (out_splits, in_splits). Backward: the same with them swapped."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        ctx.splits, ctx.group = (out_splits, in_splits), group
        return _a2a(x, out_splits, in_splits, group)

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        return _a2a(grad, in_splits, out_splits, ctx.group), None, None, None


def all_to_all(
    x: torch.Tensor, out_splits: list[int], in_splits: list[int], group=None
) -> torch.Tensor:
    """Differentiable uneven all-to-all: send ``in_splits[d]`` rows of ``x`` to rank d, receive
    ``out_splits[s]`` rows from rank s, concatenated in source-rank order."""
    return _AllToAll.apply(x, list(out_splits), list(in_splits), group)


def exchange_counts(send_counts: torch.Tensor, group=None) -> torch.Tensor:
    """(ep, E/ep) rows this rank sends to each rank's local experts -> (ep, E/ep) rows this rank
    receives from each source rank for each of its local experts (one all-to-all of E integers)."""
    if group_size(group) == 1:
        return send_counts
    recv = torch.empty_like(send_counts)
    dist.all_to_all_single(recv, send_counts.contiguous(), group=group)
    return recv


def all_gather_counts(counts: torch.Tensor, group=None) -> torch.Tensor:
    """(K, E) this rank's slot counts -> (ep, K, E) every rank's, in rank order (all-gather)."""
    out = all_gather_dim0(counts.flatten(), group)  # (ep·K·E,)
    return out.view(group_size(group), *counts.shape)  # (ep, K, E)


class _AllGather(torch.autograd.Function):
    """Forward: rows of every rank, rank order (all-gather). Backward: reduce-scatter, rank r
    keeps the sum over ranks of the gradient of its own rows."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return all_gather_dim0(x, group)

    @staticmethod
    def backward(ctx, grad):
        return reduce_scatter_dim0(grad, ctx.group), None


class _ReduceScatter(torch.autograd.Function):
    """Forward: sum over ranks, rank r keeps row block r (reduce-scatter). Backward: all-gather."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return reduce_scatter_dim0(x, group)

    @staticmethod
    def backward(ctx, grad):
        return all_gather_dim0(grad, ctx.group), None


def all_gather_rows(x: torch.Tensor, group=None) -> torch.Tensor:
    """Differentiable all-gather along dim 0: (m, ...) on each of g ranks -> (g·m, ...)."""
    return x if group_size(group) == 1 else _AllGather.apply(x, group)


def reduce_scatter_rows(x: torch.Tensor, group=None) -> torch.Tensor:
    """Differentiable reduce-scatter along dim 0: (g·m, ...) -> (m, ...), summed over ranks."""
    return x if group_size(group) == 1 else _ReduceScatter.apply(x, group)


def a2a_index(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group=None):
    """Uneven all-to-all of integer metadata (expert indices): no gradient."""
    return _a2a(x, list(out_splits), list(in_splits), group)
