"""Putting them together: one rank grid for data × tensor × pipeline parallelism, then all five.

    grid.py         RankGrid(d, t, p) and new_groups(grid): coordinates, tp/dp/pp/embedding groups
    experiments.py  what the chapter's notebook runs on ranks (group membership check)
    train.py        3D training from the chapters' pieces (TP blocks in 1F1B stages, ZeRO-1 over
                    DP) against one process, traffic per group; FSDP2 + TP the torchtitan way
    calibrate.py    the reader's machine: measure the tiny 3D GPT's parts, predict and run every
                    (d, t, p) of its ranks (minipar bench three_d)
    five_d.py       all five parallelisms on minipar.grid.Grid: a tiny MoE GPT (moe_gpt.py)
                    against one process, traffic per group

The planner that chooses (d, t, p) is pure Python (:mod:`minipar.cost.planner.three_d`); the
chapter's inputs, rows and sentences are the book's glue (``book/glue/three_d*.py``).
"""

from .grid import Coord, Groups, RankGrid, new_groups

__all__ = ["Coord", "Groups", "RankGrid", "new_groups"]
