"""Attention over one block of keys, and the online-softmax merge of two blocks.

For one query row with scores z_j = q·k_j/√d over a block of keys, the block's result is

    o = Σ_j e^{z_j − m} v_j / ℓ,   m = max_j z_j,   ℓ = Σ_j e^{z_j − m},   lse = m + log ℓ.

``lse`` (the log of Σ_j e^{z_j}) is all the merge needs: for two blocks A and B over disjoint keys
the softmax over A ∪ B is

    lse = log(e^{lse_A} + e^{lse_B}),   o = e^{lse_A − lse} o_A + e^{lse_B − lse} o_B,

exact, and every exponent is ≤ 0, so logits of any size are safe (Milakov & Gimelshein 2018,
"Online normalizer calculation for softmax"; the same identity is the inner loop of
FlashAttention, Dao et al. 2022, and of ring attention, Liu et al. 2023). Merging the normalised
outputs without the e^{lse − lse_new} weights (``merge_without_lse`` in the tests) is the classic bug.

The backward of a block needs only the *final* lse and δ = rowsum(dO ∘ O) (Dao et al. 2022,
Algorithm 2): P = e^{Z − lse}, dV = Pᵀ dO, dS = P ∘ (dO Vᵀ − δ), dQ = dS K/√d, dK = dSᵀ Q/√d.
Shapes: q (b, a, n, d), k and v (b, a, n_k, d), lse and δ (b, a, n).
"""
from __future__ import annotations

import math

import torch

MASKS = ("full", "causal")


def _scores(q, k, mask: str):
    z = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])   # (b, a, n, n_k)
    if mask == "causal":      # q and k are the same chunk of positions: key j ≤ query i
        n, nk = z.shape[-2:]
        keep = torch.ones(n, nk, dtype=torch.bool, device=z.device).tril()
        z = z.masked_fill(~keep, float("-inf"))
    elif mask != "full":
        raise ValueError(f"mask must be one of {MASKS}, got {mask!r}")
    return z


def block_attention(q, k, v, mask: str = "full"):
    """(o, lse) of softmax attention of ``q`` over one block of keys: o (b, a, n, d), lse (b, a, n)."""
    z = _scores(q, k, mask)                                   # (b, a, n, n_k)
    m = z.amax(-1, keepdim=True)                              # (b, a, n, 1)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a row with every key masked
    p = torch.exp(z - m)                                      # (b, a, n, n_k), entries ≤ 1
    ell = p.sum(-1, keepdim=True)                             # (b, a, n, 1)
    o = torch.matmul(p, v) / torch.where(ell > 0, ell, torch.ones_like(ell))
    return o, (m + torch.log(ell)).squeeze(-1)                # lse = −inf for a fully masked row


def merge_blocks(o_a, lse_a, o_b, lse_b):
    """Softmax attention over the union of two disjoint key blocks from the two blocks' results."""
    lse = torch.logaddexp(lse_a, lse_b)                       # (b, a, n)
    ref = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - ref).unsqueeze(-1)                # (b, a, n, 1), ≤ 1
    w_b = torch.exp(lse_b - ref).unsqueeze(-1)
    return w_a * o_a + w_b * o_b, lse


def block_attention_backward(q, k, v, dout, lse, delta, mask: str = "full"):
    """Gradients of one block's share of the final output: (dq, dk, dv) for this block."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    p = torch.exp(_scores(q, k, mask) - lse.unsqueeze(-1))   # (b, a, n, n_k) final probabilities
    dv = torch.matmul(p.transpose(-2, -1), dout)              # (b, a, n_k, d)
    dp = torch.matmul(dout, v.transpose(-2, -1))              # (b, a, n, n_k)
    ds = p * (dp - delta.unsqueeze(-1))                       # (b, a, n, n_k)
    dq = torch.matmul(ds, k) * scale                          # (b, a, n, d)
    dk = torch.matmul(ds.transpose(-2, -1), q) * scale        # (b, a, n_k, d)
    return dq, dk, dv


def full_attention(q, k, v, causal: bool = False):
    """The single-process reference: softmax(q kᵀ/√d) v over the whole sequence, autograd's
    own backward (q, k, v (b, a, s, d) in global order)."""
    z = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])   # (b, a, s, s)
    if causal:
        s = z.shape[-1]
        z = z.masked_fill(torch.ones(s, s, dtype=torch.bool, device=z.device).triu(1),
                          float("-inf"))
    return torch.matmul(torch.softmax(z, dim=-1), v)                     # (b, a, s, d)
