"""Gradient accumulation: k micro-batches per optimizer step, one synchronisation per step.

Summing the gradients of k micro-batches (each loss divided by k) gives the gradient of their
union, so a rank can process a batch k times larger than fits in memory. The gradient only has to
be averaged across ranks once, after the last micro-batch: the first k−1 backward passes run
under ``no_sync`` (DDP's context manager of the same name) and communicate nothing. Traffic per
optimizer step stays Ψ·4 bytes while compute grows k-fold, so communication is amortised; the
update is still synchronous and exactly the one a single process computes on the global batch of
n·k·b samples (not "periodic synchronisation with staleness").
"""
from __future__ import annotations

import contextlib

import torch

from .bucketed import BucketedDataParallel


def accumulation_step(model: torch.nn.Module, dp: BucketedDataParallel, micro_batches,
                      loss_fn) -> float:
    """Forward and backward over ``micro_batches`` [(x, y), ...]; gradients averaged once.

    Returns the mean loss. Call ``optimizer.step()`` afterwards (and ``zero_grad`` before).
    """
    k, total = len(micro_batches), 0.0
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        with (contextlib.nullcontext() if last else dp.no_sync()):
            loss = loss_fn(model(x), y) / k            # mean over the k·b samples of this rank
            loss.backward()                            # accumulates into .grad
        total += loss.item()
    dp.finish()                                        # the one all-reduce of the step
    return total
