"""The one place that decides which backend ranks use and which device they compute on.

Nothing else in minipar calls ``torch.cuda`` unconditionally: code asks :func:`get_device`
(ranks) or :func:`default_device` (single-process experiments). :func:`resolve_backend` turns
``"auto"`` into NCCL when there is one GPU per rank, else gloo; the launcher and
:mod:`minipar.runtime.run` use it, then call :func:`set_backend` on each rank. Time GPU work
only after :func:`synchronize`.
"""

from __future__ import annotations

import os

_ENV = "MINIPAR_DEVICE"
BACKENDS = ("auto", "gloo", "nccl")


def gpu_count() -> int:
    """GPUs this process can see (0 on a CPU-only build of torch)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_backend(backend: str, ranks: int) -> str:
    """``"auto"``: NCCL when ``ranks`` GPUs are visible (one per rank), else gloo; an explicit
    ``"nccl"`` without one GPU per rank is an error naming both numbers."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    gpus = gpu_count() if backend != "gloo" else 0
    if backend == "nccl" and gpus < ranks:
        raise ValueError(
            f"backend 'nccl' needs one GPU per rank: world_size ({ranks}) "
            f"> GPUs visible ({gpus}); use backend='gloo' or fewer ranks"
        )
    if backend == "auto":
        return "nccl" if gpus >= ranks else "gloo"
    return backend


def set_backend(backend: str | None, local_rank: int = 0) -> None:
    """Record the device for this rank: ``cuda:<local_rank>`` for NCCL, ``cpu`` otherwise."""
    if backend == "nccl":
        import torch  # noqa: PLC0415 (lazy: torch)

        torch.cuda.set_device(local_rank)
        os.environ[_ENV] = f"cuda:{local_rank}"
    elif backend is None:
        os.environ.pop(_ENV, None)
    else:
        os.environ[_ENV] = "cpu"


def get_device():
    """The ``torch.device`` this rank should put its tensors on (``cpu`` outside a launch)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    return torch.device(os.environ.get(_ENV, "cpu"))


def default_device():
    """For a single-process experiment: the launcher's device if this is a rank, else the
    first GPU if there is one, else the CPU."""
    import torch  # noqa: PLC0415 (lazy: torch)

    if _ENV in os.environ:
        return get_device()
    return torch.device("cuda", 0) if gpu_count() else torch.device("cpu")


def synchronize() -> None:
    """Wait for queued GPU work on this rank's device (a no-op on the CPU); use before timing."""
    import torch  # noqa: PLC0415 (lazy: torch)

    dev = get_device()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
