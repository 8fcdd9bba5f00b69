"""Modelled data-parallel scaling at cluster sizes a CPU cannot run, and the staleness toy.

Every number comes from :mod:`minipar.cost`: compute from 6·Ψ·T at
:data:`minipar.cost.chapters.data_parallel.ACHIEVED_FLOPS`, the 1 : 2 forward/backward split, link
presets from :data:`minipar.cost.kernels.hardware.LINKS`, the all-reduce from
:func:`minipar.cost.chapters.data_parallel.allreduce_seconds` (ring inside a node of 8 GPUs; across nodes
a flat ring or NCCL's double binary tree).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from minipar.cost.chapters.data_parallel import (
    allreduce_seconds,
    compute_seconds,
    dp_step_time,
    forward_backward,
)


class Scenario(NamedTuple):
    params: float  # Ψ
    grad_bytes: float  # bytes per gradient element (bf16: 2)
    tokens_per_gpu: int  # T, weak scaling: fixed per GPU
    inter: str  # inter-node link preset
    bucket_mib: float
    overlap: bool
    inter_algorithm: str = "ring"


# 1.3B parameters, bf16 gradients, 25 MiB buckets (DDP's default): 100 buckets per step.
DEFAULT_SCENARIOS = {
    "16k tokens/GPU, IB NDR, overlap": Scenario(1.3e9, 2, 16384, "ib-ndr400", 25, True),
    "2k tokens/GPU, IB NDR, overlap": Scenario(1.3e9, 2, 2048, "ib-ndr400", 25, True),
    "2k tokens/GPU, IB NDR, tree across nodes": Scenario(
        1.3e9, 2, 2048, "ib-ndr400", 25, True, "double-binary-tree"
    ),
    "2k tokens/GPU, IB NDR, no overlap": Scenario(1.3e9, 2, 2048, "ib-ndr400", 25, False),
    "2k tokens/GPU, 100 GbE, overlap": Scenario(1.3e9, 2, 2048, "eth-100g", 25, True),
}


def scaling_curves(ns=(8, 64, 512), scenarios=None) -> dict:
    """Modelled efficiency (compute / step time) per scenario at each GPU count (weak scaling:
    a fixed batch per GPU). n ≤ 8 is one node: NVLink only, the inter-node link plays no part."""
    scenarios = scenarios or DEFAULT_SCENARIOS
    out = {}
    for name, sc in scenarios.items():
        sc = Scenario(*sc)
        f, b = forward_backward(compute_seconds(sc.params, sc.tokens_per_gpu))
        grad, bucket = sc.params * sc.grad_bytes, sc.bucket_mib * 2**20
        kw = dict(inter=sc.inter, inter_algorithm=sc.inter_algorithm)
        out[name] = [
            dp_step_time(f, b, grad, bucket, allreduce_seconds(n, **kw), sc.overlap).efficiency
            for n in ns
        ]
    return out


def stale_sgd(staleness=(0, 1, 4, 16), steps=200, lr=8.0, seed=0) -> dict:
    """{τ: losses} of SGD on a random least-squares problem where each update uses the gradient
    computed τ steps earlier (what an asynchronous worker whose gradient arrives late applies)."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(64, 16, generator=g) / 8  # (samples, features)
    b = torch.randn(64, generator=g)
    out = {}
    for tau in staleness:
        w, history, losses = torch.zeros(16), [], []
        for _ in range(steps):
            history.append(w.clone())
            old = history[max(0, len(history) - 1 - tau)]  # parameters τ steps ago
            grad = A.T @ (A @ old - b) / len(b)
            w = w - lr * grad
            losses.append(0.5 * ((A @ w - b) ** 2).mean().item())
        out[tau] = losses
    return out
