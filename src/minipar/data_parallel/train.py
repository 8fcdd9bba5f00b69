"""One training loop for every data-parallel variant (:func:`train_rank`, on this rank's slice)
and the single-process reference on the whole global batch (:func:`train_reference`): with
equal slices and a mean loss, every correct variant ends with the reference's parameters.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from .accumulation import accumulation_step
from .bucketed import BucketedDataParallel
from .models import shard_batch
from .naive import all_reduce_gradients
from .zero import ZeRO

VARIANTS = ("naive", "bucketed", "accumulation", "zero0", "zero1", "zero2", "zero3", "ddp", "fsdp2")


def make_optimizer(name: str, lr: float | None = None):
    """``params -> optimizer``: "sgd" (plain SGD, lr 0.1) or "adam" (lr 0.01)."""
    if name == "sgd":
        return lambda ps: torch.optim.SGD(ps, lr=lr or 0.1)
    if name == "adam":
        return lambda ps: torch.optim.Adam(ps, lr=lr or 0.01)
    raise ValueError(f"optimizer ({name!r}) must be 'sgd' or 'adam'")


def train_reference(model, optimizer: str, batches, micro: int = 1):
    """Single process, whole global batch (split in ``micro`` chunks, gradients summed)."""
    opt = make_optimizer(optimizer)([p for p in model.parameters() if p.requires_grad])
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = 0.0
        for xc, yc in zip(x.chunk(micro), y.chunk(micro)):
            part = F.cross_entropy(model(xc), yc) / micro
            part.backward()
            loss += part.item()
        opt.step()
        losses.append(loss)
    return losses, [p.detach().clone() for p in model.parameters()]


def _wrap(variant: str, model, optimizer: str, bucket_cap_mb: float, group=None):
    """The variant's object and its optimizer (None where the variant owns it)."""
    if variant.startswith("zero"):
        return ZeRO(model, int(variant[-1]), make_optimizer(optimizer), group=group), None
    if variant == "ddp":
        wrapper = DDP(model, bucket_cap_mb=bucket_cap_mb, process_group=group)
    elif variant == "fsdp2":
        if group is not None:
            raise ValueError("variant 'fsdp2' runs on the default group only (group must be None)")
        from torch.distributed.fsdp import fully_shard  # noqa: PLC0415 (lazy: torch)

        fully_shard(model)  # one group: tied weights must share one (FSDP2 rule)
        wrapper = model
    elif variant in ("bucketed", "accumulation"):
        wrapper = BucketedDataParallel(model, group, bucket_cap_mb=bucket_cap_mb)
    elif variant == "naive":
        wrapper = None
    else:
        raise ValueError(f"variant ({variant!r}) must be one of {', '.join(VARIANTS)}")
    return wrapper, make_optimizer(optimizer)([p for p in model.parameters() if p.requires_grad])


@dataclass(frozen=True)
class DPOptions:
    """How :func:`train_rank` trains beyond the variant, model, optimizer and data: the bucket
    cap in MB (bucketed, accumulation, DDP), the micro-batches per step (accumulation), a
    :class:`minipar.runtime.tracer.trace` entered around the steps only (not the set-up), and
    the process group to train in (None: the default group)."""

    bucket_cap_mb: float = 0.001
    micro: int = 2
    tracer: Any = None
    group: Any = None


def train_rank(
    rank: int, n: int, variant: str, model, optimizer: str, batches, opts: DPOptions = DPOptions()
):
    """Train ``model`` with ``variant`` on this rank's slices; returns (local losses, params).
    With ``opts.group``, ``rank`` and ``n`` are this rank's place in that group and its size."""
    bucket_cap_mb, micro, tracer, group = opts.bucket_cap_mb, opts.micro, opts.tracer, opts.group
    wrapper, opt = _wrap(variant, model, optimizer, bucket_cap_mb, group)
    fwd = wrapper if variant in ("ddp", "fsdp2") else model
    stepper = wrapper if variant.startswith("zero") else opt  # ZeRO owns its optimizer
    losses = []
    with tracer or contextlib.nullcontext():
        for x, y in batches:
            x, y = shard_batch(x, rank, n), shard_batch(y, rank, n)  # (b/n,)
            stepper.zero_grad()
            if variant == "accumulation":
                mb = list(zip(x.chunk(micro), y.chunk(micro)))
                losses.append(accumulation_step(model, wrapper, mb, F.cross_entropy))
            else:
                loss = F.cross_entropy(fwd(x), y)
                loss.backward()
                losses.append(loss.item())
            if variant == "naive":
                all_reduce_gradients(model, group)
            elif variant in ("bucketed", "accumulation"):
                wrapper.finish()
            stepper.step()
    if variant.startswith("zero"):  # ZeRO's documented way to read them
        full = iter(wrapper.full_parameters())
        params = [next(full) if p.requires_grad else p for p in model.parameters()]
    else:
        params = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
    return losses, [p.detach().clone() for p in params]


def global_losses(per_rank_losses) -> list[float]:
    """Mean over ranks of the local losses = the loss on the whole global batch."""
    return [sum(step) / len(step) for step in zip(*per_rank_losses)]


def max_param_error(params, ref) -> float:
    return max((a - b).abs().max().item() for a, b in zip(params, ref))
