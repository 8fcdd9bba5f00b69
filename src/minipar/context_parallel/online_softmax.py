"""Attention over one block of keys, and the online-softmax merge of two blocks.

For one query row with scores z_j = q·k_j/√d over a block of keys, the block's result is

    o = Σ_j e^{z_j − m} v_j / ℓ,   m = max_j z_j,   ℓ = Σ_j e^{z_j − m},   lse = m + log ℓ,

and for two blocks A and B over disjoint keys the softmax over A ∪ B is, exactly,

    lse = log(e^{lse_A} + e^{lse_B}),   o = e^{lse_A − lse} o_A + e^{lse_B − lse} o_B,

every exponent ≤ 0, so logits of any size are safe (Milakov & Gimelshein 2018, "Online normalizer
calculation for softmax"; the inner loop of FlashAttention, Dao et al. 2022, and of ring
attention, Liu et al. 2023). Merging without the e^{lse − lse_new} weights is the classic bug.
A block's backward needs only the *final* lse and δ = rowsum(dO ∘ O) (Dao et al. 2022,
Algorithm 4): P = e^{Z − lse}, dV = Pᵀ dO, dS = P ∘ (dO Vᵀ − δ), dQ = dS K/√d, dK = dSᵀ Q/√d.

Shapes: q (b, a, n, d), k and v (b, a_kv, n_k, d) (grouped-query attention, Ainslie et al. 2023:
query head i reads K/V head i // (a/a_kv); the backward sums each K/V head's gradient over its
query heads); lse and δ (b, a, n). ``mask`` is "full", "causal" (q and k the same chunk of
positions) or a boolean (n, n_k), True where the key is visible (:func:`visible`).
"""

from __future__ import annotations

import math

import torch

MASKS = ("full", "causal")


def expand_kv(x, a: int):
    """K or V (b, a_kv, n, d) → (b, a, n, d): each K/V head repeated for its a/a_kv query heads."""
    a_kv = x.shape[1]
    if a % a_kv:
        raise ValueError(f"query heads ({a}) must be divisible by K/V heads ({a_kv})")
    return x if a_kv == a else x.repeat_interleave(a // a_kv, dim=1)


def fold_kv(dx, a_kv: int):
    """Gradient (b, a, n, d) of an expanded K or V → (b, a_kv, n, d): the sum over each group."""
    b, a, n, d = dx.shape
    return dx if a == a_kv else dx.view(b, a_kv, a // a_kv, n, d).sum(2)


def visible(q_pos, k_pos, causal: bool, doc_ids=None):
    """Boolean (n, n_k): key position k_pos[j] visible to query position q_pos[i] (causal:
    k ≤ q; with ``doc_ids`` (s,), the document of each global position: the same document)."""
    keep = torch.ones(len(q_pos), len(k_pos), dtype=torch.bool, device=q_pos.device)
    if causal:
        keep &= k_pos.unsqueeze(0) <= q_pos.unsqueeze(1)
    if doc_ids is not None:
        keep &= doc_ids[k_pos].unsqueeze(0) == doc_ids[q_pos].unsqueeze(1)
    return keep


def _scores(q, k, mask):
    z = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (b, a, n, n_k)
    if isinstance(mask, torch.Tensor):  # (n, n_k) True = visible
        z = z.masked_fill(~mask, float("-inf"))
    elif mask == "causal":  # q and k are the same chunk of positions: key j ≤ query i
        n, nk = z.shape[-2:]
        keep = torch.ones(n, nk, dtype=torch.bool, device=z.device).tril()
        z = z.masked_fill(~keep, float("-inf"))
    elif mask != "full":
        raise ValueError(f"mask must be one of {MASKS} or a boolean tensor, got {mask!r}")
    return z


def block_attention(q, k, v, mask="full"):
    """(o, lse) of softmax attention of ``q`` over one block of keys: o (b, a, n, d), lse (b, a, n)."""
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])  # (b, a, n_k, d)
    z = _scores(q, k, mask)  # (b, a, n, n_k)
    m = z.amax(-1, keepdim=True)  # (b, a, n, 1)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a row with every key masked
    p = torch.exp(z - m)  # (b, a, n, n_k), entries ≤ 1
    ell = p.sum(-1, keepdim=True)  # (b, a, n, 1)
    o = torch.matmul(p, v) / torch.where(ell > 0, ell, torch.ones_like(ell))
    return o, (m + torch.log(ell)).squeeze(-1)  # lse = −inf for a fully masked row


def merge_blocks(o_a, lse_a, o_b, lse_b):
    """Softmax attention over the union of two disjoint key blocks from the two blocks' results."""
    lse = torch.logaddexp(lse_a, lse_b)  # (b, a, n)
    ref = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - ref).unsqueeze(-1)  # (b, a, n, 1), ≤ 1
    w_b = torch.exp(lse_b - ref).unsqueeze(-1)
    return w_a * o_a + w_b * o_b, lse


def block_attention_backward(q, k, v, dout, lse, delta, mask="full"):
    """Gradients of one block's share of the final output: (dq, dk, dv) for this block
    (dk, dv with k's a_kv heads)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    a_kv = k.shape[1]
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])  # (b, a, n_k, d)
    p = torch.exp(_scores(q, k, mask) - lse.unsqueeze(-1))  # (b, a, n, n_k) final probabilities
    dv = torch.matmul(p.transpose(-2, -1), dout)  # (b, a, n_k, d)
    dp = torch.matmul(dout, v.transpose(-2, -1))  # (b, a, n, n_k)
    ds = p * (dp - delta.unsqueeze(-1))  # (b, a, n, n_k)
    dq = torch.matmul(ds, k) * scale  # (b, a, n, d)
    dk = torch.matmul(ds.transpose(-2, -1), q) * scale  # (b, a, n_k, d)
    return dq, fold_kv(dk, a_kv), fold_kv(dv, a_kv)  # (b, a_kv, n_k, d) each


def full_attention(q, k, v, causal: bool = False, doc_ids=None):
    """The single-process reference: softmax(q kᵀ/√d) v over the whole sequence, autograd's
    own backward (q (b, a, s, d), k and v (b, a_kv, s, d), in global order); ``doc_ids`` (s,)
    masks attention across documents of a packed sequence."""
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])  # (b, a, s, d)
    z = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (b, a, s, s)
    if causal or doc_ids is not None:
        pos = torch.arange(z.shape[-1], device=z.device)
        z = z.masked_fill(~visible(pos, pos, causal, doc_ids), float("-inf"))
    return torch.matmul(torch.softmax(z, dim=-1), v)  # (b, a, s, d)
