"""Cutting the sequence into cp shards, and putting it back together.

Three layouts (``layout``):

* ``"contiguous"``: the sequence is cut into cp equal chunks; rank r keeps chunk r.
* ``"zigzag"``: the sequence is cut into 2·cp equal chunks; rank r keeps chunks r and
  2·cp−1−r, in that order. Under a causal mask early chunks are cheap and late ones expensive;
  pairing chunk r with its mirror gives every rank the same work (Megatron-LM's context
  parallelism, the Llama 3 report, Dubey et al. 2024, §3.3.2; torch's "load-balanced" sharding).
* ``"striped"``: rank r keeps tokens r, r+cp, r+2·cp, … (Brandon et al. 2023, "Striped
  Attention: Faster Ring Attention for Causal Transformers"). Every block pair straddles the
  diagonal ("key index ≤ query index" from ranks src ≤ r, "<" from src > r), so every ring step
  does about half a block on every rank (with a kernel that skips masked entries).

Document masks (packed sequences, each document causal on its own) break both balances when the
whole packed sequence is sharded, as here; Transformer Engine's packed-sequence (THD) path and
torch's per-document load balancer zigzag each document over the ranks instead.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.dist import group_rank, group_size

LAYOUTS = ("contiguous", "zigzag", "striped")


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def chunks_per_rank(layout: str) -> int:
    """1 for contiguous and striped, 2 for zigzag."""
    _check_layout(layout)
    return 2 if layout == "zigzag" else 1


def chunk_ids(rank: int, cp: int, layout: str = "contiguous") -> list[int]:
    """Global chunk indices rank ``rank`` holds, in storage order (chunks of s/cp tokens for
    contiguous, s/(2·cp) for zigzag)."""
    _check_layout(layout)
    if layout == "striped":
        raise ValueError("layout 'striped' holds no chunks (tokens r, r+cp, …): use positions")
    if not 0 <= rank < cp:
        raise ValueError(f"rank ({rank}) must be in [0, cp={cp})")
    return [rank] if layout == "contiguous" else [rank, 2 * cp - 1 - rank]


def positions(s: int, cp: int, rank: int, layout: str = "contiguous") -> torch.Tensor:
    """Global positions (int64, length s/cp) of the tokens this rank holds, in storage order."""
    if layout == "striped" and not 0 <= rank < cp:
        raise ValueError(f"rank ({rank}) must be in [0, cp={cp})")
    n = cp * chunks_per_rank(layout)
    if s % n:
        rule = "2·cp" if layout == "zigzag" else "cp"
        raise ValueError(
            f"sequence length ({s}) must be divisible by {rule} ({n}) for layout {layout!r}"
        )
    if layout == "striped":
        return torch.arange(rank, s, cp)
    size = s // n
    return torch.cat([torch.arange(i * size, (i + 1) * size) for i in chunk_ids(rank, cp, layout)])


def shard_sequence(
    x: torch.Tensor, dim: int, group=None, layout: str = "contiguous"
) -> torch.Tensor:
    """This rank's shard of the full tensor ``x`` along ``dim`` (no communication)."""
    cp, r = group_size(group), group_rank(group)
    idx = positions(x.shape[dim], cp, r, layout).to(x.device)
    return x.index_select(dim, idx).contiguous()  # (…, s/cp, …)


def gather_sequence(
    x_local: torch.Tensor, dim: int, group=None, layout: str = "contiguous"
) -> torch.Tensor:
    """Inverse of :func:`shard_sequence`: the full tensor on every rank (one all-gather).
    Not differentiable (used to check and to print, not inside a model)."""
    cp = group_size(group)
    _check_layout(layout)
    if cp == 1:
        return x_local
    parts = [torch.empty_like(x_local) for _ in range(cp)]
    dist.all_gather(parts, x_local.contiguous(), group=group)  # cp × (…, s/cp, …)
    s = x_local.shape[dim] * cp
    out = torch.cat(parts, dim)  # (…, s, …) in rank order; each part goes to its positions
    for r, part in enumerate(parts):
        out.index_copy_(dim, positions(s, cp, r, layout).to(x_local.device), part)
    return out


def document_ids(lengths, s: int | None = None) -> torch.Tensor:
    """Document index of every global position of a packed sequence whose documents have
    ``lengths`` tokens, in order (FlashAttention's ``cu_seqlens`` as ids): (s,) int64."""
    lengths = [int(n) for n in lengths]
    if any(n < 1 for n in lengths):
        raise ValueError(f"document lengths ({lengths}) must all be >= 1")
    if s is not None and sum(lengths) != s:
        raise ValueError(f"document lengths sum to {sum(lengths)}, the sequence has {s} tokens")
    return torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
