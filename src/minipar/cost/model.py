"""Parameter and FLOP counts of a GPT-style transformer, and the utilisation ratios built on them.

Notation: L layers, h hidden size, a heads, s sequence length, V vocabulary, B global batch
(sequences per iteration). The MLP is h → 4h → h, attention has no grouped keys, embeddings are
tied to the output layer; these are the assumptions of the two Megatron papers cited below.
"""
from __future__ import annotations

RECOMPUTE = ("none", "selective", "full")


def _positive(**kw) -> None:
    for k, v in kw.items():
        if v <= 0:
            raise ValueError(f"{k} ({v}) must be > 0")


def param_count(L: int, h: int, V: int, s: int) -> int:
    """Ψ = 12 L h² (1 + 13/(12h) + (V + s)/(12 L h)).

    Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM"), Eq. 2: 12h² weights per layer (4h² attention, 8h² MLP), 13h biases and
    layer-norm parameters per layer, Vh token and sh position embeddings.
    """
    _positive(L=L, h=h, V=V, s=s)
    return 12 * L * h**2 + 13 * L * h + (V + s) * h  # Eq. 2 multiplied out: exact integer


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
    _positive(B=B, s=s, L=L, h=h, V=V)
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
    _positive(peak=peak)
    return model_flops_per_s / peak


def hfu(hardware_flops_per_s: float, peak: float) -> float:
    """Hardware FLOPs utilisation: FLOPs actually executed (recomputation included) / peak."""
    _positive(peak=peak)
    return hardware_flops_per_s / peak
