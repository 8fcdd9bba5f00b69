"""Expert parallelism inside data parallelism: the groups and the two gradient reductions.

All ranks come from one grid ``arange(world).view(dp, ep)``: a row is one EP group (one model
replica whose experts are split over ep ranks), a column is the DP group of one expert shard
(the ranks that hold the same experts). Every rank reads different tokens, so:

* dense parameters (here the router), replicated on all dp·ep ranks, are averaged over **all**
  ranks — the data-parallel group of dense weights contains the EP group;
* an expert's gradient on its owner already sums the contributions of every token of its EP
  group (they were sent to it), so it is summed over the expert's DP group only and divided by
  the number of ranks whose mean losses make up the global loss, dp·ep — not by dp.
  (Megatron-LM reduces expert gradients over its "expert data-parallel" group the same way.)
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def ep_dp_groups(ep: int):
    """(ep_group, dp_group) of this rank on the grid ``arange(world).view(dp, ep)``.

    Every rank creates every group, in the same order (``new_group`` is collective)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if world % ep:
        raise ValueError(f"world size ({world}) must be divisible by ep ({ep})")
    grid = torch.arange(world).view(world // ep, ep)             # (dp, ep)
    ep_group = dp_group = None
    for row in grid.tolist():
        g = dist.new_group(row)
        ep_group = g if rank in row else ep_group
    for col in grid.T.tolist():
        g = dist.new_group(col)
        dp_group = g if rank in col else dp_group
    return ep_group, dp_group


def reduce_gradients(layer, dp_group, expert_divisor: int | None = None) -> None:
    """Average the router over all ranks; sum each expert over ``dp_group`` and divide by
    ``expert_divisor`` (default: the world size, dp·ep). Assumes each rank's loss is the mean
    over its own tokens and the global loss the mean over ranks."""
    world = dist.get_world_size()
    divisor = world if expert_divisor is None else expert_divisor
    for p in layer.router.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    for p in (layer.w1, layer.w2):
        dist.all_reduce(p.grad, group=dp_group)
        p.grad /= divisor
