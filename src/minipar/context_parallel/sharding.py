"""Cutting the sequence into cp shards, and putting it back together.

Two layouts (``layout``):

* ``"contiguous"``: the sequence is cut into cp equal chunks; rank r keeps chunk r.
* ``"zigzag"``: the sequence is cut into 2·cp equal chunks; rank r keeps chunks r and
  2·cp−1−r, concatenated in that order. Under a causal mask the token at global position i
  attends to i+1 keys, so the early chunks are cheap and the late ones expensive; pairing chunk r
  with its mirror 2·cp−1−r gives every rank the same work. This is the layout of Megatron-LM's
  context parallelism and of the Llama 3 report (Dubey et al. 2024, §3.3.2), also called
  "load-balanced" sharding in torch's ``context_parallel``.

:func:`chunk_ids` and :func:`positions` say which global chunks and token positions a rank
holds; ring attention uses them to mask by *global* position.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.dist import group_rank, group_size

LAYOUTS = ("contiguous", "zigzag")


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def chunks_per_rank(layout: str) -> int:
    """1 for contiguous, 2 for zigzag."""
    _check_layout(layout)
    return 1 if layout == "contiguous" else 2


def chunk_ids(rank: int, cp: int, layout: str = "contiguous") -> list[int]:
    """Global chunk indices rank ``rank`` holds, in storage order (chunks of s/cp tokens for
    contiguous, s/(2·cp) for zigzag)."""
    _check_layout(layout)
    if not 0 <= rank < cp:
        raise ValueError(f"rank ({rank}) must be in [0, cp={cp})")
    return [rank] if layout == "contiguous" else [rank, 2 * cp - 1 - rank]


def zigzag_indices(s: int, cp: int, rank: int) -> list[int]:
    """Global token positions of rank ``rank``'s zigzag shard of a length-``s`` sequence."""
    return positions(s, cp, rank, "zigzag").tolist()


def positions(s: int, cp: int, rank: int, layout: str = "contiguous") -> torch.Tensor:
    """Global positions (int64, length s/cp) of the tokens this rank holds, in storage order."""
    n = cp * chunks_per_rank(layout)
    if s % n:
        rule = "2·cp" if layout == "zigzag" else "cp"
        raise ValueError(f"sequence length ({s}) must be divisible by {rule} ({n}) "
                         f"for layout {layout!r}")
    size = s // n
    return torch.cat([torch.arange(i * size, (i + 1) * size) for i in chunk_ids(rank, cp, layout)])


def shard_sequence(x: torch.Tensor, dim: int, group=None, layout: str = "contiguous") -> torch.Tensor:
    """This rank's shard of the full tensor ``x`` along ``dim`` (no communication)."""
    cp, r = group_size(group), group_rank(group)
    idx = positions(x.shape[dim], cp, r, layout).to(x.device)
    return x.index_select(dim, idx).contiguous()                  # (…, s/cp, …)


def gather_sequence(x_local: torch.Tensor, dim: int, group=None,
                    layout: str = "contiguous") -> torch.Tensor:
    """Inverse of :func:`shard_sequence`: the full tensor on every rank (one all-gather).
    Not differentiable (used to check and to print, not inside a model)."""
    cp = group_size(group)
    _check_layout(layout)
    if cp == 1:
        return x_local
    parts = [torch.empty_like(x_local) for _ in range(cp)]
    dist.all_gather(parts, x_local.contiguous(), group=group)    # cp × (…, s/cp, …)
    s = x_local.shape[dim] * cp
    full_shape = list(x_local.shape)
    full_shape[dim] = s
    out = x_local.new_empty(full_shape)                          # (…, s, …)
    for r, part in enumerate(parts):
        out.index_copy_(dim, positions(s, cp, r, layout).to(x_local.device), part)
    return out
