"""Time of one transformer layer's computation on one GPU: a roofline per kernel.

Pure Python. Two rules for a GEMM (M, N, K) of 16-bit operands, chosen per GPU by
``GPU.gemm_rule`` (every preset uses "additive"; "waves", the 2021 rule, is the default of a
bare :class:`~minipar.cost.kernels.hardware.GPU`):

    "waves"     max(2MNK / (P · η · q(M, N)),  2(MK + KN + MN) / W)
    "additive"  λ + 2MNK / (P · η) + 2(MK + KN + MN) / W

* P is the dense bf16 peak, W the HBM bandwidth, η (``GPU.gemm_efficiency``) the fraction of
  P a large, well-shaped GEMM sustains (one constant per GPU model, :mod:`minipar.cost.kernels.hardware`).
* "waves" is the roofline (Williams, Waterman & Patterson 2009, "Roofline: an insightful visual
  performance model", CACM 52(4)) with tile and wave quantisation q (NVIDIA, "Matrix
  Multiplication Background User's Guide"): the output is cut into ``TILE_M × TILE_N`` tiles
  that run in waves of one tile per SM, ``q = useful tiles / (waves · SMs)``.
* "additive" is what one H200 measured (``measurements/h200_layer_gemm_times.json``, the 72
  dense GEMMs of six Megatron layers). The wave rule charged (2048, 4608, 12288) three waves
  of 132 tiles, +50 % at η = 0.70, where cuBLAS ran it at 758 TFLOP/s: cuBLAS chooses among
  many tile shapes (and split-K kernels) per shape, so a partial last wave is rarely idle.
  What the measurements show instead are three costs that do not overlap: a fixed λ per call
  (launch, filling and draining the tile pipeline; ``GPU.gemm_latency_s``), the math at the
  measured ceiling P·η, and the compulsory HBM traffic (each operand read once, the output
  written once), which a GEMM with few K steps per output tile cannot hide behind its math
  ((2048, 6144, 768) ran at 406 TFLOP/s, (2048, 4608, 12288) at 758). η and W are measured
  directly (an 8192³ GEMM, a 2 GiB copy); λ is the one constant fitted on the dense GEMMs
  (:mod:`minipar.cost.validation.kernel_fit`).
* The batched GEMMs of unfused attention, QKᵀ b·a/t × (s, s, h/a) and attention·V b·a/t ×
  (s, h/a, s), do h/a FLOPs per byte, below the ridge point P·η/W (184 FLOP/byte on the H200),
  so they are memory-bound; measured, they moved their bytes at their own bandwidth
  ``GPU.bmm_bandwidth`` after a fixed ``GPU.bmm_latency_s`` per call (:func:`bmm_seconds`).
  Unset (None), they follow the GPU's GEMM rule like every other GEMM.
* The memory-bound kernels are the ones Megatron-LM runs between the GEMMs (layer norms, fused
  bias-GeLU, fused bias-dropout-add, the attention scores' softmax and dropout) and the fp32
  accumulation of each weight gradient; their bytes are counted item by item in
  :func:`layer_memory_bytes`. ``GPU.layer_overhead_s`` adds a fixed time per layer forward +
  backward: what a whole layer took beyond its kernels' modelled times (the gaps between
  dozens of small kernels, the layout copies and bias gradients the byte count leaves out),
  fitted on whole layers; 0 for the published-run presets. The planner replaces both wherever
  the GPU has an element-wise rate (``GPU.elementwise_bandwidth``): the recipe's own kernels
  (:func:`elementwise_kernels`), each at max(issue time, traffic) (:func:`elementwise_seconds`).
* Attention is an explicit input (``attention=``): "unfused" materialises the b·a/t·s² scores
  (QKᵀ, softmax, dropout, attention·V as separate kernels, ``GPU.attention_score_bytes`` per
  score over a forward + backward); "flash" (Dao et al. 2022, "FlashAttention"; Dao 2023,
  "FlashAttention-2") keeps the scores on chip: no per-score bytes, and its FLOPs
  (:func:`flash_attention_flops`) at the measured rate ``GPU.flash_efficiency`` · P. Unfused,
  the scores per FLOP fall as a/h², so the per-score bytes weigh on small models
  (:data:`minipar.cost.kernels.hardware.A100_SCORE_BYTES`) without any per-model constant.

tests/test_cost_compute_h200.py holds the model to the H200 calibration file's GEMMs and layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from ..model import ATTENTION, check_attention, fused  # noqa: F401  (one list, re-exported)

TILE_M, TILE_N = 256, 128  # cuBLAS's largest Ampere/Hopper tile (CUTLASS 256×128)
GEMM_RULES = ("waves", "additive")
SCORE_BYTES_FWD, SCORE_BYTES_BWD = 9, 11  # Megatron's fused scale-mask-softmax + dropout
FLASH_BACKWARD = 2.5  # FlashAttention-2's backward / forward FLOPs (scores recomputed)

FA3_EFFICIENCY = 0.52
"""FlashAttention-3's (or cuDNN's fused attention on Hopper) forward + backward FLOP/s over the
bf16 dense peak: ASSUMED from the paper, no file here measures it (Shah et al. 2024,
"FlashAttention-3", Figs. 5 and 7: bf16, head dim 128, causal, 8K-16K tokens, about
640 TFLOP/s forward and 475 backward on an H100 SXM; with the backward's 2.5 × the forward's
FLOPs, 3.5/(1/640 + 2.5/475) = 513 TFLOP/s, 0.52 of 989). "flash" (FlashAttention-2 / SDPA)
keeps the GPU's measured ``flash_efficiency`` (0.40 on the H200)."""

