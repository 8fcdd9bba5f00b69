"""Parameter and FLOP counts of a GPT-style transformer, and the utilisation ratios built on them.

Notation: L layers, h hidden size, a heads, s sequence length, V vocabulary, B global batch
(sequences per iteration). The MLP is h → 4h → h, attention has no grouped keys, embeddings are
tied to the output layer; these are the assumptions of the two Megatron papers cited below.
:func:`param_count_llama` counts Llama-class shapes (GQA, SwiGLU, untied embeddings).
"""

from __future__ import annotations

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("unfused", "flash", "fa3")
"""The attention kernel: scores materialised ("unfused"), or fused: "flash" (FlashAttention-2,
PyTorch's SDPA) or "fa3" (FlashAttention-3 / cuDNN's fused attention on Hopper); the two fused
kernels differ only in their rate (:mod:`minipar.cost.kernels.compute`)."""
FUSED_ATTENTION = ("flash", "fa3")


def fused(attention: str) -> bool:
    """Whether ``attention`` keeps its scores on chip (a flash-style kernel)."""
    return check_attention(attention) in FUSED_ATTENTION


def check_attention(attention: str) -> str:
    """``attention`` if it is one of :data:`ATTENTION`, else ValueError naming it: the one check
    that the memory and the time models share."""
    if attention not in ATTENTION:
        raise ValueError(f"attention ({attention!r}) must be one of {', '.join(ATTENTION)}")
    return attention


def check_counts(**kw) -> None:
    """A ValueError naming the first keyword that is not an integer >= 1 (a count: a bool is not)."""
    for k, v in kw.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{k} ({v}) must be an integer >= 1")


def check_positive(**kw) -> None:
    """A ValueError naming the first keyword that is not > 0."""
    for k, v in kw.items():
        if v <= 0:
            raise ValueError(f"{k} ({v}) must be > 0")


def param_count(L: int, h: int, V: int, s: int) -> int:
    """Ψ = 12 L h² (1 + 13/(12h) + (V + s)/(12 L h)).

    Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM"), Eq. 2: 12h² weights per layer (4h² attention, 8h² MLP), 13h biases and
    layer-norm parameters per layer, Vh token and sh position embeddings.
    """
    check_positive(L=L, h=h, V=V, s=s)
    return 12 * L * h**2 + 13 * L * h + (V + s) * h  # Eq. 2 multiplied out: exact integer


def param_count_llama(L: int, h: int, V: int, a: int, a_kv: int, f: int, tied: bool = False) -> int:
    """Ψ of a Llama-class decoder: grouped-query attention, SwiGLU MLP, RMSNorm, RoPE, no biases.

    Per layer: Q and output projections 2h², K and V projections 2h·(h·a_kv/a) (a_kv key-value
    heads, Ainslie et al. 2023, "GQA"), a SwiGLU MLP of three h×f matrices 3hf (Shazeer 2020,
    "GLU Variants Improve Transformer"), two RMSNorm scales 2h; then a final RMSNorm h and the
    token embedding Vh, doubled when input and output embeddings are untied (Llama 2, Touvron et
    al. 2023). No position embeddings (rotary). f = 8h/3 keeps the MLP at 8h², as in Eq. 2's
    h → 4h → h. Reproduces the published counts
    exactly: Llama 2 7B (32, 4096, 32000, 32, 32, 11008) = 6 738 415 616; Llama 2 70B
    (80, 8192, 32000, 64, 8, 28672) = 68 976 648 192.
    """
    check_positive(L=L, h=h, V=V, a=a, a_kv=a_kv, f=f)
    if a % a_kv:
        raise ValueError(f"heads ({a}) must be divisible by key-value heads a_kv ({a_kv})")
    if h % a:
        raise ValueError(f"hidden size ({h}) must be divisible by heads ({a})")
    layer = 2 * h * h + 2 * h * (h // a) * a_kv + 3 * h * f + 2 * h
    return L * layer + h + V * h * (1 if tied else 2)


def flops_per_iteration(B: int, s: int, L: int, h: int, V: int, recompute: str = "none") -> float:
    """FLOPs of one training iteration (forward + backward) on B sequences of length s.

    Forward per layer: 24Bsh² (QKV 6, projection 2, MLP 16) + 4Bs²h (QKᵀ and attention·V);
    logits 2BshV; backward = 2 × forward.
      "none"      model FLOPs, Korthikanti et al. 2022 ("Reducing Activation Recomputation in
                  Large Transformer Models") Eq. 7:     72BsLh²(1 + s/(6h) + V/(12hL))
      "selective" hardware FLOPs with selective recomputation, Korthikanti Eq. 8:
                                                        72BsLh²(1 + s/(3h) + V/(12hL))
                  (the paper doubles the s² term; re-running only the forward QKᵀ and
                  attention·V would add 4Bs²hL, i.e. 1 + 2s/(9h). We keep the paper's formula,
                  which reproduces its Table 5 HFU.)
      "full"      full recomputation, one extra forward of every layer (not the logits):
                  Narayanan et al. 2021 Eq. 3:          96BsLh²(1 + s/(6h) + V/(16hL))
    """
    check_positive(B=B, s=s, L=L, h=h, V=V)
    base = B * s * L * h**2
    if recompute == "none":
        return 72 * base * (1 + s / (6 * h) + V / (12 * h * L))
    if recompute == "selective":
        return 72 * base * (1 + s / (3 * h) + V / (12 * h * L))
    if recompute == "full":
        return 96 * base * (1 + s / (6 * h) + V / (16 * h * L))
    raise ValueError(f"recompute ({recompute!r}) must be one of {', '.join(RECOMPUTE)}")


def six_nd(N: float, D: float) -> float:
    """Training FLOPs ≈ 6·N·D for N parameters and D tokens (Kaplan et al. 2020, "Scaling Laws
    for Neural Language Models", §2.1): 2ND forward, 4ND backward; ignores attention's s² term."""
    return 6 * N * D


def mfu(model_flops_per_s: float, peak: float) -> float:
    """Model FLOPs utilisation: model FLOPs (no recomputation counted) per second / peak.

    Chowdhery et al. 2022 (PaLM, Appendix B); Korthikanti et al. 2022 §6. Use per-device values
    (or totals for both). ``peak`` is the dense peak, e.g. 312e12 for an A100 in bf16.
    """
    check_positive(peak=peak)
    return model_flops_per_s / peak


def hfu(hardware_flops_per_s: float, peak: float) -> float:
    """Hardware FLOPs utilisation: FLOPs actually executed (recomputation included) / peak."""
    check_positive(peak=peak)
    return hardware_flops_per_s / peak
