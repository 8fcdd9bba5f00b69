"""The conjugate communication operators of Megatron tensor parallelism, as autograd functions.

Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
Parallelism", §3 and Figure 3, name two operators:

* **f** (:func:`copy_to_tp_region`): forward the identity (every rank already holds the whole
  input), backward an all-reduce (each rank's column shard produced only a part of the input's
  gradient: the parts add up).
* **g** (:func:`reduce_from_tp_region`): forward an all-reduce (each rank's row shard produced a
  partial sum of the output), backward the identity (the output gradient is already whole).

They are conjugate: one's forward is the other's backward. Sequence parallelism (Korthikanti et
al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4.2.2, Figure 5)
splits each all-reduce into its two halves, a reduce-scatter and an all-gather along the
sequence, and gives a second conjugate pair:

* **g** (:func:`gather_from_sp_region`): forward all-gather along s, backward reduce-scatter;
* **ḡ** (:func:`reduce_scatter_to_sp_region`): forward reduce-scatter along s, backward all-gather.

Every operator takes the process group as an argument and is the identity for a group of one
rank (or when no process group exists), so the same model code runs in a single process.
Activations are batch-first, ``(b, s, h)``; the sequence dimension is 1.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.dist import all_gather_dim0, group_rank, group_size, reduce_scatter_dim0


def divide(numerator: int, denominator: int, what: str = "dimension") -> int:
    """``numerator // denominator``, or a ValueError naming the rule and the values."""
    if numerator % denominator:
        raise ValueError(f"{what} ({numerator}) must be divisible by t ({denominator})")
    return numerator // denominator


# ------------------------------------------------------------------ the primitives (no autograd)
def _all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    if group_size(group) == 1:
        return x
    x = x.contiguous().clone()
    dist.all_reduce(x, group=group)
    return x


def _gather_seq(x: torch.Tensor, group) -> torch.Tensor:
    """(b, s/t, h) on each rank -> (b, s, h), shards in rank order."""
    if group_size(group) == 1:
        return x
    out = all_gather_dim0(x.transpose(0, 1), group)  # (s, b, h): gathered along dim 0
    return out.transpose(0, 1).contiguous()  # (b, s, h)


def _reduce_scatter_seq(x: torch.Tensor, group) -> torch.Tensor:
    """(b, s, h) partial sums on each rank -> (b, s/t, h): the summed shard of this rank."""
    t = group_size(group)
    if t == 1:
        return x
    divide(x.shape[1], t, "sequence length")
    out = reduce_scatter_dim0(x.transpose(0, 1), group)  # (s/t, b, h)
    return out.transpose(0, 1).contiguous()  # (b, s/t, h)


def _split_seq(x: torch.Tensor, group) -> torch.Tensor:
    """(b, s, h) replicated -> this rank's (b, s/t, h) slice (no communication)."""
    t = group_size(group)
    if t == 1:
        return x
    s = divide(x.shape[1], t, "sequence length")
    r = group_rank(group)
    return x[:, r * s : (r + 1) * s].contiguous()  # (b, s/t, h)


def _gather_last(x: torch.Tensor, group) -> torch.Tensor:
    """(..., n/t) on each rank -> (..., n), shards in rank order (used by ``gather_output``)."""
    t = group_size(group)
    if t == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(t)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=-1)  # (..., n)


def _split_last(x: torch.Tensor, group) -> torch.Tensor:
    t = group_size(group)
    if t == 1:
        return x
    n = divide(x.shape[-1], t, "last dimension")
    r = group_rank(group)
    return x[..., r * n : (r + 1) * n].contiguous()  # (..., n/t)


# ------------------------------------------------------------------ autograd functions
class _CopyToTPRegion(torch.autograd.Function):
    """f: identity forward, all-reduce backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.group), None


class _ReduceFromTPRegion(torch.autograd.Function):
    """g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromSPRegion(torch.autograd.Function):
    """all-gather along s forward, reduce-scatter backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_seq(grad, ctx.group), None


class _ReduceScatterToSPRegion(torch.autograd.Function):
    """reduce-scatter along s forward, all-gather backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather_seq(grad, ctx.group), None


class _ScatterToSPRegion(torch.autograd.Function):
    """split along s forward (no traffic), all-gather backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _split_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather_seq(grad, ctx.group), None


class _GatherFromTPRegion(torch.autograd.Function):
    """all-gather along the last dim forward, split backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather_last(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _split_last(grad, ctx.group), None


# ------------------------------------------------------------------ public, Megatron's names
def copy_to_tp_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """f: forward identity, backward all-reduce over ``group``. Shape unchanged."""
    return _CopyToTPRegion.apply(x, group)


def reduce_from_tp_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """g: forward all-reduce (sum of partial results) over ``group``, backward identity."""
    return _ReduceFromTPRegion.apply(x, group)


def gather_from_sp_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """(b, s/t, h) -> (b, s, h): forward all-gather along s, backward reduce-scatter."""
    return _GatherFromSPRegion.apply(x, group)


def reduce_scatter_to_sp_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """(b, s, h) partial sums -> (b, s/t, h): forward reduce-scatter along s, backward all-gather."""
    return _ReduceScatterToSPRegion.apply(x, group)


def scatter_to_sp_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """(b, s, h) replicated -> (b, s/t, h): forward take this rank's slice, backward all-gather."""
    return _ScatterToSPRegion.apply(x, group)


def gather_from_tp_region(x: torch.Tensor, group=None) -> torch.Tensor:
    """(..., n/t) -> (..., n): forward all-gather along the last dim, backward keep own slice."""
    return _GatherFromTPRegion.apply(x, group)
