"""Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers for
Near-Infinite Context"): exact softmax attention with the sequence sharded over cp ranks.

Each rank keeps its queries and, for cp steps, holds one rank's K/V block (a_kv heads wide): at
step i rank r holds the block of rank r−i. While it computes attention over that block, the block
travels on to rank r+1 (:class:`RingShift`), so the transfer hides behind the compute when block
compute ≥ block transfer. Per-block results are merged with the log-sum-exp rule
(:func:`merge_blocks`), never materialising more than one (s/cp × s/cp) score block.

Causal masking is by *global* position. A contiguous or zigzag shard is 1 or 2 chunks of global
chunk indices (:func:`chunk_ids`); a (query chunk, key chunk) pair is computed in full when the
key chunk comes earlier, with the triangular mask when it is the same chunk, and skipped when it
comes later (:func:`plan`): why contiguous shards are unbalanced (rank cp−1 computes cp pairs,
rank 0 one) and zigzag shards are not. The striped layout and document masks (``documents``:
lengths of the documents packed into the sequence) take :func:`mask_plan`: each pair's mask from
the global positions (and documents) of its queries and keys; an empty mask is skipped.

Numerics: blocks are computed in float32 for 16-bit inputs (as tensor cores accumulate), the
running (o, lse) merged in ``merge_dtype`` (default float32 or wider), the output rounded to the
input dtype once; the dK/dV accumulators travelling the ring backward are ``accum_dtype``
(default float32 or wider, as ring-flash-attention; ``torch.bfloat16`` reproduces Transformer
Engine's ring, at one rounding per hop).

Backward: K/V travel the ring again, each beside its dK/dV accumulator, to which every rank adds
its share and which arrives home after cp hops. Traffic per rank per call: forward cp−1 K/V
blocks; backward cp−1 K/V blocks and cp dK/dV blocks (:mod:`minipar.cost.chapters.context_parallel`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import torch

from minipar.dist import group_rank, group_size

from .online_softmax import block_attention, block_attention_backward, merge_blocks, visible
from .ring_communication import RingShift
from .sharding import chunk_ids, chunks_per_rank, document_ids, positions


class Mask(NamedTuple):
    """Which keys a query sees: ``causal`` by global position, within one of the ``documents``
    (lengths summing to s; None: one document), the shards held in ``layout``."""

    causal: bool = False
    layout: str = "contiguous"
    documents: list | None = None


@dataclass(frozen=True)
class RingOptions:
    """How the ring computes and what it records: ``merge_dtype`` of the running (o, lse) and
    ``accum_dtype`` of the travelling dK/dV (None: float32 or wider); ``timeline``, a list to
    which the forward appends one dict per ring step (compute and transfer intervals, seconds
    since the call began)."""

    merge_dtype: torch.dtype | None = None
    accum_dtype: torch.dtype | None = None
    timeline: list | None = None


def plan(q_ids: list[int], k_ids: list[int], causal: bool):
    """(query chunk, key chunk, mask) pairs to compute, by global chunk index."""
    for i, qc in enumerate(q_ids):
        for j, kc in enumerate(k_ids):
            if not causal or kc < qc:
                yield i, j, "full"
            elif kc == qc:
                yield i, j, "causal"


def block_source(rank: int, step: int, cp: int) -> int:
    """The rank whose K/V block rank ``rank`` holds at ring step ``step`` = 0 … cp−1:
    (rank − step) mod cp (every step each block moves one rank to the right)."""
    return (rank - step) % cp


def ring_steps(cp: int, layout: str = "contiguous", causal: bool = True) -> list[list[dict]]:
    """The ring's forward without tensors: ``out[step][rank]`` = {"src": the rank whose K/V
    block it holds (:func:`block_source`), "pairs": [(query chunk, key chunk, mask), ...] it
    computes on that block, by global chunk index (:func:`plan` over :func:`chunk_ids`, the
    pairs the forward loop computes)}; an empty "pairs" is a skipped block. Contiguous and
    zigzag layouts (striped and document masks take :func:`mask_plan`)."""
    if not isinstance(cp, int) or cp < 1:
        raise ValueError(f"cp ({cp!r}) must be an integer >= 1")

    def holds(r, src):
        q_ids, k_ids = chunk_ids(r, cp, layout), chunk_ids(src, cp, layout)
        pairs = [(q_ids[i], k_ids[j], mask) for i, j, mask in plan(q_ids, k_ids, causal)]
        return {"src": src, "pairs": pairs}

    return [[holds(r, block_source(r, step, cp)) for r in range(cp)] for step in range(cp)]


def mask_plan(q_chunks, k_chunks, causal: bool, doc_ids=None):
    """(query chunk, key chunk, mask) pairs from global positions: q_chunks and k_chunks are
    lists of position tensors; mask "full", or a boolean (n, n_k); empty pairs skipped."""
    for i, qp in enumerate(q_chunks):
        for j, kp in enumerate(k_chunks):
            keep = visible(qp, kp, causal, doc_ids)
            if bool(keep.all()):
                yield i, j, "full"
            elif bool(keep.any()):
                yield i, j, keep


def _dtype(requested, x):
    """``requested``, or float32 or wider (the dtype real kernels keep softmax state in)."""
    return torch.promote_types(x.dtype, torch.float32) if requested is None else requested


class _Pairs:
    """Which (query chunk, key chunk, mask) pairs rank r computes against the block of rank
    src: :func:`plan` for the chunked layouts, :func:`mask_plan` for striped or documents."""

    def __init__(self, r, cp, n_local, layout, causal, documents, device):
        self.r, self.cp, self.layout, self.causal = r, cp, layout, causal
        self.n = chunks_per_rank(layout)
        s = n_local * cp
        self.general = layout == "striped" or documents is not None
        self.doc_ids = None if documents is None else document_ids(documents, s).to(device)
        self.pos = [positions(s, cp, j, layout).to(device).chunk(self.n) for j in range(cp)]

    def __call__(self, src):
        if self.general:
            return list(mask_plan(self.pos[self.r], self.pos[src], self.causal, self.doc_ids))
        ids = lambda j: chunk_ids(j, self.cp, self.layout)
        return list(plan(ids(self.r), ids(src), self.causal))


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, mask: Mask, opts: RingOptions):
        causal, layout, documents = mask
        cp, r = group_size(group), group_rank(group)
        n = chunks_per_rank(layout)
        pairs = _Pairs(r, cp, q.shape[2], layout, causal, documents, q.device)
        comp = _dtype(None, q)  # block compute precision
        mdt, timeline = _dtype(opts.merge_dtype, q), opts.timeline
        qs = q.to(comp).chunk(n, dim=2)  # n × (b, a, s/(n·cp), d)
        outs, lses = [None] * n, [None] * n
        kv = torch.stack([k, v])  # (2, b, a_kv, s/cp, d): one message
        t0 = time.perf_counter()
        for step in range(cp):
            src = block_source(r, step, cp)
            shift = RingShift(kv, group) if step < cp - 1 else None
            c0 = time.perf_counter()
            ks, vs = kv[0].to(comp).chunk(n, dim=2), kv[1].to(comp).chunk(n, dim=2)
            for i, j, mask in pairs(src):
                o, lse = block_attention(qs[i], ks[j], vs[j], mask)
                o, lse = o.to(mdt), lse.to(mdt)  # what the merge keeps
                first = outs[i] is None
                outs[i], lses[i] = (o, lse) if first else merge_blocks(outs[i], lses[i], o, lse)
            c1 = time.perf_counter()
            if shift is not None:
                kv = shift.wait()
            if timeline is not None:
                comm = (c0 - t0, time.perf_counter() - t0) if shift else None
                timeline.append(dict(step=step, src=src, compute=(c0 - t0, c1 - t0), comm=comm))
        b, a, m, d = q.shape
        for i in range(n):  # a row no key can see: o = 0
            if outs[i] is None:
                outs[i] = q.new_zeros(b, a, m // n, d, dtype=mdt)
                lses[i] = q.new_full((b, a, m // n), float("-inf"), dtype=mdt)
        out, lse = torch.cat(outs, dim=2), torch.cat(lses, dim=2)  # (b, a, s/cp, d), (b, a, s/cp)
        out = out.to(q.dtype)  # rounded once, at the end
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.group, ctx.pairs, ctx.accum_dtype = group, pairs, opts.accum_dtype
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        group, pairs = ctx.group, ctx.pairs
        cp, r, n = pairs.cp, pairs.r, pairs.n
        comp = _dtype(None, q)
        acc = _dtype(ctx.accum_dtype, k)  # dK/dV accumulator on the wire
        dout = dout.contiguous().to(comp)
        delta = (dout * out.to(comp)).sum(-1)  # (b, a, s/cp)
        qs, dos = q.to(comp).chunk(n, dim=2), dout.chunk(n, dim=2)
        lses, deltas = lse.to(comp).chunk(n, dim=2), delta.chunk(n, dim=2)
        dq = torch.zeros_like(q, dtype=comp)  # local: stays in compute dtype
        dqs = dq.chunk(n, dim=2)  # views: writes land in dq
        kv = torch.stack([k, v])  # (2, b, a_kv, s/cp, d)
        incoming = None  # dK/dV accumulator in flight
        for step in range(cp):
            src = block_source(r, step, cp)
            shift = RingShift(kv, group) if step < cp - 1 else None
            dkv = torch.zeros_like(kv, dtype=comp)  # this rank's share for block src
            ks, vs = kv[0].to(comp).chunk(n, dim=2), kv[1].to(comp).chunk(n, dim=2)
            dks, dvs = dkv[0].chunk(n, dim=2), dkv[1].chunk(n, dim=2)
            for i, j, mask in pairs(src):
                gq, gk, gv = block_attention_backward(
                    qs[i], ks[j], vs[j], dos[i], lses[i], deltas[i], mask
                )
                dqs[i].add_(gq), dks[j].add_(gk), dvs[j].add_(gv)
            dkv = dkv.to(acc)
            if incoming is not None:  # ranks src … r−1 added theirs
                dkv += incoming.wait()
            incoming = RingShift(dkv, group)  # on to r+1; the last hop is home
            if shift is not None:
                kv = shift.wait()
        dkv = incoming.wait()  # our own block, all cp shares
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None, None


def check_qkv(q, k, v) -> None:
    """q (b, a, n, d), k and v (b, a_kv, n, d) with a divisible by a_kv; errors name the rule."""
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {tuple(k.shape)}, {tuple(v.shape)}")
    if q.dim() != 4 or (q.shape[0], q.shape[2], q.shape[3]) != (k.shape[0], k.shape[2], k.shape[3]):
        raise ValueError(
            f"q (b, a, n, d) and k, v (b, a_kv, n, d) must agree in b, n and d, got "
            f"{tuple(q.shape)}, {tuple(k.shape)}"
        )
    if q.shape[1] % k.shape[1]:
        raise ValueError(
            f"query heads ({q.shape[1]}) must be divisible by K/V heads ({k.shape[1]})"
        )


def ring_attention(
    q,
    k,
    v,
    causal: bool = False,
    group=None,
    layout: str = "contiguous",
    *,
    documents=None,
    options: RingOptions = RingOptions(),
):
    """This rank's output shard (q's shape and layout) of softmax(q kᵀ/√d) v over the whole
    sequence; q (b, a, s/cp, d), k and v (b, a_kv, s/cp, d) this rank's shards in ``layout``.
    ``causal`` masks by global position, ``documents`` (lengths summing to s) across documents;
    ``options``: :class:`RingOptions`. For one rank: plain attention, no communication."""
    check_qkv(q, k, v)
    n = chunks_per_rank(layout)
    if q.shape[2] % n:
        raise ValueError(
            f"local sequence length ({q.shape[2]}) must be divisible by {n} for layout {layout!r}"
        )
    return _RingAttention.apply(q, k, v, group, Mask(causal, layout, documents), options)
