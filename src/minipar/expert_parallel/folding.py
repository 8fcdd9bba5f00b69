"""MoE parallel folding: the experts' layout chosen independently of the attention's.

Megatron-Core (Liu et al. 2025, "MoE Parallel Folding", §3) lays out the dense part of a layer
over TP × CP × DP × PP and, separately, the MoE part over the SAME ranks of a pipeline stage as
ETP × EP × EDP (torchtitan: a separate expert mesh). EP may then reuse the ranks attention
spends on tensor or context parallelism (EP = 4 on a stage of TP 2 × DP 2) and need not divide
DP: with sequence parallelism every rank of a stage holds DIFFERENT tokens at the MoE input, so
any grouping of the stage's ranks can be an EP group. The grid is :class:`minipar.grid.Grid`
(tp innermost; experts ep × edp, ep innermost, expert TP = 1); :class:`FoldedBlock` is the
smallest block that shows it:

    u = x + gelu(x W1) W2        dense MLP, tensor- and sequence-parallel over the tp group
                                 (all-gather the sequence, column- then row-parallel,
                                  reduce-scatter the sequence: Korthikanti et al. 2022, §4.2.2)
    y = u + MoE(u)               experts over the ep group, dropless all-to-all

Gradients (each rank's loss is the mean over its own tokens, the global loss the mean over the
N ranks): a dense shard sums over the ranks holding the same shard (dp × cp, the ``dp_cp``
group) and divides by N; the replicated router sums over all N; an expert sums over its ``edp``
group (its owner already holds every token of its EP group) and divides by N.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from minipar.dist import group_rank, group_size

from .communication import all_gather_rows, reduce_scatter_rows
from .layer import ExpertParallelMoE
from .moe import MoE


class DenseMLP(nn.Module):
    """The one-process dense part: u = x + gelu(x W1) W2, W1 (h, f_d), W2 (f_d, h)."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(hidden, ffn) / hidden**0.5)
        self.w2 = nn.Parameter(torch.randn(ffn, hidden) / ffn**0.5)

    def forward(self, x):
        return x + F.gelu(x @ self.w1) @ self.w2


class SequenceParallelMLP(nn.Module):
    """DenseMLP over the tp group with sequence parallelism: x (n, h) is this rank's slice of
    the sequence; all-gather -> (t·n, h), column shard W1[:, k] (h, f_d/t), row shard W2[k]
    (f_d/t, h), partial (t·n, h) reduce-scattered back to (n, h)."""

    def __init__(self, dense: DenseMLP, tp_group=None):
        super().__init__()
        t, k = group_size(tp_group), group_rank(tp_group)
        f = dense.w1.shape[1]
        if f % t:
            raise ValueError(f"dense width ({f}) must be divisible by tp ({t})")
        cols = slice(k * f // t, (k + 1) * f // t)
        self.w1 = nn.Parameter(dense.w1.detach()[:, cols].clone())  # (h, f_d/t)
        self.w2 = nn.Parameter(dense.w2.detach()[cols].clone())  # (f_d/t, h)
        self.tp_group = tp_group

    def forward(self, x):
        full = all_gather_rows(x, self.tp_group)  # (t·n, h) sequence
        part = F.gelu(full @ self.w1) @ self.w2  # (t·n, h) partial sum
        return x + reduce_scatter_rows(part, self.tp_group)  # (n, h)


class FoldedBlock(nn.Module):
    """Dense part over tp (sequence-parallel), MoE part over ep: y = u + MoE(u)."""

    def __init__(self, dense: DenseMLP, moe: MoE, groups: dict, **layer_kw):
        super().__init__()
        self.groups = groups
        self.dense = SequenceParallelMLP(dense, groups["tp"])
        self.moe = ExpertParallelMoE.from_full(moe, group=groups["ep"], **layer_kw)

    def forward(self, x):
        u = self.dense(x)
        return u + self.moe(u)

    def reduce_gradients(self, expert_group=None) -> None:
        """Dense shards over dp_cp, router over all ranks, experts over edp (or over
        ``expert_group``: the negative control passes the attention's dp group); all / N."""
        n = dist.get_world_size()
        todo = [(p, self.groups["dp_cp"]) for p in self.dense.parameters()]
        todo += [(p, None) for p in self.moe.router.parameters()]
        eg = self.groups["edp"] if expert_group is None else expert_group
        todo += [(p, eg) for p in (self.moe.w1, self.moe.w2)]
        for p, g in todo:
            if group_size(g) > 1:
                dist.all_reduce(p.grad, group=g)
            p.grad /= n
