"""Tensor-parallel cost per transformer layer: collectives, bytes, activations, comm/compute.

Pure Python. Symbols as on the notation page: b micro-batch, s sequence, h hidden, a heads,
t tensor-parallel ranks. Sizes are BYTES unless a name says elements.

* Collectives (Shoeybi et al. 2019, "Megatron-LM", §3, Figure 4): per layer and micro-batch,
  2 all-reduces forward (g after attention and after the MLP) and 2 backward (f before each),
  each on the full (b, s, h) activation. Sequence parallelism (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", §4.2.2) replaces each by an
  all-gather and a reduce-scatter of the same logical size: 4 + 4.
* Bytes a rank sends: ring all-reduce 2(t−1)/t·S, all-gather / reduce-scatter (t−1)/t·S
  (:func:`minipar.cost.network.collectives.ring_bytes_per_rank`), so both variants send the same bytes,
  :func:`tp_bytes_per_layer`.
* Activations: :func:`minipar.cost.chapters.memory_time.activation_bytes_per_layer` (Korthikanti Table 2);
  :func:`activation_items` splits it into the items of §4.1 per rank.
* Comm/compute: forward FLOPs of a layer 24bsh² + 4bs²h (Narayanan et al. 2021, "Efficient
  Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", §5.1 / Appendix),
  divided by t; forward traffic 2 × 2(t−1)/t·bsh·bytes. Their ratio does not depend on b:
  a bigger batch does not amortise tensor-parallel communication (unlike data parallelism,
  whose traffic is the gradients, independent of tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import check_counts as _check
from ..network.collectives import ring_bytes_per_rank


def tp_collectives_per_layer(
    b: int, s: int, h: int, t: int, bytes_per_elem: float = 2, *, sp: bool = False
) -> list[tuple[str, float, int]]:
    """(op, nccl-tests size S in bytes, calls) per layer per micro-batch, forward + backward.

    Without sequence parallelism: ("all-reduce", bsh·bytes, 4); with it ("all-gather", bsh·bytes,
    4) and ("reduce-scatter", bsh·bytes, 4): S is the gathered output / the reduced input.
    For t = 1 the list is empty (every operator is the identity).
    """
    _check(b=b, s=s, h=h, t=t)
    if t == 1:
        return []
    size = b * s * h * bytes_per_elem
    if sp:
        return [("all-gather", size, 4), ("reduce-scatter", size, 4)]
    return [("all-reduce", size, 4)]


def tp_sent_bytes_per_layer(
    b: int, s: int, h: int, t: int, bytes_per_elem: float = 2, *, sp: bool = False
) -> float:
    """Bytes one rank sends per layer per micro-batch (ring algorithms): 4·2(t−1)/t·bsh·bytes,
    the same with or without sequence parallelism when the gathered input is kept (equal to
    :func:`tp_bytes_per_layer`; tests/test_cost_tensor_parallel.py checks it)."""
    return sum(
        calls * ring_bytes_per_rank(op, t, size)
        for op, size, calls in tp_collectives_per_layer(b, s, h, t, bytes_per_elem, sp=sp)
    )


def sp_grad_allreduce_elements(h: int) -> int:
    """Elements of the per-step all-reduce of sequence-parallel gradients in one layer: two
    layer norms (2·2h) and the two row-parallel biases (2h): 6h (model state, once per step,
    not per micro-batch)."""
    _check(h=h)
    return 6 * h


@dataclass(frozen=True)
class ElementBytes:
    """Bytes per element of what a layer saves: activations, dropout masks, layer-norm
    statistics. The defaults are the paper's conventions (Korthikanti §4.1: 16-bit activations,
    1-byte masks, statistics left out); :func:`minipar.memory_time.activations.device_conventions`
    gives a device's as keywords."""

    act_bytes: float = 2
    mask_bytes: float = 1
    stats_bytes: float = 0


PAPER_BYTES = ElementBytes()