FP8_GEMM_EFFICIENCY = 0.87
"""ρ: an FP8 GEMM's rate as a fraction of (FP8 dense peak × the GPU's bf16 η), so an FP8 GEMM
runs at ``peak_flops["fp8"]`` · η · ρ. Fitted on one calibration row
(:mod:`minipar.cost.validation.modern_fit`: torchtitan's Llama 3.1 8B, 8 GPUs, torch.compile
and torchao Float8, December 2024), the other constants of that fit held; no other row of
``published_modern.json`` set it. NVIDIA's FP8 GEMM peak is twice the bf16 one on Hopper; a
ρ below 1 says FP8 GEMMs reach a smaller fraction of their peak (shorter K loops per byte,
the scaling epilogue)."""

FP8_ROWWISE_GEMM_RATIO = 0.90
"""An FP8 GEMM with rowwise scales (one per row of each operand) over the same GEMM with one
scale per tensor, in rate: on an H100 PyTorch's ``_scaled_mm`` runs the tensorwise case in
cuBLAS and the rowwise case in its own CUTLASS kernel, whose latency, measured over the power-of-
two shapes from 512 to 16384, is within 90-100 % of the tensorwise rate for most shapes with fast
accumulation, with a tail to 50 % (a benchmark table reported to PyTorch in February 2025 under
the title "Fp8 scaled-mm row-wise is substantially slower than tensor-wise"; torchao's
``Float8LinearRecipeName`` calls the tensorwise recipe the fastest). The lower end of the common
range, 0.90, is taken: a kernel microbenchmark, not a training row, so no row of the validation
sets set it. The backward's
slow-accumulation GEMMs were slower still (torchao worked around them with the cuBLAS kernel and
a separate rescaling kernel, pytorch/ao pull request 1325), which this ratio does not price:
an ASSUMPTION on the optimistic side. Rowwise runs at ``peak_flops["fp8"]`` · η ·
:data:`FP8_GEMM_EFFICIENCY` · this ratio."""

COMPILED_TRAFFIC = 0.56
"""κ: the fraction of the eager element-wise kernels' bytes a compiled step still moves
(torch.compile's Inductor or Megatron/Transformer Engine's fused kernels fuse chains of
element-wise ops, so intermediate tensors are not written and read back), at the GPU's
achieved HBM rate and with no per-kernel issue time (CUDA graphs or compiled regions hide the
launches). Fitted on one calibration row (:mod:`minipar.cost.validation.modern_fit`:
torchtitan's Llama 3.1 8B, 8 GPUs, torch.compile, bf16, December 2024)."""

FP8_SCALING = ("delayed", "current", "rowwise", "mxfp8")
"""FP8 scaling recipes: "delayed" (Transformer Engine's ``DelayedScaling``, Megatron's default
FP8 recipe: the scale from an amax history, the amax computed inside the cast), "current"
(tensorwise dynamic scaling: torchao's Float8 default, Megatron's ``fp8-cs``: an amax pass over
the tensor before its cast) and "rowwise" (torchao's ``rowwise`` recipe: one scale per row of
each GEMM operand, along the dimension the GEMM contracts, so each tensor is cast once per GEMM
it enters, :data:`FP8_RECAST_BYTES`). The tensorwise recipes' GEMMs run at the FP8 rate
(:data:`FP8_GEMM_EFFICIENCY`, fitted on a tensorwise row); rowwise GEMMs at that rate times
:data:`FP8_ROWWISE_GEMM_RATIO` (its own constant, from a kernel benchmark). "mxfp8" (Transformer
Engine's ``MXFP8BlockScaling``; the OCP "Microscaling Formats (MX) Specification v1.0": blocks
of 32 elements along the contracted dimension share one 8-bit power-of-two scale) needs a
Blackwell GPU (:func:`check_fp8_gpu`), whose tensor cores apply the block scales at the FP8
rate: its GEMMs run at the same FP8 rate, an ASSUMPTION (no MXFP8 row was measured here)."""

