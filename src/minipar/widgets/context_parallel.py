"""Explorer for the context-parallel chapter: one attention layer's memory per rank, traffic,
forward time and causal imbalance as the sequence length, cp, the layout and the link vary.

The browser evaluates ``widgets/context_parallel.js``; its model is the JavaScript twin of
:func:`cp_layer_model`, which composes :mod:`minipar.cost.context_parallel` (Liu et al. 2023 for
the ring, Jacobs et al. 2023 for Ulysses, Korthikanti et al. 2022 for the activations).
tests/test_context_parallel_explorer.py checks the twins agree.
"""

from __future__ import annotations

from minipar.cost import context_parallel as C
from minipar.cost.hardware import GPUS, LINKS
from minipar.widgets import Explorer


def cp_layer_model(
    s: int = 131072,
    cp: int = 16,
    layout: str = "zigzag",
    h: int = 16384,
    a: int = 128,
    a_kv: int = 8,
    b: int = 1,
    flops: float = 989.4e12,
    bandwidth: float = 50e9,
    alpha: float = 5e-6,
) -> dict:
    """One layer, bf16 activations, float32 dK/dV accumulators, causal, a causal kernel on the
    diagonal: activation bytes per rank (blockwise attention), bytes a rank sends per layer
    (ring; all-gather; Ulysses, or None when its head rules fail), the ring's forward attention
    time (compute, transfers, with overlap), all-gather CP's (exposed gather, compute), Ulysses'
    all-to-all time, the causal imbalance and the overlap threshold in tokens per rank."""
    C.check_shape(s, cp, layout)
    C._check(h=h, a=a, a_kv=a_kv, b=b)
    if a % a_kv:
        raise ValueError(f"heads ({a}) must be divisible by K/V heads ({a_kv})")
    h_kv = h * a_kv // a
    ring = C.ring_attention_time(
        b,
        s,
        h,
        cp,
        flops=flops,
        bandwidth=bandwidth,
        alpha=alpha,
        layout=layout,
        causal=True,
        h_kv=h_kv,
    )
    gather = C.allgather_attention_time(
        b,
        s,
        h,
        cp,
        flops=flops,
        bandwidth=bandwidth,
        alpha=alpha,
        layout=layout,
        causal=True,
        h_kv=h_kv,
    )
    ulysses_ok = a % cp == 0 and (a_kv % cp == 0 or cp % a_kv == 0)
    return {
        "tokens_per_rank": s / cp,
        "activation_bytes": C.activation_bytes_per_rank(s, b, h, a, cp),
        "ring_bytes": C.ring_sent_bytes_per_layer(b, s, h_kv, cp)["total"],
        "ring_compute": ring["compute"],
        "ring_comm": ring["comm"],
        "ring_time": ring["time"],
        "ring_step": ring["step"],
        "allgather_bytes": C.allgather_sent_bytes_per_layer(b, s, h_kv, cp)["total"],
        "allgather_gather": gather["gather"],
        "allgather_time": gather["time"],
        "ulysses_bytes": C.ulysses_sent_bytes_per_layer(b, s, h, cp, h_kv=h_kv, a_kv=a_kv)["total"]
        if ulysses_ok
        else None,
        "ulysses_time": C.ulysses_time(
            b, s, h, cp, alpha=alpha, bandwidth=bandwidth, h_kv=h_kv, a_kv=a_kv
        )
        if ulysses_ok
        else None,
        "imbalance": C.imbalance(cp, layout),
        "overlap_min_tokens": C.min_tokens_per_rank_for_overlap(
            flops, bandwidth, 2, h_kv / h, True, layout
        ),
    }


def cp_config() -> dict:
    """Links (α, per-direction bandwidth) and GPUs' dense bf16 peaks, from minipar.cost.hardware."""
    return {
        "links": {name: {"alpha": L.alpha, "bandwidth": L.bandwidth} for name, L in LINKS.items()},
        "gpus": {name: g.peak_flops["bf16"] for name, g in GPUS.items()},
    }


def cp_explorer(**values):
    """Live explorer of :func:`cp_layer_model`; ``values`` override the default controls."""
    return Explorer("context_parallel", "cp-layer", config=cp_config(), values=values)
