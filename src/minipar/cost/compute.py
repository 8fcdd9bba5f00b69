"""Time of one transformer layer's computation on one GPU: a roofline per kernel.

Pure Python. Every kernel is timed as the larger of its arithmetic time and its memory time
(the roofline, Williams, Waterman & Patterson 2009, "Roofline: an insightful visual performance
model", CACM 52(4)):

    GEMM (M, N, K), 16-bit     max(2MNK / (peak · η · q(M, N)),  2(MK + KN + MN) / W_hbm)
    memory-bound kernel        bytes / W_hbm

* η (``GPU.gemm_efficiency``) is the fraction of the dense peak a large, well-shaped GEMM
  sustains in training (one constant per GPU model, in :mod:`minipar.cost.hardware`).
* q(M, N) is tile and wave quantisation (NVIDIA, "Matrix Multiplication Background User's
  Guide", Deep Learning Performance documentation): the output is cut into tiles of
  ``TILE_M × TILE_N``; a partial tile costs a whole one, and the tiles run in waves of one tile
  per SM, so ``q = useful tiles / (waves · SMs)`` with padded edges counted as waste.
* The memory-bound kernels are the ones Megatron-LM runs between the GEMMs (layer norms, fused
  bias-GeLU, fused bias-dropout-add, fused scale-mask-softmax, attention dropout) and the fp32
  accumulation of each weight gradient into its main-gradient buffer; their bytes are counted
  item by item in :func:`layer_memory_bytes`.

Attention's QKᵀ and attention·V are batched GEMMs with K or N = h/a (the head dimension): their
arithmetic intensity is about h/a FLOPs per byte, below an A100's 153 FLOP/byte ridge point for
h/a < 153, so the roofline makes them memory-bound. That, and the softmax's 9 bytes per score,
is why small models with s ≫ h/a reach a lower fraction of peak (Narayanan et al. 2021 Table 1:
137 TFLOP/s at 1.7 B, 163 at 1 T) — without any per-model constant.
"""
from __future__ import annotations

import math
from typing import NamedTuple

TILE_M, TILE_N = 256, 128          # cuBLAS's largest Ampere/Hopper tile (CUTLASS 256×128)


class LayerTime(NamedTuple):
    gemm_s: float          # the GEMMs of the layer (forward + backward + recomputation)
    memory_s: float        # memory-bound kernels (elementwise, softmax, fp32 grad accumulation)

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


def gemm_seconds(M: int, N: int, K: int, *, peak: float, efficiency: float, hbm: float,
                 sms: int, batch: int = 1, bytes_per_elem: float = 2) -> float:
    """Seconds of ``batch`` GEMMs (M×K)·(K×N) on one GPU under the roofline above.

    A batched GEMM shares its waves: the tiles of all ``batch`` products are scheduled together.
    """
    _positive(M=M, N=N, K=K, peak=peak, efficiency=efficiency, hbm=hbm, sms=sms, batch=batch)
    tiles = batch * math.ceil(M / TILE_M) * math.ceil(N / TILE_N)
    q = batch * M * N / (math.ceil(tiles / sms) * sms * TILE_M * TILE_N)
    flops = 2.0 * batch * M * N * K
    moved = batch * (M * K + K * N + M * N) * bytes_per_elem
    return max(flops / (peak * efficiency * q), moved / hbm)


