"""A worker to check a machine or a cluster: our ring all-reduce against ``dist.all_reduce``.

    torchrun --nproc-per-node 8 -m minipar.run minipar.collectives.smoke:ring_vs_dist 1048576
    minipar.launch.run(ring_vs_dist, 4)                     # the same, from Python

Returns this rank's max abs difference (0.0 when they agree), the backend, and the device.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.collectives.ring import ring_all_reduce
from minipar.device import get_device


def ring_vs_dist(rank: int, world_size: int, numel: int = 1 << 16) -> dict:
    g = torch.Generator().manual_seed(1000 + rank)          # a distinct stream per rank
    x = torch.randn(numel, generator=g).to(get_device())    # (numel,)
    ours, theirs = x.clone(), x.clone()
    ring_all_reduce(ours)
    dist.all_reduce(theirs)
    return {"rank": rank, "max_abs_diff": (ours - theirs).abs().max().item(),
            "backend": dist.get_backend(), "device": str(x.device)}