FP8_CAST_BYTES = {"delayed": 4, "current": 6, "rowwise": 3, "mxfp8": 4 + 2 / 32}
"""Bytes moved per element to cast one GEMM input to FP8: read the 16-bit tensor (2), write the
FP8 copy (1) and its transposed FP8 copy for the other GEMM of the backward (1; Hopper's FP8
GEMMs take only the TN layout); current scaling first reads the tensor once more for its amax
(2). Transformer Engine, "Using FP8 with Transformer Engine" (the cast-transpose kernels);
torchao ``float8`` (tensorwise dynamic scaling). Rowwise: the cast along rows for the first
GEMM the tensor enters, its per-row amax in the same kernel (a row is one block): read 2,
write 1; the second cast is :data:`FP8_RECAST_BYTES`. MXFP8: one kernel reads the 16-bit tensor
(2) and writes it blocked along rows and along columns (1 + 1), each copy with one scale byte
per 32 elements (2/32), each block's amax in the same pass (Transformer Engine, "Using FP8 with
Transformer Engine", MXFP8: the columnwise copy feeds the backward GEMM that contracts the
other dimension)."""

FP8_RECAST_BYTES = {"delayed": 0, "current": 0, "rowwise": 5, "mxfp8": 0}
"""Bytes per element of the second cast rowwise scaling needs, in the backward: the other GEMM
of the backward contracts the tensor's other dimension, whose scales a row-wise cast does not
give, so the 16-bit tensor (kept) is cast again along its columns: a column amax pass (read 2)
then the cast (read 2, write 1). torchao ``float8`` README, the "rowwise" recipe (axiswise
scaling of every operand along its contracted dimension). The tensorwise recipes transpose the
one FP8 copy instead (:data:`FP8_CAST_BYTES`): 0; MXFP8 writes both blockings in its one cast: 0."""


class LayerTime(NamedTuple):
    gemm_s: float  # matrix kernels: GEMMs, attention's batched GEMMs or flash kernel
    memory_s: float  # memory-bound kernels and the fixed overhead (GPU.layer_overhead_s)

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.memory_s


def _positive(**kw) -> None:
    for k, v in kw.items():
        if not v > 0:
            raise ValueError(f"{k} ({v}) must be > 0")


def wave_efficiency(M: int, N: int, sms: int) -> float:
    """q(M, N): useful output elements over the elements the GPU's tile waves compute.

    ⌈M/256⌉·⌈N/128⌉ tiles run ⌈tiles/SMs⌉ waves of ``sms`` tiles each (NVIDIA, "Matrix
    Multiplication Background User's Guide", tile and wave quantisation)."""
    _positive(M=M, N=N, sms=sms)
    tiles = math.ceil(M / TILE_M) * math.ceil(N / TILE_N)
    waves = math.ceil(tiles / sms)
    return (M * N) / (waves * sms * TILE_M * TILE_N)


@dataclass(frozen=True)
class GemmRate:
    """The keywords of :func:`gemm_seconds`: the dense peak, η, the HBM bandwidth, the SMs, the
    GEMMs batched together, the bytes per element, the rule and its per-call latency."""

    peak: float
    efficiency: float
    hbm: float
    sms: int
    batch: int = 1
    bytes_per_elem: float = 2
    rule: str = "waves"
    latency: float = 0.0


def gemm_seconds(M: int, N: int, K: int, **rate) -> float:
    """Seconds of ``batch`` GEMMs (M×K)·(K×N) on one GPU under ``rule`` (module docstring;
    ``rate``: the keywords of :class:`GemmRate`):

    "waves"     max(F / (peak·η·q), bytes / hbm); a batched GEMM shares its waves (the tiles
                of all ``batch`` products are scheduled together);
    "additive"  latency + F / (peak·η) + bytes / hbm, one ``latency`` per call,
    with F = 2·batch·MNK and bytes = batch·(MK + KN + MN)·``bytes_per_elem``."""
    r = GemmRate(**rate)
    peak, efficiency, hbm, sms, batch = r.peak, r.efficiency, r.hbm, r.sms, r.batch
    bytes_per_elem, rule, latency = r.bytes_per_elem, r.rule, r.latency
    _positive(M=M, N=N, K=K, peak=peak, efficiency=efficiency, hbm=hbm, sms=sms, batch=batch)
    flops = 2.0 * batch * M * N * K
    moved = batch * (M * K + K * N + M * N) * bytes_per_elem
    if rule == "additive":
        if latency < 0:
            raise ValueError(f"latency ({latency}) must be >= 0")
        return latency + flops / (peak * efficiency) + moved / hbm
    if rule != "waves":
        raise ValueError(f"rule ({rule!r}) must be one of {', '.join(GEMM_RULES)}")
    tiles = batch * math.ceil(M / TILE_M) * math.ceil(N / TILE_N)
    q = batch * M * N / (math.ceil(tiles / sms) * sms * TILE_M * TILE_N)
    return max(flops / (peak * efficiency * q), moved / hbm)


