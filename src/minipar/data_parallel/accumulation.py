"""Gradient accumulation: k micro-batches per optimizer step, one synchronisation per step.

Summing the gradients of k micro-batches, each loss weighted by its share b_i/Σb of the rank's
samples (1/k for equal ones), gives the gradient of the mean loss over their union. It is
averaged across ranks once, after the last micro-batch: the first k−1 backward passes run under
``no_sync`` (DDP's name) and communicate nothing, so Ψ·4 bytes per step are amortised over k
times the compute, and the update is exactly the one a single process computes on the global
batch of n·k·b samples (not "periodic synchronisation with staleness").

Averaging over ranks divides by n, which is the global mean only if every rank holds the same
number of samples. When they differ, pass ``global_samples`` (the global batch size B): each
micro-batch loss is then weighted by n·b_i/B, and the rank average (1/n)Σ_r becomes the mean over
all B samples.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from .bucketed import BucketedDataParallel


def accumulation_step(
    model: torch.nn.Module,
    dp: BucketedDataParallel,
    micro_batches,
    loss_fn,
    global_samples: int | None = None,
    global_loss: bool = False,
) -> float:
    """Forward and backward over ``micro_batches`` [(x, y), ...] (``loss_fn`` a mean over its
    micro-batch), gradients averaged once; returns this rank's mean loss over its samples, or
    with ``global_loss=True`` (one extra all-reduce of two numbers) the mean over every sample
    of the group. Call ``zero_grad`` before and ``optimizer.step()`` after."""
    if not micro_batches:
        raise ValueError("micro_batches (0) must hold at least one (x, y) pair")
    sizes = [len(x) for x, _ in micro_batches]
    local = sum(sizes)
    scale = dp.n * 1.0 / global_samples if global_samples else 1.0 / local
    k, total = len(micro_batches), 0.0
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        with contextlib.nullcontext() if last else dp.no_sync():
            loss = loss_fn(model(x), y) * (sizes[i] * scale)  # weight of this micro-batch
            loss.backward()  # accumulates into .grad; the last one syncs
        total += loss.item() / (scale * local)  # Σ b_i·ℓ_i / Σ b_i
    dp.finish()  # waits if anything is still in flight
    if not global_loss or dp.n == 1:
        return total
    device = dp.params[0].device if dp.params else None  # NCCL needs it on the GPU
    both = torch.tensor([total * local, float(local)], dtype=torch.float64, device=device)  # (2,)
    dist.all_reduce(both, group=dp.group)
    return (both[0] / both[1]).item()
