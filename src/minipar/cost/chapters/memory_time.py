"""Bytes per device: model states under ZeRO, and activations under tensor/sequence parallelism.

Model states (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", §3.1 and §5): mixed-precision Adam keeps 2Ψ bytes of fp16 weights, 2Ψ of fp16
gradients and KΨ = 12Ψ of optimizer state (fp32 master weights, momentum, variance: 4+4+4).
Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", §4 and Table 2, 16-bit activations with 1-byte dropout masks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..model import ATTENTION, RECOMPUTE, check_attention, check_positive, fused  # noqa: F401  (re-exported)

ZERO_STAGES = (0, 1, 2, 3)


def check_zero_stage(stage) -> int:
    """``stage`` if it is a ZeRO stage (0–3), else ValueError naming it: the one check that the
    cost model, the traffic model and :class:`minipar.data_parallel.ZeRO` share."""
    if stage not in ZERO_STAGES:
        raise ValueError(f"ZeRO stage ({stage}) must be 0, 1, 2 or 3")
    return stage


class ModelStateBytes(NamedTuple):
    weights: float
    gradients: float
    optimizer: float
    total: float


def model_state_bytes(
    psi: float,
    *,
    d: int = 1,
    t: int = 1,
    p: int = 1,
    zero: int = 0,
    weight_bytes: float = 2,
    grad_bytes: float = 2,
    optimizer_bytes: float = 12,
) -> ModelStateBytes:
    """Per-device bytes of weights, gradients and optimizer state for Ψ = ``psi`` parameters.

    Tensor and pipeline parallelism split the model first (each device holds Ψ/(t·p)); ZeRO then
    shards over the d data-parallel replicas (ZeRO §5, Figure 1):
      stage 0  (plain data parallelism)   (w + g + K)·Ψ'
      stage 1  P_os:     optimizer / d      (w + g)·Ψ' + K·Ψ'/d
      stage 2  P_os+g:   + gradients / d    w·Ψ' + (g + K)·Ψ'/d
      stage 3  P_os+g+p: + weights / d      (w + g + K)·Ψ'/d
    with Ψ' = Ψ/(t·p). Defaults are mixed-precision Adam (w = g = 2, K = 12). Plain fp32 Adam is
    ``weight_bytes=4, grad_bytes=4, optimizer_bytes=8`` (exp_avg + exp_avg_sq, no master copy).
    Ignores buffers, fragmentation and activations (ZeRO's "residual states").
    """
    check_zero_stage(zero)
    check_positive(psi=psi, d=d, t=t, p=p)
    for k, v in (
        ("weight_bytes", weight_bytes),
        ("grad_bytes", grad_bytes),
        ("optimizer_bytes", optimizer_bytes),
    ):
        if v < 0:
            raise ValueError(f"{k} ({v}) must be >= 0")
    local = psi / (t * p)  # parameters on this model shard
    w = weight_bytes * local / (d if zero >= 3 else 1)
    g = grad_bytes * local / (d if zero >= 2 else 1)
    o = optimizer_bytes * local / (d if zero >= 1 else 1)
    return ModelStateBytes(w, g, o, w + g + o)


def activation_bytes_per_layer(
    s: int,
    b: int,
    h: int,
    a: int,
    *,
    t: int = 1,
    sp: bool = False,
    recompute: str = "none",
    attention: str = "unfused",
) -> float:
    """Activation bytes one transformer layer keeps for the backward pass of one micro-batch.

    Korthikanti et al. 2022, Table 2 (sbh = s·b·h):
      no parallelism                       sbh(34 + 5as/h)
      tensor parallel t                    sbh(10 + 24/t + 5as/(ht))
      tensor + sequence parallel           sbh/t · (34 + 5as/h)
      selective recomputation              drop the 5as/h term (attention scores, softmax,
                                           its dropout mask and output: 5as²b bytes)
      full recomputation                   2sbh (the 16-bit layer input only; sbh·2/t with sp)
    The 34 = 11 attention + 19 MLP + 4 layer-norm inputs; the 10 of them that tensor parallelism
    leaves replicated are the two layer-norm inputs (4sbh), the inputs of the first GEMM after
    each layer norm (QKV and MLP up-projection, 4sbh) and the two 1-byte dropout masks after
    attention and after the MLP (2sbh) (Korthikanti et al. §4.2.2); sequence parallelism shards
    them along s.

    ``attention="flash"`` (Dao et al. 2022, "FlashAttention", §3.1) never materialises the
    scores: the 5as²b/t term goes, and the kernel keeps for its backward only its output (the
    projection's input, already among the 34) and one fp32 logsumexp per row and head,
    4·a·s·b/t bytes. With selective or full recomputation the attention core is recomputed
    either way, so flash changes nothing there.
    """
    check_positive(s=s, b=b, h=h, a=a, t=t)
    if a % t:
        raise ValueError(f"heads ({a}) must be divisible by t ({t})")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute ({recompute!r}) must be one of {', '.join(RECOMPUTE)}")
    check_attention(attention)
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    if recompute == "selective":
        scores = 0.0
    elif fused(attention):  # "flash" or "fa3"
        scores = 4 * a / (h * t)  # the logsumexp: 4·a·s·b/t bytes = sbh · 4a/(ht)
    else:
        scores = 5 * a * s / (h * t)
    if sp:
        return sbh * (34 / t + scores)
    return sbh * (10 + 24 / t + scores)


@dataclass(frozen=True)
class StageLayout:
    """The keywords of :func:`pipeline_first_stage_activation_bytes`: micro-batches in flight
    ``m`` (``None``: m ≥ p), the TP degree, sequence parallelism, the recomputation, the
    schedule, its chunks v and the attention kernel."""

    m: int | None = None
    t: int = 1
    sp: bool = False
    recompute: str = "none"
    schedule: str = "1f1b"
    v: int = 1
    attention: str = "unfused"


def pipeline_first_stage_activation_bytes(
    s: int, b: int, h: int, a: int, L: int, p: int, **layout
) -> float:
    """Activation bytes on the first pipeline stage, the one that holds the most; ``layout``:
    the keywords of :class:`StageLayout` (``m``, ``t``, ``sp``, ``recompute``, ``schedule``,
    ``v``, ``attention``).

    Each stage has L/p layers. Under 1F1B the first stage has min(p, m) micro-batches in flight,
    so it stores min(p, m)·(L/p) layers' worth: L layers when m ≥ p, whatever p is (Narayanan et
    al. 2021 §2.2.1; Korthikanti et al. 2022 §4.2.3). GPipe keeps all m micro-batches until the
    backward starts: m·L/p layers (Huang et al. 2019). The interleaved schedule with v chunks
    per device multiplies the 1F1B figure by 1 + (p−1)/(p·v) (Korthikanti §4.2.3, Eq. 5, whose
    "m" is our v). ``m=None`` means m ≥ p. Embedding and output-layer activations are left out
    (Korthikanti §4.3 finds them negligible). ``attention`` as in
    :func:`activation_bytes_per_layer`.
    """
    o = StageLayout(**layout)
    m, schedule, v = o.m, o.schedule, o.v
    if L <= 0 or p <= 0 or L % p:
        raise ValueError(f"layers ({L}) must be divisible by p ({p})")
    per_layer = activation_bytes_per_layer(
        s, b, h, a, t=o.t, sp=o.sp, recompute=o.recompute, attention=o.attention
    )
    in_flight = p if m is None else m
    if in_flight <= 0:
        raise ValueError(f"microbatches m ({m}) must be >= 1")
    if schedule == "gpipe":
        return per_layer * (L // p) * in_flight
    if schedule == "1f1b":
        return per_layer * (L // p) * min(p, in_flight)
    if schedule == "interleaved":
        if v < 1 or L % (p * v):
            raise ValueError(f"layers ({L}) must be divisible by p·v ({p}·{v})")
        return per_layer * L * (1 + (p - 1) / (p * v))
    raise ValueError(f"schedule ({schedule!r}) must be one of gpipe, 1f1b, interleaved")