def bmm_seconds(
    M: int,
    N: int,
    K: int,
    *,
    batch: int,
    bandwidth: float,
    latency: float = 0.0,
    bytes_per_elem: float = 2,
) -> float:
    """``batch`` memory-bound GEMMs (attention's QKᵀ and attention·V, K or N = h/a):
    latency + batch·(MK + KN + MN)·bytes / bandwidth, the bytes each operand and output take
    once; ``bandwidth`` and ``latency`` are the GPU's measured ``bmm_bandwidth`` and
    ``bmm_latency_s`` (module docstring)."""
    _positive(M=M, N=N, K=K, batch=batch, bandwidth=bandwidth)
    if latency < 0:
        raise ValueError(f"latency ({latency}) must be >= 0")
    return latency + batch * (M * K + K * N + M * N) * bytes_per_elem / bandwidth


def fp8_peak(gpu) -> float:
    """The GPU's dense FP8 peak; a ValueError naming the rule where its preset has none (FP8
    tensor cores came with Hopper: the A100 has none)."""
    peak = gpu.peak_flops.get("fp8")
    if not peak:
        raise ValueError(
            f"fp8 needs a GPU with FP8 tensor cores (an 'fp8' peak in its preset: Hopper or "
            f"later); {gpu.name} has none"
        )
    return peak


def check_fp8_gpu(gpu, scaling: str | None) -> None:
    """A ValueError naming the rule where FP8 recipe ``scaling`` (:data:`FP8_SCALING`, or None:
    bf16) cannot run on ``gpu``: MXFP8 needs Blackwell's block-scaled tensor cores, i.e. an
    'mxfp8' peak in the GPU's preset (B200, GB200); the other recipes an FP8 peak
    (:func:`fp8_peak`)."""
    if scaling is None:
        return
    if scaling not in FP8_SCALING:
        raise ValueError(f"fp8 ({scaling!r}) must be one of {', '.join(FP8_SCALING)}")
    if scaling == "mxfp8" and not gpu.peak_flops.get("mxfp8"):
        raise ValueError(f"precision mxfp8 needs a Blackwell GPU (B200, GB200), got {gpu.name}")
    fp8_peak(gpu)


def gpu_gemm_seconds(gpu, M: int, N: int, K: int, batch: int = 1, fp8: bool | str = False) -> float:
    """One GEMM as :func:`layer_seconds` prices it on ``gpu``: a dense one (batch 1) by the
    GPU's rule and constants (:func:`gemm_seconds`), a batched one (attention's) by
    :func:`bmm_seconds` where the GPU has a measured ``bmm_bandwidth``, else by its rule.
    ``fp8`` (True or a scaling of :data:`FP8_SCALING`): a dense GEMM of FP8 operands, at
    :func:`fp8_peak` · η · :data:`FP8_GEMM_EFFICIENCY` (· :data:`FP8_ROWWISE_GEMM_RATIO` when
    ``fp8`` is "rowwise"), one byte per element moved (attention's batched GEMMs stay 16-bit)."""
    return _gpu_gemm_seconds(gpu, M, N, K, batch, fp8, FP8_GEMM_EFFICIENCY, FP8_ROWWISE_GEMM_RATIO)


# A planner search prices the same few GEMM shapes for thousands of layouts (Mixtral 8×7B's
# preset: 297,198 calls, 240 distinct): a pure function of hashable arguments (GPU is a frozen
# dataclass), computed once each. The module's FP8 constants are arguments, so a fit that sets
# them (minipar.cost.validation.modern_fit) is never answered from an older value.
@lru_cache(maxsize=1 << 16)
def _gpu_gemm_seconds(gpu, M, N, K, batch, fp8, fp8_efficiency, rowwise_ratio) -> float:
    if batch > 1 and gpu.bmm_bandwidth is not None:
        return bmm_seconds(
            M, N, K, batch=batch, bandwidth=gpu.bmm_bandwidth, latency=gpu.bmm_latency_s
        )
    eight = fp8 and batch == 1
    return gemm_seconds(
        M,
        N,
        K,
        batch=batch,
        peak=fp8_peak(gpu) if eight else gpu.peak_flops["bf16"],
        efficiency=gpu.gemm_efficiency
        * (fp8_efficiency if eight else 1.0)
        * (rowwise_ratio if eight and fp8 == "rowwise" else 1.0),
        hbm=gpu.hbm_bandwidth,
        sms=gpu.sms,
        bytes_per_elem=1 if eight else 2,
        rule=gpu.gemm_rule,
        latency=gpu.gemm_latency_s,
    )


