"""Column-, row- and vocabulary-parallel layers (Shoeybi et al. 2019, Megatron-LM, §3).

Storage follows ``F.linear``, ``Y = X Aᵀ + b`` with ``A`` of shape (out, in):

* :class:`ColumnParallelLinear`: ``A = [A_1; …; A_t]`` split along the *output* features; rank r
  computes ``Y_r = X A_rᵀ + b_r``, a disjoint slice of the output. Forward needs no
  communication (f); backward all-reduces the input gradient (each rank's is a partial sum).
* :class:`RowParallelLinear`: ``A = [A_1 … A_t]`` split along the *input* features; rank r reads
  its slice ``X_r``, ``X_r A_rᵀ`` is a partial sum that g all-reduces, then the replicated bias
  is added **once**.
* :class:`VocabParallelEmbedding`: the (v, h) table split along the vocabulary; a token outside
  this rank's rows looks up zeros, and g sums the one non-zero row across ranks.

``from_full(module, group=None, ...)`` takes contiguous equal slices in rank order, so a sharded
model starts from exactly the unsharded one's weights. A fresh layer slices a master weight drawn
whole from the default generator (Megatron's ``_initialize_affine_weight_cpu``; identical on
every rank when the ranks share a seed): shards initialised on their own would be another model.

With ``sequence_parallel=True`` (Korthikanti et al. 2022 §4.2.2) the column layer all-gathers its
(b, s/t, h) input along s instead of f, and the row layer reduce-scatters its output instead of
g; the row bias then sees a sequence shard, so it is marked ``p.sequence_parallel = True`` for
:func:`minipar.tensor_parallel.block.allreduce_sequence_parallel_grads`.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from .mappings import (
    copy_to_tp_region,
    divide,
    gather_from_sp_region,
    gather_from_tp_region,
    group_rank,
    group_size,
    reduce_from_tp_region,
    reduce_scatter_to_sp_region,
)


def shard(full: torch.Tensor, dim: int, rank: int, t: int, stride: int = 1) -> torch.Tensor:
    """Rank ``rank``'s slice of ``full`` along ``dim`` out of t contiguous equal slices.

    ``stride`` k > 1: the dimension holds k stacked blocks (Q, K and V of a fused QKV weight) and
    each block is split separately, so rank r gets [Q_r; K_r; V_r].
    """
    n = full.shape[dim]
    blk = divide(n, stride, "dimension") if stride > 1 else n
    per = divide(blk, t, f"dimension {dim}" if stride == 1 else "block size")
    parts = [full.narrow(dim, k * blk + rank * per, per) for k in range(stride)]
    return torch.cat(parts, dim=dim).clone()


class _LinearAsyncGradAllReduce(torch.autograd.Function):
    """``F.linear`` whose backward starts the input-gradient all-reduce asynchronously and
    computes the weight gradient while it runs (Megatron's async TP, picotron's
    ``LinearWithAsyncAllReduce``). Forward: identity on x (f), then x Aᵀ + b.
    ``timeline``: a list to which backward appends its event times (for the chapter's figure)."""

    @staticmethod
    def forward(ctx, x, weight, bias, group, timeline):
        ctx.save_for_backward(x, weight)
        ctx.group, ctx.has_bias, ctx.timeline = group, bias is not None, timeline
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):  # grad (b, s, out/t)
        x, weight = ctx.saved_tensors
        clock = [time.perf_counter()]
        grad_x = grad.matmul(weight)  # (b, s, in), a partial sum
        work = None
        clock.append(time.perf_counter())
        if group_size(ctx.group) > 1:
            work = dist.all_reduce(grad_x, group=ctx.group, async_op=True)
        clock.append(time.perf_counter())
        g2 = grad.reshape(-1, grad.shape[-1])  # (b·s, out/t)
        grad_w = g2.t().matmul(x.reshape(-1, x.shape[-1]))  # (out/t, in): overlaps the all-reduce
        grad_b = g2.sum(0) if ctx.has_bias else None
        clock.append(time.perf_counter())
        done_early = work is None or work.is_completed()
        if work is not None:
            work.wait()
        clock.append(time.perf_counter())
        if ctx.timeline is not None:
            ctx.timeline.append(
                {
                    "grad_input_gemm": (clock[0], clock[1]),
                    "all_reduce": (clock[2], clock[4]),
                    "weight_grad_gemm": (clock[2], clock[3]),
                    "done_before_gemm_ended": done_early,
                }
            )
        return grad_x, grad_w, grad_b, None, None


