"""The one place that decides which device a rank computes on.

Nothing else in minipar calls ``torch.cuda`` unconditionally: code asks :func:`get_device`.
The launcher (and :mod:`minipar.run` under torchrun) calls :func:`set_backend` on each rank.
"""
from __future__ import annotations

import os

_ENV = "MINIPAR_DEVICE"


def set_backend(backend: str | None, local_rank: int = 0) -> None:
    """Record the device for this rank: ``cuda:<local_rank>`` for NCCL, ``cpu`` otherwise."""
    if backend == "nccl":
        import torch

        torch.cuda.set_device(local_rank)
        os.environ[_ENV] = f"cuda:{local_rank}"
    elif backend is None:
        os.environ.pop(_ENV, None)
    else:
        os.environ[_ENV] = "cpu"


def gpu_count() -> int:
    """GPUs this process can see (0 without a CUDA build); the launcher's ``backend="auto"``
    picks NCCL when there is one per rank."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def get_device():
    """The ``torch.device`` this rank should put its tensors on (``cpu`` outside a launch)."""
    import torch

    return torch.device(os.environ.get(_ENV, "cpu"))


def synchronize() -> None:
    """Wait for queued GPU work on this rank's device (a no-op on the CPU); use before timing."""
    import torch

    dev = get_device()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
