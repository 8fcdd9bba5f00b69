"""Putting them together: one rank grid for data × tensor × pipeline parallelism, then all five.

    grid.py         RankGrid(d, t, p): coordinates, tp/dp/pp/embedding groups, a printable table;
                    new_groups(grid) creates this rank's torch.distributed groups
    experiments.py  what the chapter's notebook runs on ranks (group membership check)
    train.py        3D training from the chapters' pieces: TP blocks in 1F1B pipeline stages,
                    ZeRO-1 over the DP group, compared with one process; traffic per group
    calibrate.py    the reader's machine: measure the tiny 3D GPT's parts, predict every
                    (d, t, p) of its ranks, run each and compare (minipar bench three_d)
    five_d.py       all five parallelisms: a tiny MoE GPT with d × t × p × cp × ep (experts
                    folded) on minipar.grid.Grid, compared with one process; traffic per group
    moe_gpt.py      the capstone's one-process MoE GPT

The planner that chooses (d, t, p) is pure Python: :mod:`minipar.cost.planner.three_d`; the
chapter's inputs, rows and sentences are the book's glue (``book/glue/three_d*.py``).
"""

from .grid import Coord, Groups, RankGrid, new_groups

__all__ = ["Coord", "Groups", "RankGrid", "new_groups"]
