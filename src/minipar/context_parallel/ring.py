"""Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers for
Near-Infinite Context"): exact softmax attention with the sequence sharded over cp ranks.

Each rank keeps its queries and, for cp steps, holds one rank's K/V block: at step i rank r
holds the block of rank r−i. While it computes attention of its queries over that block, the
block travels on to rank r+1 and the block of rank r−i−1 arrives (:class:`RingShift`), so the
transfer hides behind the compute when block compute ≥ block transfer. The per-block results are
merged with the log-sum-exp rule (:func:`merge_blocks`), never materialising more than one
(s/cp × s/cp) score block.

Causal masking is by *global* position. A rank's shard is 1 (contiguous) or 2 (zigzag) chunks
of global chunk indices :func:`chunk_ids`; a (query chunk, key chunk) pair is computed in full
when the key chunk comes earlier, with the triangular mask when it is the same chunk, and
skipped when it comes later (:func:`plan`). Skipped pairs are why contiguous shards are
unbalanced (rank cp−1 computes cp pairs, rank 0 one) and zigzag shards are not.

Backward (its own, no all-gather of the sequence): K/V travel the ring again; beside each block
travels its dK/dV accumulator, to which every rank adds its share, and which arrives back home
after cp hops. Traffic per rank per call: forward cp−1 K/V blocks; backward cp−1 K/V blocks and
cp dK/dV blocks (:mod:`minipar.cost.context_parallel`).
"""
from __future__ import annotations

import time

import torch

from minipar.dist import group_rank, group_size

from .online_softmax import block_attention, block_attention_backward, merge_blocks
from .ring_communication import RingShift
from .sharding import chunk_ids, chunks_per_rank


def plan(q_ids: list[int], k_ids: list[int], causal: bool):
    """(query chunk, key chunk, mask) pairs to compute, by global chunk index."""
    for i, qc in enumerate(q_ids):
        for j, kc in enumerate(k_ids):
            if not causal or kc < qc:
                yield i, j, "full"
            elif kc == qc:
                yield i, j, "causal"


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, group, layout, timeline):
        cp, r = group_size(group), group_rank(group)
        n = chunks_per_rank(layout)
        my_ids = chunk_ids(r, cp, layout)
        qs = q.chunk(n, dim=2)                                  # n × (b, a, s/(n·cp), d)
        outs, lses = [None] * n, [None] * n
        kv = torch.stack([k, v])                                # (2, b, a, s/cp, d): one message
        t0 = time.perf_counter()
        for step in range(cp):
            src = (r - step) % cp
            shift = RingShift(kv, group) if step < cp - 1 else None
            c0 = time.perf_counter()
            ks, vs = kv[0].chunk(n, dim=2), kv[1].chunk(n, dim=2)
            for i, j, mask in plan(my_ids, chunk_ids(src, cp, layout), causal):
                o, lse = block_attention(qs[i], ks[j], vs[j], mask)
                if outs[i] is None:
                    outs[i], lses[i] = o, lse
                else:
                    outs[i], lses[i] = merge_blocks(outs[i], lses[i], o, lse)
            c1 = time.perf_counter()
            if shift is not None:
                kv = shift.wait()
            if timeline is not None:
                timeline.append(dict(step=step, src=src, compute=(c0 - t0, c1 - t0),
                                     comm=(c0 - t0, time.perf_counter() - t0) if shift else None))
        out, lse = torch.cat(outs, dim=2), torch.cat(lses, dim=2)   # (b, a, s/cp, d), (b, a, s/cp)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.group, ctx.layout = causal, group, layout
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        group, layout = ctx.group, ctx.layout
        cp, r = group_size(group), group_rank(group)
        n = chunks_per_rank(layout)
        my_ids = chunk_ids(r, cp, layout)
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)                            # (b, a, s/cp)
        qs, dos = q.chunk(n, dim=2), dout.chunk(n, dim=2)
        lses, deltas = lse.chunk(n, dim=2), delta.chunk(n, dim=2)
        dq = torch.zeros_like(q)
        dqs = dq.chunk(n, dim=2)                                # views: writes land in dq
        kv = torch.stack([k, v])                                # (2, b, a, s/cp, d)
        incoming = None                                         # dK/dV accumulator in flight
        for step in range(cp):
            src = (r - step) % cp
            shift = RingShift(kv, group) if step < cp - 1 else None
            dkv = torch.zeros_like(kv)                          # this rank's share for block src
            ks, vs = kv[0].chunk(n, dim=2), kv[1].chunk(n, dim=2)
            dks, dvs = dkv[0].chunk(n, dim=2), dkv[1].chunk(n, dim=2)
            for i, j, mask in plan(my_ids, chunk_ids(src, cp, layout), ctx.causal):
                gq, gk, gv = block_attention_backward(qs[i], ks[j], vs[j], dos[i], lses[i],
                                                      deltas[i], mask)
                dqs[i].add_(gq), dks[j].add_(gk), dvs[j].add_(gv)
            if incoming is not None:                            # ranks src … r−1 added theirs
                dkv += incoming.wait()
            incoming = RingShift(dkv, group)                    # on to r+1; the last hop is home
            if shift is not None:
                kv = shift.wait()
        dkv = incoming.wait()                                   # our own block, all cp shares
        return dq, dkv[0], dkv[1], None, None, None, None


def ring_attention(q, k, v, causal: bool = False, group=None, layout: str = "contiguous",
                   timeline: list | None = None):
    """This rank's output shard of softmax(q kᵀ/√d) v over the whole sequence.

    q, k, v: this rank's shards (b, a, s/cp, d) in ``layout`` (:func:`shard_sequence`); the
    output has the same shape and layout. ``causal`` masks by global position. ``timeline``: a
    list to which the forward appends one dict per ring step (compute and transfer intervals,
    seconds since the call began). For one rank it is plain attention, no communication.
    """
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k, v must have one shape (b, a, s/cp, d), got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    n = chunks_per_rank(layout)
    if q.shape[2] % n:
        raise ValueError(f"local sequence length ({q.shape[2]}) must be divisible by {n} "
                         f"for layout {layout!r}")
    return _RingAttention.apply(q, k, v, causal, group, layout, timeline)