def layer_gemms(b: int, s: int, h: int, a: int, t: int = 1) -> list[tuple[int, int, int, int]]:
    """The forward GEMMs of one Megatron layer on one of t tensor-parallel ranks, as
    (batch, M, N, K) with output (M, N) (Shoeybi et al. 2019 §3; FLOPs sum to
    (24bsh² + 4bs²h)/t, Narayanan et al. 2021 §5.1):
    QKV (bs, 3h/t, h), projection (bs, h, h/t), h→4h (bs, 4h/t, h), 4h→h (bs, h, 4h/t),
    QKᵀ b·a/t × (s, s, h/a) and attention·V b·a/t × (s, h/a, s)."""
    _positive(b=b, s=s, h=h, a=a, t=t)
    bs, dh, at = b * s, h // a, a // t
    return [(1, bs, 3 * h // t, h), (1, bs, h, h // t), (1, bs, 4 * h // t, h),
            (1, bs, h, 4 * h // t), (b * at, s, s, dh), (b * at, s, dh, s)]


def _pass_seconds(gemms, gpu) -> tuple[float, float]:
    """(forward, backward) GEMM seconds: backward runs, for every forward GEMM (M, N, K), the
    input gradient (M, K, N) and the weight gradient (K, N, M) (Narayanan et al. 2021 §3.5:
    backward = 2 × forward FLOPs)."""
    kw = dict(peak=gpu.peak_flops["bf16"], efficiency=gpu.gemm_efficiency,
              hbm=gpu.hbm_bandwidth, sms=gpu.sms)
    fwd = sum(gemm_seconds(M, N, K, batch=n, **kw) for n, M, N, K in gemms)
    bwd = sum(gemm_seconds(M, K, N, batch=n, **kw) + gemm_seconds(K, N, M, batch=n, **kw)
              for n, M, N, K in gemms)
    return fwd, bwd


def layer_memory_bytes(b: int, s: int, h: int, a: int, t: int = 1, *, sp: bool = False,
                       grad_accum_bytes: float = 10) -> tuple[float, float, float]:
    """(forward, backward, attention-core forward) bytes of one layer's memory-bound kernels
    on one rank, 16-bit activations, 1-byte dropout masks (Korthikanti et al. 2022 §4.1's
    tensors, read and written once per kernel):

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
    sequence parallelism splits over t.
    """
    _positive(b=b, s=s, h=h, a=a, t=t)
    bsh, scores = b * s * h, a * s * s * b / t
    rep = bsh / t if sp else bsh
    fwd = 22 * rep + 16 * bsh / t + 9 * scores
    bwd = 22 * rep + 24 * bsh / t + 11 * scores + grad_accum_bytes * 12 * h * h / t
    return fwd, bwd, 9 * scores


def layer_seconds(b: int, s: int, h: int, a: int, gpu, t: int = 1, *, sp: bool = False,
                  recompute: str = "none") -> LayerTime:
    """Forward + backward of one layer for one micro-batch on one rank, with recomputation:
    "full" repeats the whole forward, "selective" repeats the attention core (QKᵀ, softmax,
    dropout, attention·V; Korthikanti et al. 2022 §5)."""
    gemms = layer_gemms(b, s, h, a, t)
    fwd, bwd = _pass_seconds(gemms, gpu)
    core_f, _ = _pass_seconds(gemms[4:], gpu)
    m_f, m_b, m_core = layer_memory_bytes(b, s, h, a, t, sp=sp)
    g, mem = fwd + bwd, m_f + m_b
    if recompute == "full":
        g, mem = g + fwd, mem + m_f
    elif recompute == "selective":
        g, mem = g + core_f, mem + m_core
    elif recompute != "none":
        raise ValueError(f"recompute ({recompute!r}) must be one of none, selective, full")
    return LayerTime(g, mem / gpu.hbm_bandwidth)


def logits_seconds(b: int, s: int, h: int, V: int, gpu, t: int = 1) -> float:
    """The output layer on the last stage: the (bs, V/t, h) logits GEMM forward and its two
    backward GEMMs, plus the vocabulary-parallel cross-entropy reading and writing the fp32
    (b, s, V/t) logits a few times (≈ 16 bytes per logit); no recomputation (Megatron leaves
    the output layer out of the checkpointed layers)."""
    kw = dict(peak=gpu.peak_flops["bf16"], efficiency=gpu.gemm_efficiency,
              hbm=gpu.hbm_bandwidth, sms=gpu.sms)
    Vt = max(1, V // t)
    g = gemm_seconds(b * s, Vt, h, **kw) + gemm_seconds(b * s, h, Vt, **kw) + \
        gemm_seconds(h, Vt, b * s, **kw)
    return g + 16 * b * s * Vt / gpu.hbm_bandwidth


def optimizer_seconds(params: float, gpu, bytes_per_param: float = 30) -> float:
    """One mixed-precision Adam step over ``params`` parameters, memory-bound: read the fp32
    gradient (4), read and write the fp32 master weight, momentum and variance (3 × 8) and
    write the 16-bit weight (2): 30 bytes per parameter over the HBM bandwidth (the kernel does
    ~10 FLOPs per parameter, far below the ridge point)."""
    if params < 0:
        raise ValueError(f"params ({params}) must be >= 0")
    return bytes_per_param * params / gpu.hbm_bandwidth


def attention_core_and_mlp_seconds(b: int, s: int, h: int, a: int, gpu,
                                   t: int = 1) -> dict[str, float]:
    """Forward and backward GEMM seconds of one layer's attention core (QKᵀ, attention·V) and
    of its MLP (h→4h, 4h→h) on one of t ranks: the parts :mod:`minipar.cost.three_d` rescales
    for context parallelism (the core repeats for each of the other cp−1 key blocks of the
    ring) and for MoE or non-4h MLPs (the MLP scales with the active expert FLOPs)."""
    gemms = layer_gemms(b, s, h, a, t)
    core_f, core_b = _pass_seconds(gemms[4:], gpu)
    mlp_f, mlp_b = _pass_seconds(gemms[2:4], gpu)
    return {"core_f": core_f, "core_b": core_b, "mlp_f": mlp_f, "mlp_b": mlp_b}
