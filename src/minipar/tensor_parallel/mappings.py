"""The conjugate communication operators of Megatron tensor parallelism, as autograd functions.

Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
Parallelism", §3 and Figure 3:

* **f** (:func:`copy_to_tp_region`): forward the identity (every rank holds the whole input),
  backward an all-reduce (each rank's column shard produced a part of the input's gradient);
* **g** (:func:`reduce_from_tp_region`): forward an all-reduce (each rank's row shard produced a
  partial sum of the output), backward the identity.

Sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", §4.2.2, Figure 5) splits each all-reduce into a reduce-scatter and an
all-gather along the sequence: **g** (:func:`gather_from_sp_region`, all-gather forward,
reduce-scatter backward) and **ḡ** (:func:`reduce_scatter_to_sp_region`, the reverse).

Every operator takes the process group as an argument and is the identity for a group of one
rank, so the same model code runs in one process. Activations are ``(b, s, h)``.
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


def _conjugate(name: str, forward, backward, doc: str) -> type:
    """An autograd function ``name`` whose forward is ``forward(x, group)`` and backward
    ``backward(grad, group)``."""

    def fwd(ctx, x, group):
        ctx.group = group
        return forward(x, group)

    def bwd(ctx, grad):
        return backward(grad, ctx.group), None

    body = {"forward": staticmethod(fwd), "backward": staticmethod(bwd), "__doc__": doc}
    return type(name, (torch.autograd.Function,), body)


_GatherFromSPRegion = _conjugate(
    "_GatherFromSPRegion", _gather_seq, _reduce_scatter_seq, "all-gather along s, reduce-scatter"
)
_ReduceScatterToSPRegion = _conjugate(
    "_ReduceScatterToSPRegion",
    _reduce_scatter_seq,
    _gather_seq,
    "reduce-scatter along s, all-gather",
)
_ScatterToSPRegion = _conjugate(
    "_ScatterToSPRegion", _split_seq, _gather_seq, "split along s (no traffic), all-gather"
)
_GatherToTPRanks = _conjugate(
    "_GatherToTPRanks", _gather_seq, _split_seq, "all-gather along s, keep own slice"
)
_GatherFromTPRegion = _conjugate(
    "_GatherFromTPRegion", _gather_last, _split_last, "all-gather along the last dim, split"
)


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


def gather_from_tp_ranks(x: torch.Tensor, group=None) -> torch.Tensor:
    """(b, s/t, h) -> (b, s, h): forward all-gather along s, backward keep this rank's slice (the
    gradient of a replicated activation is the same on every TP rank): the conjugate of
    :func:`scatter_to_sp_region`, for a replicated activation such as a pipeline message."""
    return x if group_size(group) == 1 else _GatherToTPRanks.apply(x, group)