def layer_gemms(b: int, s: int, h: int, a: int, t: int = 1) -> list[tuple[int, int, int, int]]:
    """The forward GEMMs of one Megatron layer on one of t tensor-parallel ranks, as
    (batch, M, N, K) with output (M, N) (Shoeybi et al. 2019 §3; FLOPs sum to
    (24bsh² + 4bs²h)/t, Narayanan et al. 2021 §5.1):
    QKV (bs, 3h/t, h), projection (bs, h, h/t), h→4h (bs, 4h/t, h), 4h→h (bs, h, 4h/t),
    QKᵀ b·a/t × (s, s, h/a) and attention·V b·a/t × (s, h/a, s)."""
    _positive(b=b, s=s, h=h, a=a, t=t)
    bs, dh, at = b * s, h // a, a // t
    return [
        (1, bs, 3 * h // t, h),
        (1, bs, h, h // t),
        (1, bs, 4 * h // t, h),
        (1, bs, h, 4 * h // t),
        (b * at, s, s, dh),
        (b * at, s, dh, s),
    ]


def pass_seconds(gemms, gpu, fp8: bool = False) -> tuple[float, float]:
    """(forward, backward) seconds of ``gemms`` ((batch, M, N, K) each, as
    :func:`layer_gemms`): backward runs, for every forward GEMM (M, N, K), the input gradient
    (M, K, N) and the weight gradient (K, N, M) (Narayanan et al. 2021 §3.5: backward = 2 ×
    forward FLOPs), each priced by :func:`gpu_gemm_seconds` (``fp8``: the dense ones in FP8)."""
    fwd = sum(gpu_gemm_seconds(gpu, M, N, K, n, fp8) for n, M, N, K in gemms)
    bwd = sum(
        gpu_gemm_seconds(gpu, M, K, N, n, fp8) + gpu_gemm_seconds(gpu, K, N, M, n, fp8)
        for n, M, N, K in gemms
    )
    return fwd, bwd


def flash_attention_flops(
    b: int, s: int, h: int, t: int = 1, *, causal: bool = True
) -> tuple[float, float]:
    """(forward, backward) FLOPs of fused attention on one of t ranks. Forward: QKᵀ and P·V,
    2·s²·(h/a) each per head, 4·b·s²·h/t in all (Narayanan et al. 2021 §5.1's 4bs²h), halved
    by causal block skipping (blocks above the diagonal are never computed; Dao 2023,
    "FlashAttention-2", §3.1). Backward: 2.5 × forward, five s²·(h/a) products per head (the
    scores recomputed, dV, dP, dQ, dK; Dao 2023 §3.2 and its FLOP count in §4.1)."""
    _positive(b=b, s=s, h=h, t=t)
    fwd = 4.0 * b * s * s * h / t * (0.5 if causal else 1.0)
    return fwd, FLASH_BACKWARD * fwd


def flash_attention_seconds(
    b: int, s: int, h: int, a: int, gpu, t: int = 1, kernel: str = "flash"
) -> tuple[float, float]:
    """(forward, backward) seconds of the fused causal attention kernel: its FLOPs
    (:func:`flash_attention_flops`) at ``gpu.flash_efficiency`` of the bf16 peak for "flash"
    (FlashAttention-2 / SDPA, the rate measured on whole SDPA layers,
    :mod:`minipar.cost.kernels.hardware`), at :data:`FA3_EFFICIENCY` (assumed) for "fa3", a
    Hopper kernel (refused where the GPU has no FP8 peak, i.e. before Hopper); no per-score
    bytes move."""
    _positive(a=a)
    if kernel == "fa3" and not gpu.peak_flops.get("fp8"):  # no FP8 peak: before Hopper
        raise ValueError(
            f"attention fa3 (FlashAttention-3) is a Hopper kernel; {gpu.name} is not Hopper "
            "(no 'fp8' peak in its preset): use flash"
        )
    eff = FA3_EFFICIENCY if kernel == "fa3" else gpu.flash_efficiency
    rate = gpu.peak_flops["bf16"] * eff
    f, bw = flash_attention_flops(b, s, h, t)
    return f / rate, bw / rate


@dataclass(frozen=True)
class MemoryKernels:
    """The keywords of :func:`layer_memory_bytes`: sequence parallelism, the fp32 gradient
    accumulation's bytes per parameter, the attention kernel and the bytes per score."""

    sp: bool = False
    grad_accum_bytes: float = 10
    attention: str = "unfused"
    score_bytes: float = SCORE_BYTES_FWD + SCORE_BYTES_BWD


def layer_memory_bytes(b: int, s: int, h: int, a: int, t: int = 1, **kernels) -> tuple:
    """(forward, backward, attention-core forward) bytes of one layer's memory-bound kernels
    on one rank, 16-bit activations, 1-byte dropout masks (Korthikanti et al. 2022 §4.1's
    tensors, read and written once per kernel; ``kernels``: the keywords of
    :class:`MemoryKernels`):

    forward   two layer norms (read + write (b, s, h): 4 bytes per element each), two fused
              bias-dropout-adds (read 2 inputs, write the output and a mask: 7), the fused
              bias-GeLU on (b, s, 4h/t) (4), the fused scale-mask-softmax on the b·a/t·s² scores
              (read + write: 4) and its dropout (5): 22·bsh + 16·bsh/t + 9·as²b/t;
    backward  layer-norm backward (6 each), bias-dropout-add backward (5 each), GeLU backward
              (6 on 4h/t), softmax backward (6), dropout backward (5), and the accumulation of
              every weight gradient into its fp32 main gradient, ``grad_accum_bytes`` per
              parameter (read the 16-bit gradient 2, read + write the fp32 buffer 8;
              Megatron-LM's ``main_grad``): 22·bsh + 24·bsh/t + 11·as²b/t + 10·12h²/t.
    The layer-norm and dropout-add terms act on the replicated (b, s, h) tensors, which
    sequence parallelism splits over t. ``score_bytes`` is the forward + backward bytes per
    score (9 + 11 above), split 9 : 11; ``attention="flash"`` moves none (the scores stay on
    chip; its inputs and outputs are the (b, s, h) tensors already counted).
    """
    k = MemoryKernels(**kernels)
    sp, grad_accum_bytes, score_bytes = k.sp, k.grad_accum_bytes, k.score_bytes
    _positive(b=b, s=s, h=h, a=a, t=t)
    if fused(k.attention):
        score_bytes = 0.0
    elif score_bytes < 0:
        raise ValueError(f"score_bytes ({score_bytes}) must be >= 0")
    bsh, scores = b * s * h, a * s * s * b / t
    f_score = score_bytes * SCORE_BYTES_FWD / (SCORE_BYTES_FWD + SCORE_BYTES_BWD)
    rep = bsh / t if sp else bsh
    fwd = 22 * rep + 16 * bsh / t + f_score * scores
    bwd = (
        22 * rep
        + 24 * bsh / t
        + (score_bytes - f_score) * scores
        + grad_accum_bytes * 12 * h * h / t
    )
    return fwd, bwd, f_score * scores


@dataclass(frozen=True)
class LayerRecipe:
    """The keywords of :func:`layer_seconds`: sequence parallelism, the recomputation, the
    attention kernel and the fp32 gradient accumulation's bytes per parameter."""

    sp: bool = False
    recompute: str = "none"
    attention: str = "unfused"
    grad_accum_bytes: float = 10


def layer_seconds(b: int, s: int, h: int, a: int, gpu, t: int = 1, **recipe) -> LayerTime:
    """Forward + backward of one layer for one micro-batch on one rank, with recomputation
    (``recipe``: the keywords of :class:`LayerRecipe`):
    "full" repeats the whole forward, "selective" repeats the attention core (QKᵀ, softmax,
    dropout, attention·V, or the flash forward; Korthikanti et al. 2022 §5). ``attention``:
    "unfused" (default, the 2021 runs) or "flash" (module docstring). The GPU's fixed
    ``layer_overhead_s`` is charged once per forward + backward, a third of it again for a
    full recomputation's forward (a forward issues about a third of the layer's kernels: one
    GEMM per forward GEMM against two in the backward)."""
    r = LayerRecipe(**recipe)
    sp, recompute, attention, grad_accum_bytes = r.sp, r.recompute, r.attention, r.grad_accum_bytes
    check_attention(attention)
    gemms = layer_gemms(b, s, h, a, t)
    dense_f, dense_b = pass_seconds(gemms[:4], gpu)
    if fused(attention):
        core_f, core_b = flash_attention_seconds(b, s, h, a, gpu, t, attention)
    else:
        core_f, core_b = pass_seconds(gemms[4:], gpu)
    kernels = dict(sp=sp, grad_accum_bytes=grad_accum_bytes, attention=attention)
    m_f, m_b, m_core = layer_memory_bytes(
        b, s, h, a, t, **kernels, score_bytes=gpu.attention_score_bytes
    )
    overhead = gpu.layer_overhead_s
    fwd = dense_f + core_f
    g, mem, extra = fwd + dense_b + core_b, m_f + m_b, overhead
    if recompute == "full":
        g, mem, extra = g + fwd, mem + m_f, extra + overhead / 3
    elif recompute == "selective":
        g, mem = g + core_f, mem + m_core
    elif recompute != "none":
        raise ValueError(f"recompute ({recompute!r}) must be one of none, selective, full")
    return LayerTime(g, mem / gpu.hbm_bandwidth + extra)


def logits_seconds(b: int, s: int, h: int, V: int, gpu, t: int = 1) -> float:
    """The output layer on the last stage: the (bs, V/t, h) logits GEMM forward and its two
    backward GEMMs, plus the vocabulary-parallel cross-entropy reading and writing the fp32
    (b, s, V/t) logits a few times (≈ 16 bytes per logit); no recomputation (Megatron leaves
    the output layer out of the checkpointed layers)."""
    Vt = max(1, V // t)
    g = (
        gpu_gemm_seconds(gpu, b * s, Vt, h)
        + gpu_gemm_seconds(gpu, b * s, h, Vt)
        + gpu_gemm_seconds(gpu, h, Vt, b * s)
    )
    return g + 16 * b * s * Vt / gpu.hbm_bandwidth


def optimizer_seconds(params: float, gpu, bytes_per_param: float = 30) -> float:
    """One mixed-precision Adam step over ``params`` parameters, memory-bound: read the fp32
    gradient (4), read and write the fp32 master weight, momentum and variance (3 × 8) and
    write the 16-bit weight (2): 30 bytes per parameter (the kernel does ~10 FLOPs per
    parameter, far below the ridge point), over the bandwidth the fused Adam kernel reaches,
    ``gpu.optimizer_bandwidth`` (measured, :mod:`minipar.cost.kernels.hardware`), or the HBM bandwidth
    where none was measured."""
    if params < 0:
        raise ValueError(f"params ({params}) must be >= 0")
    bw = gpu.optimizer_bandwidth or gpu.hbm_bandwidth
    return bytes_per_param * params / bw


def attention_core_and_mlp_seconds(
    b: int, s: int, h: int, a: int, gpu, t: int = 1, *, attention: str = "unfused"
) -> dict[str, float]:
    """Forward and backward GEMM seconds of one layer's attention core (QKᵀ, attention·V, or
    the flash kernel) and of its MLP (h→4h, 4h→h) on one of t ranks: the parts
    :mod:`minipar.cost.planner.three_d` rescales for context parallelism (the core repeats for each of
    the other cp−1 key blocks of the ring) and for MoE or non-4h MLPs (the MLP scales with the
    active expert FLOPs)."""
    gemms = layer_gemms(b, s, h, a, t)
    if fused(attention):
        core_f, core_b = flash_attention_seconds(b, s, h, a, gpu, t, attention)
    else:
        core_f, core_b = pass_seconds(gemms[4:], gpu)
    mlp_f, mlp_b = pass_seconds(gemms[2:4], gpu)
    return {"core_f": core_f, "core_b": core_b, "mlp_f": mlp_f, "mlp_b": mlp_b}


# --- element-wise kernels from the recipe run, each at max(issue time, its traffic) -----------


class Kernel(NamedTuple):
    name: str
    backward: bool  # runs in the backward pass (else in the forward, again when recomputed)
    bytes_per_token: float  # bytes read + written per token


def elementwise_kernels(
    h: int, f: int, kv: int, t: int = 1, *, sp: bool = False, recipe: dict | None = None
) -> list[Kernel]:
    """The memory-bound kernels of one eager PyTorch layer (minipar's model, and what the H200
    step files ran) on one of t ranks, from the recipe actually run (``recipe``: ``norm``,
    ``mlp_matrices`` 2 for GeLU or 3 for SwiGLU, ``rope``, ``dropout`` > 0, ``bias``; GPT's by
    default), in 16-bit bytes read + written per token:

    forward   two norms (read and write the (·, h) stream: 4 each), the Q/K/V split into heads
              and the attention output back (read + write, 4 per element), RoPE on Q and K
              (2 kernels, when ``rope``), a dropout after attention and after the MLP (read,
              write, a 1-byte mask: 5; only when ``dropout`` > 0), two residual adds (read 2,
              write 1: 6), the activation on the f-wide hidden (GeLU 4; SwiGLU's SiLU 4 and
              product 6);
    backward  the norms (read the input and the gradient, write the gradient: 6 each), the
              head layouts, RoPE, dropouts (5), the residual stream's gradient sums (6), the
              activation (GeLU 6; SwiGLU's 3 kernels of 6) and, with ``bias``, the bias
              gradients (read each output's gradient once: 2 per element).
    The replicated (·, h) stream is split over t with sequence parallelism; everything else over
    t. Megatron's fused kernels move fewer bytes (:func:`layer_memory_bytes`)."""
    rc = {"norm": "layernorm", "mlp_matrices": 2, "rope": False, "dropout": 0.1, "bias": True}
    rc.update(recipe or {})
    r = h / t if sp else h  # the residual stream
    w = lambda x: x / t  # a TP-split width
    qkv, swiglu = h + 2 * kv, rc["mlp_matrices"] == 3
    out = [Kernel("norm1", False, 4 * r), Kernel("qkv heads", False, 4 * w(qkv))]
    out += [Kernel(f"rope {i}", False, 4 * w(h + kv)) for i in range(2)] if rc["rope"] else []
    out += [Kernel("attention out", False, 4 * w(h))]
    drop = rc["dropout"] > 0
    for i in (1, 2):
        out += [Kernel(f"dropout{i}", False, 5 * r)] if drop else []
        out += [Kernel(f"residual{i}", False, 6 * r)]
        if i == 1:
            out += [Kernel("norm2", False, 4 * r)]
            out += (
                [Kernel("silu", False, 4 * w(f)), Kernel("gate * up", False, 6 * w(f))]
                if swiglu
                else [Kernel("gelu", False, 4 * w(f))]
            )
    bwd = [Kernel(f"norm{i} bwd", True, 6 * r) for i in (1, 2)]
    bwd += [Kernel("qkv heads bwd", True, 4 * w(qkv)), Kernel("attention out bwd", True, 4 * w(h))]
    bwd += [Kernel(f"rope {i} bwd", True, 4 * w(h + kv)) for i in range(2)] if rc["rope"] else []
    bwd += [Kernel(f"dropout{i} bwd", True, 5 * r) for i in (1, 2)] if drop else []
    bwd += [Kernel(f"residual{i} bwd", True, 6 * r) for i in (1, 2)]
    bwd += [Kernel(f"act bwd {i}", True, 6 * w(f)) for i in range(3 if swiglu else 1)]
    if rc["bias"]:
        widths = (w(qkv), r, w(f * (rc["mlp_matrices"] - 1)), r)
        bwd += [Kernel(f"bias grad {i}", True, 2 * x) for i, x in enumerate(widths)]
    return out + bwd


def elementwise_seconds(
    kernels: list[Kernel], tokens: int, gpu, recompute: str = "none", compiled: bool = False
) -> float:
    """Forward + backward seconds of ``kernels`` on ``tokens`` tokens: each kernel takes the
    longer of the CPU's time to issue it (``gpu.kernel_issue_s``, eager PyTorch's per-op cost)
    and its traffic at the element-wise rate (``gpu.elementwise_bandwidth``): a kernel paid per
    launch at few tokens, per token at many. Full recomputation runs the forward ones twice.
    ``compiled`` (torch.compile, CUDA graphs, Megatron/Transformer Engine's fused kernels):
    :data:`COMPILED_TRAFFIC` of the same bytes at the achieved HBM rate (``gpu.hbm_bandwidth``),
    no issue time (the launches hidden)."""
    bw, issue = gpu.elementwise_bandwidth, gpu.kernel_issue_s
    if compiled:
        bw, issue = gpu.hbm_bandwidth / COMPILED_TRAFFIC, 0.0
    total = 0.0
    for k in kernels:
        one = max(issue, tokens * k.bytes_per_token / bw)
        total += one * (2 if recompute == "full" and not k.backward else 1)
    return total


def fp8_cast_bytes_per_token(
    h: int,
    f: int,
    kv: int,
    t: int = 1,
    *,
    sp: bool = False,
    scaling: str = "delayed",
    mlp_matrices: int = 2,
) -> tuple[float, float]:
    """(forward, backward) bytes per token of one layer's FP8 casts on one of t ranks
    (:data:`FP8_CAST_BYTES` per element under ``scaling``, :data:`FP8_SCALING`): forward, the
    inputs of the QKV GEMM (the replicated (·, h) stream r), of the projection (h/t), of the
    MLP's first GEMM (r) and of its last (f/t, f the active hidden width); backward, the output
    gradients of the same four GEMMs: (h + 2kv)/t, r, (``mlp_matrices`` − 1)·f/t (SwiGLU's
    gate and up projection: 2f/t) and r. What stays 16-bit (attention, norms, softmax, the element-wise kernels, the
    output layer, the optimizer) moves nothing here. Under rowwise scaling the backward also
    casts the inputs and the output gradients a second time (:data:`FP8_RECAST_BYTES`)."""
    if scaling not in FP8_SCALING:
        raise ValueError(f"fp8 ({scaling!r}) must be one of {', '.join(FP8_SCALING)}")
    per, again = FP8_CAST_BYTES[scaling], FP8_RECAST_BYTES[scaling]
    r = h / t if sp else h
    fwd = 2 * r + h / t + f / t
    bwd = (h + 2 * kv) / t + 2 * r + (mlp_matrices - 1) * f / t
    return per * fwd, per * bwd + again * (fwd + bwd)


def fp8_weight_cast_bytes(scaling: str) -> float:
    """Bytes per weight element cast once per micro-batch: read 2, write 1 and a transposed
    copy 1 (4) under the tensorwise recipes; rowwise, a cast along each of the two dimensions
    the forward and the input-gradient GEMMs contract (:data:`FP8_CAST_BYTES` +
    :data:`FP8_RECAST_BYTES`: 8); MXFP8, both blockings in one cast (4 + 2/32)."""
    if scaling in ("rowwise", "mxfp8"):
        return FP8_CAST_BYTES[scaling] + FP8_RECAST_BYTES[scaling]
    return 4


def fused_activation_seconds(
    b: int, s: int, h: int, t: int, gpu, *, sp: bool = False, recompute: str = "none"
) -> float:
    """The part of :func:`layer_memory_bytes` that :func:`elementwise_seconds` replaces: the
    fused kernels' activation bytes (forward 22·r + 16·bsh/t, backward 22·r + 24·bsh/t, r the
    replicated stream), at the HBM bandwidth, the forward twice under full recomputation."""
    bsh = b * s * h
    rep = bsh / t if sp else bsh
    fwd, bwd = 22 * rep + 16 * bsh / t, 22 * rep + 24 * bsh / t
    return ((2 if recompute == "full" else 1) * fwd + bwd) / gpu.hbm_bandwidth
