"""Dropless MoE as production layers run it: permute, one grouped GEMM, unpermute.

A loop over experts launches 2E small, badly shaped GEMMs and E gathers and scatters per layer.
Real layers instead (Gale et al. 2023, "MegaBlocks", §4–5; Megatron-Core's
``--moe-grouped-gemm`` and its token permutation):

1. **permute**: sort the K·n (token, choice) assignments by expert with one stable argsort and
   gather their rows once: ``rows`` (A, h), expert-major, and the variable group sizes
   ``sizes`` (E,) = assignments per expert. No capacity, no padding, no token dropped;
2. **one grouped GEMM** per weight: group e multiplies its ``sizes[e]`` rows by its own W[e].
   ``kernel="padded"`` writes it as one batched matmul over groups padded to the largest
   (exact in float64 on any device; the padding is the cost MegaBlocks' block-sparse kernel
   avoids); ``kernel="grouped_mm"`` calls ``torch._grouped_mm`` (variable sizes, no padding;
   float32/bfloat16 only, strides of 16 bytes); ``kernel="loop"`` is the Python loop, kept to
   measure what the grouped forms save (``minipar bench expert_parallel``);
3. **unpermute**: scale each row by its gate and add it back into its token's row
   (``index_add``), which is the inverse permutation and the sum over the K choices at once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .routing import top_k_gates

KERNELS = ("padded", "grouped_mm", "loop")


def permute(x: torch.Tensor, experts: torch.Tensor, num_experts: int):
    """(n, h) tokens, (n, K) choices -> rows (A, h) sorted by expert, token (A,), order (A,) and
    sizes (E,). Assignment a = j·n + i (slot-major), then a stable sort by expert, so an expert's
    rows keep slot-then-token order. ``order`` indexes the flattened (K·n,) slot-major arrays."""
    n, K = experts.shape
    expert = experts.T.reshape(-1)  # (K·n,) a = j·n + i
    order = torch.argsort(expert, stable=True)  # (A,) expert-major
    token = torch.arange(n).repeat(K)[order]  # (A,)
    sizes = torch.bincount(expert, minlength=num_experts)  # (E,)
    return x[token], token, order, sizes


def unpermute(out: torch.Tensor, token: torch.Tensor, gate: torch.Tensor, n: int) -> torch.Tensor:
    """(A, h) expert outputs in permuted order -> (n, h): y[token[a]] += gate[a] · out[a]."""
    return out.new_zeros(n, out.shape[1]).index_add(0, token, gate[:, None] * out)


def _padded_mm(rows: torch.Tensor, sizes: list[int], w: torch.Tensor) -> torch.Tensor:
    """Σ sizes rows (grouped) @ w[e] per group, as ONE batched matmul over groups padded to the
    largest: (E, m_max, k) @ (E, k, o) -> (E, m_max, o), padding rows dropped again."""
    E, m = len(sizes), max(sizes, default=0)
    sz = torch.tensor(sizes)
    group = torch.arange(E).repeat_interleave(sz)  # (A,) group of each row
    start = torch.cumsum(sz, 0) - sz  # (E,) first row of a group
    slot = torch.arange(len(group)) - start[group]  # (A,) row within its group
    padded = rows.new_zeros(E, m, rows.shape[1]).index_put((group, slot), rows)  # (E, m_max, k)
    return torch.bmm(padded, w)[group, slot]  # (A, o)


class _ContiguousGrad(torch.autograd.Function):
    """Identity; backward makes the incoming gradient contiguous (``torch._grouped_mm``'s
    backward rejects the zero-stride gradient that ``.sum().backward()`` produces)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


def grouped_mm(rows: torch.Tensor, sizes, w: torch.Tensor, kernel: str = "padded") -> torch.Tensor:
    """Grouped GEMM: rows (A, k) in groups of ``sizes`` (E,), w (E, k, o) -> (A, o), group e's
    rows times w[e]."""
    sizes = [int(s) for s in sizes]
    if kernel == "padded":
        return _padded_mm(rows, sizes, w)
    if kernel == "grouped_mm":
        offs = torch.tensor(sizes).cumsum(0).to(torch.int32)  # (E,) end of each group
        return _ContiguousGrad.apply(torch._grouped_mm(rows.contiguous(), w, offs=offs))
    if kernel == "loop":
        outs = [chunk @ w[e] for e, chunk in enumerate(rows.split(sizes))]
        return torch.cat(outs) if outs else rows.new_zeros(0, w.shape[-1])
    raise ValueError(f"kernel ({kernel!r}) must be one of {KERNELS}")


def grouped_mlp(
    rows: torch.Tensor, sizes, w1: torch.Tensor, w2: torch.Tensor, kernel: str = "padded"
) -> torch.Tensor:
    """Every expert's MLP on its group of rows: gelu(rows W1[e]) W2[e], two grouped GEMMs."""
    if kernel == "loop":  # the per-expert Python loop
        chunks = rows.split([int(s) for s in sizes])
        outs = [F.gelu(c @ w1[e]) @ w2[e] for e, c in enumerate(chunks)]
        return torch.cat(outs) if outs else rows.new_zeros(0, w2.shape[-1])
    return grouped_mm(F.gelu(grouped_mm(rows, sizes, w1, kernel)), sizes, w2, kernel)


def dropless_forward(moe, x: torch.Tensor, kernel: str = "padded") -> torch.Tensor:
    """An :class:`~.moe.MoE` without capacity through permute → grouped MLP → unpermute."""
    if moe.capacity_factor is not None:
        raise ValueError(f"dropless_forward needs capacity_factor None, got {moe.capacity_factor}")
    shape = x.shape
    x = x.reshape(-1, moe.hidden)  # (n, h)
    _, gates, experts = top_k_gates(
        moe.router(x), moe.top_k, moe.renormalize, getattr(moe, "expert_bias", None)
    )
    rows, token, order, sizes = permute(x, experts, moe.experts)  # (A, h)
    out = grouped_mlp(rows, sizes, moe.w1, moe.w2, kernel)  # (A, h)
    gate = gates.T.reshape(-1)[order]  # (A,) same permutation
    return unpermute(out, token, gate, x.shape[0]).reshape(shape)
