"""Recursive-doubling all-reduce (Thakur, Rabenseifner & Gropp 2005, §4.4) for n = 2^k ranks.

Round j = 0 … log2(n)−1: exchange the WHOLE buffer with partner ``rank XOR 2^j`` and add. After
round j each rank holds the sum over a block of 2^(j+1) ranks. log2(n) rounds of α + Sβ: few
messages (good for small S), but every round moves all S bytes (bad for large S, where the
ring's 2(n−1)/n·S wins).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def recursive_doubling_all_reduce(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """In-place sum over the group's ranks; ``ValueError`` unless the group size is a power of 2."""
    r, n = dist.get_rank(group), dist.get_world_size(group)
    if n & (n - 1):
        raise ValueError(f"recursive doubling needs a power-of-two number of ranks, got n ({n})")
    buf = torch.empty_like(tensor)  # same shape as tensor: whole buffer each round
    step = 1
    while step < n:
        partner = r ^ step
        reqs = [
            dist.isend(tensor.contiguous(), group=group, group_dst=partner),
            dist.irecv(buf, group=group, group_src=partner),
        ]
        for req in reqs:
            req.wait()
        tensor += buf  # a + b == b + a exactly: partners stay identical
        step *= 2
    return tensor
