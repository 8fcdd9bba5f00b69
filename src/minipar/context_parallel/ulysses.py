"""DeepSpeed-Ulysses (Jacobs et al. 2023, "DeepSpeed Ulysses: System Optimizations for
Enabling Training of Extreme Long Sequence Transformer Models"): trade the sequence shard for a
head shard around attention.

Each rank holds q (a heads) and k, v (a_kv heads) on its contiguous s/cp tokens. One all-to-all
of q, k and v packed together regroups them to a/cp query heads (and their K/V heads) on all s
tokens; attention runs locally; one all-to-all takes the output back to s/cp tokens of all
heads: two all-to-alls forward and two backward (each one's adjoint is the inverse). It needs a
divisible by cp. When a_kv < cp (and cp divisible by a_kv) every K/V head is first repeated
cp/a_kv times, so each rank receives the K/V head its query heads read (the backward sums the
copies' gradients): the K/V all-to-all then carries cp heads instead of a_kv.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.dist import group_rank, group_size

from .online_softmax import expand_kv, full_attention


def _seq_to_heads(x: torch.Tensor, group) -> torch.Tensor:
    """(b, a, s/cp, d) on each rank → (b, a/cp, s, d): heads split, sequence gathered."""
    cp = group_size(group)
    b, a, n, d = x.shape
    send = x.reshape(b, cp, a // cp, n, d).transpose(0, 1).contiguous()  # (cp, b, a/cp, s/cp, d)
    recv = torch.empty_like(send)  # (cp, b, a/cp, s/cp, d): dim 0 = source rank
    dist.all_to_all_single(recv, send, group=group)
    return recv.permute(1, 2, 0, 3, 4).reshape(b, a // cp, cp * n, d)  # (b, a/cp, s, d)


def _heads_to_seq(x: torch.Tensor, group) -> torch.Tensor:
    """(b, a/cp, s, d) on each rank → (b, a, s/cp, d): the inverse of :func:`_seq_to_heads`."""
    cp = group_size(group)
    b, ah, s, d = x.shape
    # (cp, b, a/cp, s/cp, d)
    send = x.reshape(b, ah, cp, s // cp, d).permute(2, 0, 1, 3, 4).contiguous()
    recv = torch.empty_like(send)  # dim 0 = source rank = head group
    dist.all_to_all_single(recv, send, group=group)
    return recv.transpose(0, 1).reshape(b, cp * ah, s // cp, d)  # (b, a, s/cp, d)


class _AllToAll(torch.autograd.Function):
    """``there(x, group)`` forward, its inverse ``back`` on the gradient."""

    @staticmethod
    def forward(ctx, x, group, there, back):
        ctx.group, ctx.back = group, back
        return there(x, group)

    @staticmethod
    def backward(ctx, grad):
        return ctx.back(grad.contiguous(), ctx.group), None, None, None


def seq_to_heads(x, group=None):
    """All-to-all (b, a, s/cp, d) → (b, a/cp, s, d); backward the inverse all-to-all."""
    return x if group_size(group) == 1 else _AllToAll.apply(x, group, _seq_to_heads, _heads_to_seq)


def heads_to_seq(x, group=None):
    """All-to-all (b, a/cp, s, d) → (b, a, s/cp, d); backward the inverse all-to-all."""
    return x if group_size(group) == 1 else _AllToAll.apply(x, group, _heads_to_seq, _seq_to_heads)


def kv_heads_sent(a: int, a_kv: int, cp: int) -> int:
    """K/V heads per tensor in the all-to-all: a_kv, or cp when K/V heads are replicated."""
    if a % cp:
        raise ValueError(f"heads ({a}) must be divisible by cp ({cp})")
    if a % a_kv:
        raise ValueError(f"query heads ({a}) must be divisible by K/V heads ({a_kv})")
    if a_kv % cp and cp % a_kv:
        raise ValueError(f"K/V heads ({a_kv}) must be divisible by cp ({cp}), or cp by them")
    return max(a_kv, cp)


def heads_after_all_to_all(a: int, a_kv: int, cp: int, rank: int) -> dict[str, range]:
    """Which heads rank ``rank`` holds for all s tokens after :func:`seq_to_heads`: query heads
    ``q`` (a/cp consecutive ones) and the K/V heads ``kv`` they read, numbered in the a_kv
    original K/V heads (a_kv/cp of them, or the one head repeated cp/a_kv times when a_kv < cp).
    Before the all-to-all it held all a query and a_kv K/V heads of its s/cp tokens."""
    m = kv_heads_sent(a, a_kv, cp)
    if not 0 <= rank < cp:
        raise ValueError(f"rank ({rank}) must be in [0, cp={cp})")
    kv = range(rank * (m // cp), (rank + 1) * (m // cp))  # of the m heads sent
    per = m // a_kv  # copies of each K/V head: 1, or cp/a_kv when replicated
    return {
        "q": range(rank * (a // cp), (rank + 1) * (a // cp)),
        "kv": range(kv.start // per, (kv.stop - 1) // per + 1),
    }


def ulysses_attention(q, k, v, causal: bool = False, group=None, attention=full_attention):
    """This rank's output shard (b, a, s/cp, d) of softmax(q kᵀ/√d) v; q (b, a, s/cp, d), k and
    v (b, a_kv, s/cp, d) contiguous sequence shards. ``attention(q, k, v, causal)`` is the local
    kernel (it gets a/cp query heads and their K/V heads)."""
    cp, (b, a, n, d), a_kv = group_size(group), q.shape, k.shape[1]
    m = kv_heads_sent(a, a_kv, cp)
    if cp == 1:
        return attention(q, k, v, causal)
    if m > a_kv:  # replicate: one K/V head per rank
        k, v = expand_kv(k, m), expand_kv(v, m)  # (b, cp, s/cp, d)
    parts = [t.reshape(b, cp, t.shape[1] // cp, n, d) for t in (q, k, v)]  # (b, cp, ·/cp, s/cp, d)
    qkv = torch.cat(parts, dim=2).reshape(b, a + 2 * m, n, d)  # per destination: its q, k, v heads
    qkv = seq_to_heads(qkv, group)  # (b, (a + 2m)/cp, s, d)
    mine = heads_after_all_to_all(a, a_kv, cp, group_rank(group))
    nq, nkv = len(mine["q"]), m // cp  # a/cp query heads; their K/V heads (copies included)
    ql, kl, vl = qkv.split([nq, nkv, nkv], dim=1)
    return heads_to_seq(attention(ql, kl, vl, causal), group)  # (b, a, s/cp, d)
