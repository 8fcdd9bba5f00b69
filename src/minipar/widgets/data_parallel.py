"""Explorers for the data-parallel chapter: DP step time, and ZeRO memory per GPU.

``widgets/data_parallel.js`` holds the JavaScript twins of the two pure functions below, which
compose :mod:`minipar.cost.chapters.data_parallel` (the DDP schedule of Li et al. 2020) and
:func:`minipar.cost.chapters.memory_time.model_state_bytes` (ZeRO, Rajbhandari et al. 2020);
tests/test_explorer_parity.py checks they agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from minipar.cost.chapters.data_parallel import allreduce_seconds, dp_step_time, forward_backward
from minipar.cost.chapters.memory_time import ZERO_STAGES, model_state_bytes
from minipar.widgets import Explorer, links_config
from minipar.widgets.inputs import check_values

MAX_BUCKETS = 20000
OPTIMIZERS = {"adam-mixed": (2, 2, 12), "adam-fp32": (4, 4, 8), "sgd-fp32": (4, 4, 0)}


@dataclass(frozen=True)
class DPStepControls:
    """The dp-step explorer's controls: ``params_m`` million parameters with gradients of
    ``grad_bytes`` bytes, ``ranks`` GPUs (``gpus_per_node`` a node, ``intra`` and ``inter`` the
    links' names), buckets of ``bucket_mb`` MiB, ``overlap`` of communication with backward,
    ``compute_ms`` of forward + backward."""

    params_m: float = 1000.0
    ranks: int = 64
    intra: str = "nvlink4-h100"
    inter: str = "ib-ndr400"
    bucket_mb: float = 25.0
    overlap: bool = True
    compute_ms: float = 200.0
    grad_bytes: float = 2
    gpus_per_node: int = 8


def dp_step_model(**controls) -> dict:
    """One modelled step: compute split into forward and backward (1/3, 2/3:
    :func:`minipar.cost.chapters.data_parallel.forward_backward`) and each bucket's all-reduce,
    a ring over ``intra`` up to ``gpus_per_node`` GPUs, hierarchical (``inter`` across nodes)
    beyond. The cost model's DPStep fields plus ``efficiency`` and ``buckets``; ``controls``:
    :class:`DPStepControls`'s fields by name, as the JavaScript twin takes the page's controls."""
    c = DPStepControls(**controls)
    params_m, ranks, bucket_mb, compute_ms = c.params_m, c.ranks, c.bucket_mb, c.compute_ms
    if params_m <= 0 or compute_ms <= 0:
        raise ValueError(f"parameters ({params_m} M) and compute ({compute_ms} ms) must be > 0")
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks ({ranks}) must be an integer >= 1")
    total, bucket = params_m * 1e6 * c.grad_bytes, bucket_mb * 2**20
    if bucket > 0 and math.ceil(total / bucket) > MAX_BUCKETS:
        raise ValueError(
            f"buckets ({math.ceil(total / bucket)}) must be <= {MAX_BUCKETS}: "
            "choose a larger bucket"
        )
    ar = allreduce_seconds(ranks, c.gpus_per_node, intra=c.intra, inter=c.inter)
    forward_s, backward_s = forward_backward(compute_ms / 1e3)
    st = dp_step_time(forward_s, backward_s, total, bucket, ar, c.overlap)
    return {**st._asdict(), "efficiency": st.efficiency, "buckets": len(st.intervals)}


def zero_memory_model(params_b: float = 7.5, d: int = 64, optimizer: str = "adam-mixed"):
    """Per-GPU model-state bytes at ZeRO stages 0–3 (Rajbhandari et al. 2020, Fig. 1)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer ({optimizer!r}) must be one of {', '.join(OPTIMIZERS)}")
    if isinstance(d, bool) or not isinstance(d, (int, float)) or int(d) != d or d < 1:
        raise ValueError(f"d ({d}) must be a positive integer")  # the CLI's --dp rule
    w, g, k = OPTIMIZERS[optimizer]
    return [
        model_state_bytes(
            params_b * 1e9, d=d, zero=s, weight_bytes=w, grad_bytes=g, optimizer_bytes=k
        )
        for s in ZERO_STAGES
    ]


def dp_config() -> dict:
    return {"links": links_config()}


def dp_step_explorer(**values):
    """Live explorer of :func:`dp_step_model`; ``values`` override the default controls."""
    check_values("data_parallel", "dp-step", values)  # the page's own input rules
    return Explorer("data_parallel", "dp-step", config=dp_config(), values=values)


def zero_memory_explorer(**values):
    """Live explorer of :func:`zero_memory_model` against a GPU's memory."""
    check_values("data_parallel", "zero-memory", values)  # the page's own input rules
    return Explorer("data_parallel", "zero-memory", values=values)
