"""Putting the three together: one rank grid for data × tensor × pipeline parallelism.

    grid.py         RankGrid(d, t, p): coordinates, tp/dp/pp/embedding groups, a printable table;
                    new_groups(grid) creates this rank's torch.distributed groups
    experiments.py  what the chapter's notebook runs on ranks (group membership check)

The planner that chooses (d, t, p) is pure Python: :mod:`minipar.cost.planner`.
"""
from .grid import Coord, Groups, RankGrid, new_groups

__all__ = ["Coord", "Groups", "RankGrid", "new_groups"]
