"""A smoke test that runs anywhere: ``minipar.runtime.launch.run`` locally or ``torchrun`` on a cluster.

torchrun --nproc-per-node 8 -m minipar.runtime.run minipar.collectives.smoke:ring_vs_dist
"""

from __future__ import annotations

import statistics

import torch
import torch.distributed as dist

from minipar.collectives import ring_all_reduce
from minipar.runtime.device import get_device
from minipar.runtime.timing import timed


def ring_vs_dist(rank: int, world_size: int, numel: int = 2**22, iters: int = 5) -> dict:
    """Check ``ring_all_reduce`` against ``dist.all_reduce`` on this rank's device and time both.

    Returns the max difference and the median seconds of each (this rank's view).
    """
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(numel, generator=g).to(get_device())  # (numel,) float32
    ours, ref = x.clone(), x.clone()
    ring_all_reduce(ours)
    dist.all_reduce(ref)
    times = {}
    for name, fn in (("ring", ring_all_reduce), ("dist", dist.all_reduce)):
        y = x.clone()
        times[name] = statistics.median(timed(lambda fn=fn, y=y: fn(y), iters))
    return dict(
        max_abs_diff=(ours - ref).abs().max().item(),
        bytes=4 * numel,
        ring_seconds=times["ring"],
        dist_seconds=times["dist"],
    )