def activation_items(
    s: int,
    b: int,
    h: int,
    a: int,
    *,
    t: int = 1,
    sp: bool = False,
    sizes: ElementBytes = PAPER_BYTES,
) -> dict[str, float]:
    """Saved activation bytes per rank for one layer, item by item (Korthikanti §4.1-§4.2).

    Tensor parallelism divides what lies inside the parallel region by t (QKV output, scores,
    softmax, its dropout, projection input, h→4h output, GeLU): 24/t·sbh + 5as²b/t. The layer-norm
    inputs, the inputs of QKV and h→4h (the f outputs), and the two dropout masks after g stay
    whole on every rank (10·sbh), unless sequence parallelism splits them along s.
    With the paper's ``sizes`` (:data:`PAPER_BYTES`) the sum equals
    :func:`minipar.cost.chapters.memory_time.activation_bytes_per_layer`.
    """
    _check(s=s, b=b, h=h, a=a, t=t)
    if a % t:
        raise ValueError(f"heads ({a}) must be divisible by t ({t})")
    sbh, e, mu, stats_bytes = s * b * h, sizes.act_bytes, sizes.mask_bytes, sizes.stats_bytes
    rep = t if sp else 1  # what TP leaves replicated, SP splits along s
    items = {
        "layer-norm inputs (2)": 2 * sbh * e / rep,
        "layer-norm mean and 1/std (2 × 2)": 4 * s * b * stats_bytes / rep,
        "QKV-linear input": sbh * e / rep,
        "Q, K, V": 3 * sbh * e / t,
        "softmax output": a * s * s * b * e / t,
        "attention dropout mask": a * s * s * b * mu / t,
        "attention dropout output": a * s * s * b * e / t,
        "projection input": sbh * e / t,
        "dropout masks after projection and MLP (2)": 2 * sbh * mu / rep,
        "h→4h input": sbh * e / rep,
        "GeLU input": 4 * sbh * e / t,
        "4h→h input (GeLU output)": 4 * sbh * e / t,
    }
    return items


def layer_forward_flops(b: int, s: int, h: int, t: int = 1) -> float:
    """Forward FLOPs of one layer on one rank: (24bsh² + 4bs²h)/t (Narayanan et al. 2021 §5.1)."""
    _check(b=b, s=s, h=h, t=t)
    return (24 * b * s * h * h + 4 * b * s * s * h) / t


def comm_compute_ratio(
    b: int,
    s: int,
    h: int,
    t: int,
    *,
    flops: float,
    bandwidth: float,
    alpha: float = 0.0,
    bytes_per_elem: float = 2,
) -> float:
    """Forward time of a layer's two all-reduces over its GEMM time on one rank, with no overlap.

    Communication 2·(2(t−1)·α + 2(t−1)/t·bsh·bytes/BW) (ring all-reduce, Thakur et al. 2005);
    computation (24bsh² + 4bs²h)/(t·F). For s ≪ 6h and α → 0 this is ≈ (t−1)·bytes·F/(6h·BW):
    independent of b and s, growing with t and with F/BW, shrinking only with h.
    """
    if flops <= 0 or bandwidth <= 0 or alpha < 0:
        raise ValueError(
            f"flops ({flops}) and bandwidth ({bandwidth}) must be > 0, alpha ({alpha}) >= 0"
        )
    if t == 1:
        return 0.0
    msg = b * s * h * bytes_per_elem
    comm = 2 * (2 * (t - 1) * alpha + 2 * (t - 1) / t * msg / bandwidth)
    return comm / (layer_forward_flops(b, s, h, t) / flops)


def layer_comm_fraction(
    b: int,
    s: int,
    h: int,
    t: int,
    *,
    flops: float,
    bandwidth: float,
    alpha: float = 0.0,
    bytes_per_elem: float = 2,
) -> float:
    """Share of a layer's forward + backward time spent in its four all-reduces when nothing
    overlaps. Backward does twice the forward FLOPs and the same two all-reduces, so over the
    whole pass the ratio is r·2/3 with r = :func:`comm_compute_ratio`; the share is x/(1 + x)."""
    kw = dict(flops=flops, bandwidth=bandwidth, alpha=alpha, bytes_per_elem=bytes_per_elem)
    x = 2 * comm_compute_ratio(b, s, h, t, **kw) / 3
    return x / (1 + x)


def tp_bytes_per_layer(b: int, s: int, h: int, t: int, bytes_per_elem: float = 2) -> float:
    """Bytes one rank sends per transformer layer per micro-batch under Megatron tensor parallelism.

    Shoeybi et al. 2019 (Megatron-LM) §3, Fig. 4: each layer does 2 all-reduces in forward (g
    after attention and after the MLP) and 2 in backward (f before each), every one on the (b, s, h)
    activation; a ring all-reduce sends 2(t−1)/t·bsh·bytes per rank. Total 4 × that. Sequence
    parallelism replaces each all-reduce by an all-gather + reduce-scatter: same bytes.
    """
    if t < 1:
        raise ValueError(f"t ({t}) must be >= 1")
    return 4 * 2 * (t - 1) / t * b * s * h * bytes_per_elem
