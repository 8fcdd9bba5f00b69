"""Pipeline parallelism: the model cut into stages by layers, micro-batches flowing through them.

    schedules.py      schedules as data: per rank, the ordered (op, stage, microbatch) actions
    simulate.py       run a schedule on paper: deadlocks, bubble, micro-batches in flight
    model_bubble.py   the closed-form bubble and in-flight figures each schedule should meet
    plots.py          a schedule as a text timeline and as a matplotlib chart
"""
from .schedules import Action, NAMES, schedule, stage_owner, stages_of_rank, table
from .simulate import ScheduleError, Simulation, simulate

__all__ = ["Action", "NAMES", "ScheduleError", "Simulation", "schedule", "simulate",
           "stage_owner", "stages_of_rank", "table"]
