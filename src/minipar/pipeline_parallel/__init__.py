"""Pipeline parallelism: the model cut into stages by layers, micro-batches flowing through them.

schedules.py      schedules as data: per rank, the ordered (op, stage, microbatch) actions
simulate.py       run a schedule on paper: deadlocks, bubble, micro-batches in flight
model_bubble.py   the closed-form bubble and in-flight figures each schedule should meet
stage.py          a small GPT cut into stages by layers (embedding first, head + loss last)
communication.py  untagged messages between stages in one global order, the tied-embedding all-reduce
executor.py       PipelineExecutor: runs any action list on ranks (F, B, W)
train.py          training on ranks with any schedule, and the one-process reference
timed.py          fixed-duration stages for measuring the bubble (minipar bench pp)
torch_pipelining.py  the same stages through torch.distributed.pipelining
experiments.py    what the chapter's notebook runs
"""

from .schedules import NAMES, Action, schedule, table
from .simulate import ScheduleError, Simulation, simulate

__all__ = ["Action", "NAMES", "ScheduleError", "Simulation", "schedule", "simulate", "table"]
