"""Step time of data-parallel training with bucketed all-reduce overlapped with backward.

Model (the schedule of PyTorch DDP, Li et al. 2020, "PyTorch Distributed", PVLDB 13(12),
§3.2.3): forward takes t_f seconds and backward t_b. Gradients of S bytes are cut into buckets
of at most ``bucket_bytes`` in the order backward produces them; we assume they are produced at
a constant rate, so the bucket that completes the first c bytes is ready at t_f + t_b·c/S.
Buckets are reduced one at a time, in order, on one communication channel:

    start_i = max(ready_i, end_{i−1}),  end_i = start_i + T_ar(size_i),
    step = max(t_f + t_b, end_last)

and without overlap every all-reduce waits for the end of backward. T_ar is any all-reduce cost,
e.g. ``collective_time("all-reduce", "ring", n, size, α, bandwidth)`` (Thakur et al. 2005): its
2(n−1)α term is paid once per bucket, which is why tiny buckets are latency-bound, and its
2(n−1)/n·S/bandwidth term is why huge buckets (one bucket = no overlap) expose all of it.
The optimizer step and any compute slowdown caused by communication are ignored.

Compute per step comes from the model, not from constants sprinkled in notebooks and widgets:
:func:`compute_seconds` is 6·Ψ·T FLOPs (T tokens per GPU; Kaplan et al. 2020, §2.1) at an
achieved rate, and :func:`forward_backward` splits it 1 : 2 (backward computes the gradients
with respect to both inputs and weights, twice the forward's matrix products; Narayanan et al.
2021, §3.5). When is the all-reduce hidden behind backward? With a flat ring of per-direction
bandwidth W and q bytes per gradient, communication takes about 2qΨ/W (the latency terms
neglected) and backward (2/3)·6ΨT/F_eff; hiding needs T ≥ q·F_eff/(2W), i.e. T ≥ F_eff/W tokens
per GPU for bf16 gradients (:func:`min_tokens_to_hide`). The latency terms then decide the rest:
a flat ring pays 2(N−1)α per bucket, a tree 2⌈log2 N⌉α.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from ..kernels.hardware import link
from ..model import six_nd
from ..network.collectives import collective_time, hierarchical_all_reduce_time
from .memory_time import check_zero_stage


class DPStep(NamedTuple):
    step_s: float  # wall time of one step
    compute_s: float  # t_f + t_b
    comm_s: float  # sum of all-reduce times
    exposed_s: float  # step_s − compute_s: communication not hidden by backward
    intervals: list  # [(start_s, end_s), ...] of each bucket's all-reduce

    @property
    def efficiency(self) -> float:
        """compute / step: the fraction of the ideal (n× one rank) throughput achieved."""
        return self.compute_s / self.step_s


def bucket_sizes(total_bytes: float, bucket_bytes: float) -> list[float]:
    """``total_bytes`` cut into ⌈total/bucket⌉ buckets of ``bucket_bytes`` (the last smaller)."""
    if total_bytes <= 0 or bucket_bytes <= 0:
        raise ValueError(
            f"gradient bytes ({total_bytes}) and bucket bytes ({bucket_bytes}) must be > 0"
        )
    k = math.ceil(total_bytes / bucket_bytes)
    return [bucket_bytes] * (k - 1) + [total_bytes - bucket_bytes * (k - 1)]


def dp_step_time(
    forward_s: float,
    backward_s: float,
    grad_bytes: float,
    bucket_bytes: float,
    allreduce_s: Callable[[float], float],
    overlap: bool = True,
) -> DPStep:
    """One data-parallel step under the bucketed-overlap model above.

    ``allreduce_s(nbytes)`` gives the seconds of one all-reduce of ``nbytes``.
    """
    if forward_s < 0 or backward_s < 0:
        raise ValueError(f"forward ({forward_s}) and backward ({backward_s}) seconds must be >= 0")
    sizes = bucket_sizes(grad_bytes, bucket_bytes)
    end, done, intervals = 0.0, 0.0, []
    for size in sizes:
        done += size
        ready = forward_s + backward_s * (done / grad_bytes if overlap else 1.0)
        start = max(ready, end)
        end = start + allreduce_s(size)
        intervals.append((start, end))
    compute = forward_s + backward_s
    step = max(compute, end)
    comm = sum(e - s for s, e in intervals)
    return DPStep(step, compute, comm, step - compute, intervals)


ACHIEVED_FLOPS = 400e12
"""FLOP/s per GPU the course's scaling examples assume: about 40 % of an H100 SXM's dense bf16
peak (989 TFLOP/s, :data:`minipar.cost.kernels.hardware.GPUS`), a typical MFU for well-tuned training."""


def forward_backward(compute_s: float) -> tuple[float, float]:
    """(forward, backward) seconds of a step that computes for ``compute_s``: 1/3 and 2/3
    (backward ≈ 2 × forward FLOPs; Kaplan et al. 2020 §2.1, Narayanan et al. 2021 §3.5)."""
    if compute_s < 0:
        raise ValueError(f"compute seconds ({compute_s}) must be >= 0")
    return compute_s / 3, 2 * compute_s / 3


def compute_seconds(
    params: float, tokens_per_gpu: float, flops_per_s: float = ACHIEVED_FLOPS
) -> float:
    """Seconds of forward + backward on one GPU: 6·Ψ·T FLOPs (:func:`minipar.cost.model.six_nd`)
    at ``flops_per_s`` achieved. E.g. Ψ = 1.3e9, T = 2048: 6·1.3e9·2048/400e12 = 0.040 s."""
    if flops_per_s <= 0:
        raise ValueError(f"flops_per_s ({flops_per_s}) must be > 0")
    return six_nd(params, tokens_per_gpu) / flops_per_s


def min_tokens_to_hide(flops_per_s: float, bandwidth: float, grad_bytes: float = 2) -> float:
    """Tokens per GPU above which a ring all-reduce's bandwidth term fits inside backward.

    Ring all-reduce of q·Ψ bytes moves 2(N−1)/N·qΨ ≈ 2qΨ bytes per direction per GPU: about
    2qΨ/W seconds. Backward is 2/3 of 6ΨT/F_eff = 4ΨT/F_eff. Hidden when 4ΨT/F_eff ≥ 2qΨ/W,
    i.e. T ≥ q·F_eff/(2W); for bf16 gradients (q = 2), T ≥ F_eff/W. Ψ cancels; latency (α per
    message) and bucket count are neglected, so this is necessary, not sufficient.
    """
    if flops_per_s <= 0 or bandwidth <= 0 or grad_bytes <= 0:
        raise ValueError(
            f"flops_per_s ({flops_per_s}), bandwidth ({bandwidth}) and grad_bytes "
            f"({grad_bytes}) must be > 0"
        )
    return grad_bytes * flops_per_s / (2 * bandwidth)


def allreduce_seconds(
    n: int,
    gpus_per_node: int = 8,
    intra: str = "nvlink4-h100",
    inter: str = "ib-ndr400",
    inter_algorithm: str = "ring",
) -> Callable[[float], float]:
    """``nbytes -> seconds`` of one all-reduce over n GPUs: a ring over the ``intra`` link
    inside one node (n ≤ gpus_per_node), else the hierarchical all-reduce (ring reduce-scatter in
    each node, all-reduce across nodes over ``inter``, all-gather in each node; see
    :func:`minipar.cost.network.collectives.hierarchical_all_reduce_time`). n must then be a multiple of
    ``gpus_per_node``. Link presets: :data:`minipar.cost.kernels.hardware.LINKS`.

    The across-node step is a flat ring by default: its latency 2(N−1)α grows with the number of
    nodes N and is paid once per bucket (with α = 5 µs, 64 nodes and 100 buckets: 63 ms per step).
    ``inter_algorithm="double-binary-tree"`` (what NCCL uses across nodes at scale) pays
    2⌈log2 N⌉α instead.
    """
    a, b = link(intra), link(inter)
    if n <= gpus_per_node:
        return lambda s: collective_time("all-reduce", "ring", n, s, a.alpha, a.bandwidth)
    if n % gpus_per_node:
        raise ValueError(
            f"ranks n ({n}) must be a multiple of gpus_per_node ({gpus_per_node}) beyond one node"
        )
    return lambda s: hierarchical_all_reduce_time(
        n // gpus_per_node, gpus_per_node, s, a, b, inter_algorithm
    )


# --- bytes each rank sends per step (what one rank puts on its outgoing link) ---------------


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"ranks n ({n}) must be an integer >= 1")


def dp_allreduce_bytes_per_rank(grad_bytes_total: float, n: int) -> float:
    """Ring all-reduce of all gradients over n data-parallel ranks: 2(n−1)/n·S bytes sent.

    Patarasuk & Yuan 2009; it tends to 2S, independent of n (unlike a parameter server).
    """
    _check_n(n)
    return 2 * (n - 1) / n * grad_bytes_total


def zero_bytes_per_rank(stage: int, param_bytes: float, n: int) -> float:
    """Bytes one rank sends per step under ZeRO stage 0–3 over n ranks (Rajbhandari et al. 2020 §7).

    Stages 0–2: 2(n−1)/n·S — a reduce-scatter of gradients then an all-gather of updated
    parameters (stage 0 calls the pair an all-reduce; stages 1 and 2 keep only their shard).
    Stage 3: 3(n−1)/n·S — all-gather parameters in forward, again in backward, and
    reduce-scatter gradients: 1.5× data parallelism. S = ``param_bytes`` (Ψ × bytes per element
    of the communicated dtype).
    """
    _check_n(n)
    check_zero_stage(stage)
    return (3 if stage == 3 else 2) * (n - 1) / n * param_bytes