class ColumnParallelLinear(nn.Module):
    """Y = XAᵀ + b with A split along its output features: rank r computes Y_r = X A_rᵀ + b_r,
    (b, s, out/t) (or all of it with ``gather_output=True``) from X through f (an all-gather of
    the (b, s/t, in) input under sequence parallelism). Backward all-reduces (reduce-scatters)
    the input gradient, ``async_grad_allreduce=True`` overlapping it with the weight-gradient
    GEMM; weight and bias gradients are already slices of the full ones."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        group=None,
        *,
        gather_output: bool = False,
        sequence_parallel: bool = False,
        async_grad_allreduce: bool = False,
        stride: int = 1,
    ):
        super().__init__()
        self.group, self.t, self.rank = group, group_size(group), group_rank(group)
        self.in_features, self.out_features = in_features, out_features
        if out_features % stride:
            raise ValueError(
                f"output features ({out_features}) must be divisible by stride ({stride})"
            )
        per_block = "output features" if stride == 1 else "output features per block"
        divide(out_features // stride, self.t, per_block)
        self.gather_output, self.sequence_parallel = gather_output, sequence_parallel
        self.async_grad_allreduce = async_grad_allreduce and not sequence_parallel
        self.timeline = None  # a list: backward appends its event times (async path only)
        master = nn.Linear(in_features, out_features, bias=bias)  # same on every rank
        mine = lambda w: nn.Parameter(shard(w.detach(), 0, self.rank, self.t, stride))
        self.weight, self.bias = mine(master.weight), mine(master.bias) if bias else None

    @classmethod
    def from_full(cls, linear: nn.Linear, group=None, *, stride: int = 1, **kw):
        """This rank's column shard of ``linear`` (rows of its (out, in) weight)."""
        m = cls(
            linear.in_features,
            linear.out_features,
            linear.bias is not None,
            group,
            stride=stride,
            **kw,
        )
        with torch.no_grad():
            m.weight.data = shard(linear.weight.detach(), 0, m.rank, m.t, stride).to(linear.weight)
            if linear.bias is not None:
                m.bias.data = shard(linear.bias.detach(), 0, m.rank, m.t, stride).to(linear.bias)
        return m

    def forward(self, x):  # x (b, s, in) or (b, s/t, in) with SP
        if self.sequence_parallel:
            y = F.linear(gather_from_sp_region(x, self.group), self.weight, self.bias)
        elif self.async_grad_allreduce:
            y = _LinearAsyncGradAllReduce.apply(
                x, self.weight, self.bias, self.group, self.timeline
            )
        else:
            y = F.linear(copy_to_tp_region(x, self.group), self.weight, self.bias)
        # y (b, s, out/t)
        return gather_from_tp_region(y, self.group) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """Y = XAᵀ + b with A split along its input features: rank r reads X_r (b, s, in/t); the
    partial sum X_r A_rᵀ goes through g (a reduce-scatter along s to (b, s/t, out) under
    sequence parallelism), then the bias is added once. Weight gradients are local slices."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        group=None,
        *,
        sequence_parallel: bool = False,
    ):
        super().__init__()
        self.group, self.t, self.rank = group, group_size(group), group_rank(group)
        self.in_features, self.out_features = in_features, out_features
        divide(in_features, self.t, "input features")
        self.sequence_parallel = sequence_parallel
        master = nn.Linear(in_features, out_features, bias=bias)  # same on every rank
        self.weight = nn.Parameter(shard(master.weight.detach(), 1, self.rank, self.t))
        self.bias = nn.Parameter(master.bias.detach().clone()) if bias else None
        if self.bias is not None and sequence_parallel:
            self.bias.sequence_parallel = True

    @classmethod
    def from_full(cls, linear: nn.Linear, group=None, **kw):
        """This rank's row shard of ``linear`` (columns of its (out, in) weight); bias replicated."""
        m = cls(linear.in_features, linear.out_features, linear.bias is not None, group, **kw)
        with torch.no_grad():
            m.weight.data = shard(linear.weight.detach(), 1, m.rank, m.t).to(linear.weight)
            if linear.bias is not None:
                m.bias.data = linear.bias.detach().clone()
        return m

    def forward(self, x):  # x (b, s, in/t)
        partial = F.linear(x, self.weight)  # (b, s, out), a partial sum
        if self.sequence_parallel:
            y = reduce_scatter_to_sp_region(partial, self.group)  # (b, s/t, out)
        else:
            y = reduce_from_tp_region(partial, self.group)  # (b, s, out)
        return y + self.bias if self.bias is not None else y


class VocabParallelEmbedding(nn.Module):
    """A (v, h) embedding split along the vocabulary: rank r keeps rows [r·v/t, (r+1)·v/t);
    tokens outside them look up zeros, then g sums over ranks (a reduce-scatter to (b, s/t, h)
    under sequence parallelism). Each rank's weight gradient touches only its own rows."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        group=None,
        *,
        sequence_parallel: bool = False,
    ):
        super().__init__()
        self.group, self.t, self.rank = group, group_size(group), group_rank(group)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.per = divide(num_embeddings, self.t, "vocabulary v")
        self.start, self.end = self.rank * self.per, (self.rank + 1) * self.per
        self.sequence_parallel = sequence_parallel
        master = nn.Embedding(num_embeddings, embedding_dim)  # same on every rank
        self.weight = nn.Parameter(shard(master.weight.detach(), 0, self.rank, self.t))

    @classmethod
    def from_full(cls, embedding: nn.Embedding, group=None, **kw):
        m = cls(embedding.num_embeddings, embedding.embedding_dim, group, **kw)
        with torch.no_grad():
            m.weight.data = shard(embedding.weight.detach(), 0, m.rank, m.t).to(embedding.weight)
        return m

    def forward(self, tokens):  # tokens (b, s) int64
        outside = (tokens < self.start) | (tokens >= self.end)
        local = (tokens - self.start).masked_fill(outside, 0)
        e = F.embedding(local, self.weight)  # (b, s, h)
        e = e.masked_fill(outside.unsqueeze(-1), 0.0)  # rows this rank does not own
        if self.sequence_parallel:
            return reduce_scatter_to_sp_region(e, self.group)  # (b, s/t, h)
        return reduce_from_tp_region(e, self.group)  # (b, s, h)
