"""Cross-entropy over vocabulary-parallel logits, without gathering the (b, s, v) logits.

Megatron-LM's ``vocab_parallel_cross_entropy`` (Shoeybi et al. 2019 §3 fuse the output GEMM with
the loss so that b·s scalars cross the link instead of b·s·v logits). Rank r holds the logits
of vocabulary ids [r·v/t, (r+1)·v/t):

1. m = the global max (local max, all-reduce MAX); without it exp() overflows as soon as a logit
   exceeds ~709 (float64) or ~88 (float32);
2. the target's logit: ranks that do not own the target contribute 0, all-reduce SUM;
3. Σ exp(z − m): local sum, all-reduce SUM;
4. loss = log Σ exp(z − m) − (z_target − m), averaged over tokens.

Backward is local: (softmax(z) − onehot(target)) / N on this rank's slice.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .mappings import group_rank, group_size


def _all_reduce(x, op, group):
    if group_size(group) > 1:
        dist.all_reduce(x, op=op, group=group)
    return x


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, group):  # logits (..., v/t), target (...)
        per = logits.shape[-1]
        start = group_rank(group) * per
        m = logits.max(dim=-1).values  # (...) local max
        _all_reduce(m, dist.ReduceOp.MAX, group)  # (...) global max
        z = logits - m.unsqueeze(-1)  # (..., v/t)
        outside = (target < start) | (target >= start + per)
        local = (target - start).masked_fill(outside, 0)
        picked = z.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        _all_reduce(picked, dist.ReduceOp.SUM, group)  # (...) target logit − m
        e = z.exp()  # (..., v/t)
        sum_e = e.sum(-1)
        _all_reduce(sum_e, dist.ReduceOp.SUM, group)  # (...)
        loss = sum_e.log() - picked  # (...) per token
        softmax = e / sum_e.unsqueeze(-1)  # (..., v/t)
        ctx.save_for_backward(softmax, local, outside)
        return loss.mean()

    @staticmethod
    def backward(ctx, grad):
        softmax, local, outside = ctx.saved_tensors
        g = softmax.clone()  # (..., v/t)
        onehot = torch.zeros_like(g).scatter_(-1, local.unsqueeze(-1), 1.0)
        onehot.masked_fill_(outside.unsqueeze(-1), 0.0)
        g.sub_(onehot).mul_(grad / local.numel())
        return g, None, None


def vocab_parallel_cross_entropy(
    local_logits: torch.Tensor, target: torch.Tensor, group=None
) -> torch.Tensor:
    """Mean cross-entropy of ``target`` (…) under logits split along the vocabulary
    (``local_logits`` (…, v/t) on each rank, slices in rank order). Equals
    ``F.cross_entropy(full_logits.flatten(0, -2), target.flatten())`` on every rank."""
    return _VocabParallelCrossEntropy.apply(local_logits, target, group)
