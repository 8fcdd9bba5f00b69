"""All-gather context parallelism: the variant the Llama 3 report trained its long-context stage
with (Dubey et al. 2024, §3.3.2), and the default ``rotate_method`` of PyTorch's
``context_parallel`` ("allgather"; the ring is ``set_rotate_method("alltoall")``).

Forward: each rank all-gathers K and V of the whole sequence (one all-gather of its (2, b, a_kv,
s/cp, d) block), then computes its own queries' attention over every key in one kernel call,
masked by global position (causal) and, for a packed sequence, by document. Backward: it
all-gathers K and V again (saving them would keep O(s) per layer, undoing CP's 1/cp), computes
dQ for its queries and a dK/dV contribution for every key, and one reduce-scatter sums the
contributions and hands each rank the gradient of its own block (accumulated in ``accum_dtype``,
float32 or wider by default, as the ring's accumulators).

Traffic per rank per layer: forward (cp−1) K/V blocks, backward (cp−1) K/V blocks and (cp−1)
dK/dV blocks, about the ring's (cp dK/dV blocks); but the gather is exposed before the kernel,
and it synchronises once per layer where the ring does cp times, so per-step imbalance
(document masks) and latency cost it nothing (:mod:`minipar.cost.chapters.context_parallel`).
With grouped-query attention K/V are a/a_kv times smaller than Q: Llama 3 found the exposed
gather small next to attention's O(s²) compute, and any mask is one kernel call.
"""

from __future__ import annotations

import torch

from minipar.dist import all_gather_dim0, group_rank, group_size, reduce_scatter_dim0

from .online_softmax import block_attention, block_attention_backward, visible
from .ring import Mask, _dtype, check_qkv
from .sharding import chunks_per_rank, document_ids, positions


def _gather_kv(kv, group, layout):
    """(2, b, a_kv, s/cp, d) on each rank → (2, b, a_kv, s, d) in global order."""
    cp = group_size(group)
    if cp == 1:
        return kv
    parts = all_gather_dim0(kv, group).view((cp, *kv.shape))  # (cp, 2, b, a_kv, s/cp, d)
    s = kv.shape[3] * cp
    full = torch.cat(tuple(parts), dim=3)  # (2, b, a_kv, s, d) in rank order
    for j in range(cp):
        full.index_copy_(3, positions(s, cp, j, layout).to(kv.device), parts[j])
    return full


def _scatter_grads(dkv_full, group, layout):
    """(2, b, a_kv, s, d) contributions of this rank → the sum over ranks of this rank's block
    (2, b, a_kv, s/cp, d): one reduce-scatter."""
    cp = group_size(group)
    if cp == 1:
        return dkv_full
    s, dev = dkv_full.shape[3], dkv_full.device
    blocks = [dkv_full.index_select(3, positions(s, cp, j, layout).to(dev)) for j in range(cp)]
    send = torch.stack(blocks)  # (cp, 2, b, a_kv, s/cp, d)
    return reduce_scatter_dim0(send.flatten(0, 1), group)  # (2, b, a_kv, s/cp, d)


class _AllGatherAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, mask: Mask, accum_dtype):
        causal, layout, documents = mask
        cp, r = group_size(group), group_rank(group)
        s = q.shape[2] * cp
        comp = _dtype(None, q)
        doc_ids = None if documents is None else document_ids(documents, s).to(q.device)
        q_pos = positions(s, cp, r, layout).to(q.device)
        mask = visible(q_pos, torch.arange(s, device=q.device), causal, doc_ids)  # (s/cp, s)
        kv = _gather_kv(torch.stack([k, v]), group, layout).to(comp)  # (2, b, a_kv, s, d)
        o, lse = block_attention(q.to(comp), kv[0], kv[1], mask)
        out = o.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.group, ctx.layout, ctx.mask, ctx.accum_dtype = group, layout, mask, accum_dtype
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        comp, acc = _dtype(None, q), _dtype(ctx.accum_dtype, k)
        kv = _gather_kv(torch.stack([k, v]), ctx.group, ctx.layout).to(comp)  # gathered again
        dout = dout.contiguous().to(comp)
        delta = (dout * out.to(comp)).sum(-1)  # (b, a, s/cp)
        dq, dk, dv = block_attention_backward(q.to(comp), kv[0], kv[1], dout, lse, delta, ctx.mask)
        dkv = _scatter_grads(torch.stack([dk, dv]).to(acc), ctx.group, ctx.layout)
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None, None


def allgather_attention(
    q,
    k,
    v,
    causal: bool = False,
    group=None,
    layout: str = "contiguous",
    *,
    documents=None,
    accum_dtype=None,
):
    """This rank's output shard of softmax(q kᵀ/√d) v: K and V all-gathered, local queries.

    q (b, a, s/cp, d), k and v (b, a_kv, s/cp, d) in ``layout`` (any of
    :data:`~minipar.context_parallel.sharding.LAYOUTS`); ``documents``: lengths of the documents
    packed into the sequence (attention never crosses a document boundary)."""
    check_qkv(q, k, v)
    chunks_per_rank(layout)  # names a bad layout
    mask = Mask(causal, layout, documents)
    return _AllGatherAttention.apply(q, k, v, group, mask, accum_dtype)
