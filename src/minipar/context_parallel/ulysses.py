"""DeepSpeed-Ulysses (Jacobs et al. 2023, "DeepSpeed Ulysses: System Optimizations for
Enabling Training of Extreme Long Sequence Transformer Models"): trade the sequence shard for a
head shard around attention.

Each rank holds q, k, v for all a heads on its contiguous s/cp tokens. One all-to-all per
tensor regroups them to a/cp heads on all s tokens; attention then runs locally (any attention
kernel, causal mask by position as usual); one all-to-all takes the output back to s/cp tokens
of all heads. Four all-to-alls per layer forward (q, k, v, output) and four backward (the
all-to-all's adjoint is the inverse all-to-all). It needs a divisible by cp, which caps cp at the
number of heads (KV heads with grouped-query attention).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.dist import group_size

from .online_softmax import full_attention


def _seq_to_heads(x: torch.Tensor, group) -> torch.Tensor:
    """(b, a, s/cp, d) on each rank → (b, a/cp, s, d): heads split, sequence gathered."""
    cp = group_size(group)
    b, a, n, d = x.shape
    send = x.reshape(b, cp, a // cp, n, d).transpose(0, 1).contiguous()  # (cp, b, a/cp, s/cp, d)
    recv = torch.empty_like(send)                  # (cp, b, a/cp, s/cp, d): dim 0 = source rank
    dist.all_to_all_single(recv, send, group=group)
    return recv.permute(1, 2, 0, 3, 4).reshape(b, a // cp, cp * n, d)    # (b, a/cp, s, d)


def _heads_to_seq(x: torch.Tensor, group) -> torch.Tensor:
    """(b, a/cp, s, d) on each rank → (b, a, s/cp, d): the inverse of :func:`_seq_to_heads`."""
    cp = group_size(group)
    b, ah, s, d = x.shape
    send = x.reshape(b, ah, cp, s // cp, d).permute(2, 0, 1, 3, 4).contiguous()  # (cp, b, a/cp, s/cp, d)
    recv = torch.empty_like(send)                  # dim 0 = source rank = head group
    dist.all_to_all_single(recv, send, group=group)
    return recv.transpose(0, 1).reshape(b, cp * ah, s // cp, d)          # (b, a, s/cp, d)


class _SeqToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _seq_to_heads(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _heads_to_seq(grad.contiguous(), ctx.group), None


class _HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _heads_to_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _seq_to_heads(grad.contiguous(), ctx.group), None


def seq_to_heads(x, group=None):
    """All-to-all (b, a, s/cp, d) → (b, a/cp, s, d); backward the inverse all-to-all."""
    return x if group_size(group) == 1 else _SeqToHeads.apply(x, group)


def heads_to_seq(x, group=None):
    """All-to-all (b, a/cp, s, d) → (b, a, s/cp, d); backward the inverse all-to-all."""
    return x if group_size(group) == 1 else _HeadsToSeq.apply(x, group)


def ulysses_attention(q, k, v, causal: bool = False, group=None, attention=full_attention):
    """This rank's output shard (b, a, s/cp, d) of softmax(q kᵀ/√d) v; q, k, v contiguous
    sequence shards (b, a, s/cp, d). ``attention(q, k, v, causal)`` is the local kernel."""
    cp, a = group_size(group), q.shape[1]
    if a % cp:
        raise ValueError(f"heads ({a}) must be divisible by cp ({cp})")
    q, k, v = (seq_to_heads(t, group) for t in (q, k, v))      # (b, a/cp, s, d) each
    return heads_to_seq(attention(q, k, v, causal), group)     # (b, a, s/cp, d)
