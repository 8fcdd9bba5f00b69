"""A tensor-parallel transformer layer: attention heads split across ranks, MLP column → row.

:class:`minipar.model.Layer` (Korthikanti et al. 2022, Figure 2) sharded the Megatron way
(Shoeybi et al. 2019 §3, Figures 3 and 4):

    LN1 → f → QKV (column, a/t heads) → attention on those heads → proj (row) → g → dropout → +
    LN2 → f → fc1 (column, 4h/t) → GeLU → fc2 (row) → g → dropout → +

Two all-reduces forward (the g's) and two backward (the f's). With sequence parallelism
(Korthikanti et al. 2022 §4.2.2) the input is (b, s/t, h), each f an all-gather along s and each
g a reduce-scatter; the layer norms and row biases then see s/t tokens on each rank, so their
gradients must be summed over the TP group after backward
(:func:`allreduce_sequence_parallel_grads`, Megatron's ``finalize_model_grads``): forgetting it
is the classic "sequence parallelism gives wrong results" bug.
"""

from __future__ import annotations

import contextlib

import torch.nn as nn
import torch.nn.functional as F

from minipar.dist import allreduce_flat
from minipar.model import GPTConfig, Layer, attention_core

from .layers import ColumnParallelLinear, RowParallelLinear
from .mappings import divide, group_size


def _mark_sp(module: nn.Module) -> None:
    for p in module.parameters():
        p.sequence_parallel = True


class ParallelAttention(nn.Module):
    """Self-attention with a/t heads per rank: QKV column-parallel (Q, K, V each split by heads),
    output projection row-parallel."""

    def __init__(
        self, qkv: ColumnParallelLinear, proj: RowParallelLinear, c: GPTConfig, tracker=None
    ):
        super().__init__()
        self.qkv, self.proj, self.c, self.tracker = qkv, proj, c, tracker
        self.local_heads = divide(c.a, qkv.t, "heads")

    def forward(self, x):  # x (b, s, h) or (b, s/t, h) with SP
        qkv = self.qkv(x)  # (b, s, 3h/t)
        b, s, _ = qkv.shape
        hd = self.c.h // self.c.a
        q, k, v = qkv.view(b, s, 3, self.local_heads, hd).permute(2, 0, 3, 1, 4)  # (b, a/t, s, h/a)
        ctx = self.core(q, k, v)  # (b, a/t, s, h/a)
        ctx = ctx.transpose(1, 2).reshape(b, s, self.local_heads * hd)  # (b, s, h/t)
        return self.proj(ctx)  # (b, s, h) or (b, s/t, h)

    def core(self, q, k, v):
        """Attention on this rank's heads, dropout on the tensor-parallel RNG stream."""
        fork = self.tracker.fork() if self.tracker is not None else contextlib.nullcontext()
        with fork:  # different heads: different masks
            return attention_core(q, k, v, self.c.dropout, self.training)


class ParallelBlock(nn.Module):
    """One transformer layer of :class:`minipar.model.Layer`, tensor parallel over ``group``."""

    def __init__(
        self,
        c: GPTConfig,
        group=None,
        *,
        sequence_parallel: bool = False,
        tracker=None,
        async_grad_allreduce: bool = False,
    ):
        super().__init__()
        t = group_size(group)
        divide(c.a, t, "heads")
        if c.h % c.a:
            raise ValueError(f"hidden size ({c.h}) must be divisible by heads ({c.a})")
        self.c, self.group, self.sequence_parallel = c, group, sequence_parallel
        self.tracker = tracker
        kw = dict(sequence_parallel=sequence_parallel)
        col = dict(kw, async_grad_allreduce=async_grad_allreduce)
        self.ln1, self.ln2 = nn.LayerNorm(c.h), nn.LayerNorm(c.h)
        self.attn = ParallelAttention(
            ColumnParallelLinear(c.h, 3 * c.h, group=group, stride=3, **col),
            RowParallelLinear(c.h, c.h, group=group, **kw),
            c,
            tracker,
        )
        self.fc1 = ColumnParallelLinear(c.h, 4 * c.h, group=group, **col)
        self.fc2 = RowParallelLinear(4 * c.h, c.h, group=group, **kw)
        if sequence_parallel:
            _mark_sp(self.ln1), _mark_sp(self.ln2)

    @classmethod
    def from_full(cls, layer: Layer, group=None, **kw) -> "ParallelBlock":
        """This rank's shard of ``layer``: QKV and fc1 by output rows (QKV per head), proj and
        fc2 by input columns, layer norms and row biases replicated."""
        m = cls(layer.c, group, **kw).to(next(layer.parameters()).dtype)
        sp = m.sequence_parallel
        m.ln1.load_state_dict(layer.ln1.state_dict())
        m.ln2.load_state_dict(layer.ln2.state_dict())
        col = dict(sequence_parallel=sp, async_grad_allreduce=m.fc1.async_grad_allreduce)
        m.attn.qkv = ColumnParallelLinear.from_full(layer.qkv, group, stride=3, **col)
        m.attn.proj = RowParallelLinear.from_full(layer.proj, group, sequence_parallel=sp)
        m.fc1 = ColumnParallelLinear.from_full(layer.fc1, group, **col)
        m.fc2 = RowParallelLinear.from_full(layer.fc2, group, sequence_parallel=sp)
        return m

    def _dropout(self, x):
        if not self.training or self.c.dropout == 0:
            return x
        # a replicated activation uses the shared default stream; a sequence shard is different
        # tokens on each rank and uses the per-rank stream (Megatron forks here under SP)
        fork = (
            self.tracker.fork()
            if self.sequence_parallel and self.tracker is not None
            else contextlib.nullcontext()
        )
        with fork:
            return F.dropout(x, self.c.dropout, True)

    def forward(self, x):  # x (b, s, h), or (b, s/t, h) with SP
        x = x + self._dropout(self.attn(self.ln1(x)))
        y = self.fc2(F.gelu(self.fc1(self.ln2(x))))  # (b, s, 4h/t) inside
        return x + self._dropout(y)  # same shape as the input


def allreduce_sequence_parallel_grads(module: nn.Module, group=None) -> int:
    """Sum over ``group`` the gradients of parameters marked ``sequence_parallel`` (layer norms,
    row biases, position embeddings under sequence parallelism), flattened into one all-reduce.
    Returns the number of elements reduced; a no-op for one rank."""
    grads = [
        p.grad
        for p in module.parameters()
        if getattr(p, "sequence_parallel", False) and p.grad is not None
    ]
    return allreduce_flat(grads, group)
