"""Expert parallelism beside data parallelism: the groups and the two gradient reductions.

The groups come from :class:`minipar.grid.Grid` with d = world (no TP or CP), the experts
folded as ep × edp, ep innermost: an EP group is ep consecutive ranks (one replica whose experts
are split over them), an EDP group the ranks holding the same experts (stride ep), i.e. the
layout ``arange(world).view(dp, ep)`` (with TP or CP, :mod:`.folding`). Every rank reads
different tokens, so:

* dense parameters (here the router), replicated on all dp·ep ranks, are averaged over **all**
  ranks — the data-parallel group of dense weights contains the EP group;
* an expert's gradient on its owner already sums the contributions of every token of its EP
  group (they were sent to it), so it is summed over the expert's DP group only and divided by
  the number of ranks whose mean losses make up the global loss, dp·ep — not by dp.
  (Megatron-Core reduces expert gradients over its "expert data-parallel" group the same way.)
"""

from __future__ import annotations

import torch.distributed as dist

from minipar.grid import Grid, new_groups


def ep_dp_groups(ep: int):
    """(ep_group, dp_group) of this rank: the ``ep`` and ``edp`` groups of
    ``minipar.grid.Grid(d=world, ep=ep)``, the rows and columns of ``arange(world).view(-1, ep)``
    (collective: every rank creates every group, in the same order)."""
    world = dist.get_world_size()
    if world % ep:
        raise ValueError(f"world size ({world}) must be divisible by ep ({ep})")
    g = new_groups(Grid(d=world, ep=ep), ("ep", "edp"))
    return g["ep"], g["edp"]


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
