"""Data parallelism: every rank holds the model, sees its own slice of the batch, and the ranks
average their gradients so that every replica takes the same optimizer step.

    naive.py         all-reduce every gradient after backward (one call per parameter)
    bucketed.py      DDP's design: gradient hooks fill buckets, async all-reduce overlaps backward
    accumulation.py  gradient accumulation that synchronises only on the last micro-step
    zero.py          ZeRO stages 0-3 on one flat parameter: shard optimizer, gradients, weights
    overlap.py       ZeRO-1 whose parameter all-gather overlaps the next forward (prefetch)
    models.py        the tiny models the chapter, tests and exercises train
    train.py         one training loop for every variant, and the single-process reference
    timing.py        timed experiments (step time, overlap timeline, bucket sweep, straggler)
    measurements.py  counted experiments (traced bytes, ZeRO memory, PyTorch comparison)
    scaling.py       modelled scaling at cluster sizes (minipar.cost), the staleness toy
    experiments.py   the three above in one namespace for the chapter's notebook
"""

from .accumulation import accumulation_step
from .bucketed import BucketedDataParallel
from .naive import all_reduce_gradients, broadcast_parameters
from .zero import ZeRO

__all__ = [
    "BucketedDataParallel",
    "ZeRO",
    "accumulation_step",
    "all_reduce_gradients",
    "broadcast_parameters",
]
