"""Parameter and FLOP counts of a GPT-style transformer, and the utilisation ratios built on them.

Notation: L layers, h hidden size, a heads, s sequence length, V vocabulary, B global batch
(sequences per iteration). The MLP is h → 4h → h, attention has no grouped keys, embeddings are
tied to the output layer; these are the assumptions of the two Megatron papers cited below.
:func:`param_count_llama` counts Llama-class shapes (GQA, SwiGLU, untied embeddings).
"""

from __future__ import annotations

from typing import NamedTuple

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


# --- Mixture-of-experts decoders with latent attention (DeepSeek-V3, Qwen3-MoE, Mixtral) ---------


EXTENDED_FIELDS = (
    "shared_experts",
    "dense_layers",
    "dense_ffn",
    "node_limit",
    "head_dim",
    "qk_norm",
    "q_lora",
    "kv_lora",
    "qk_rope_dim",
    "qk_nope_dim",
    "v_head_dim",
    "mtp_depth",
)
"""The model shape's fields beyond GPT, Llama and Mixtral (the planner's ``ModelShape``; 0 or
False: absent), counted by :func:`decoder_counts`."""

MLA_FIELDS = ("qk_rope_dim", "qk_nope_dim", "v_head_dim")


def check_extended(m) -> None:
    """A ValueError naming the first rule that ``m`` (a shape with :data:`EXTENDED_FIELDS`,
    ``layers``, ``experts``, ``top_k``, ``norm``, ``bias``, ``positions``) breaks."""
    for k in EXTENDED_FIELDS:
        v = getattr(m, k)
        if k != "qk_norm" and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise ValueError(f"{k} ({v!r}) must be an integer >= 0")
    if not any(getattr(m, k) for k in EXTENDED_FIELDS):
        return
    if m.norm != "rmsnorm" or m.bias or m.positions != "rope":
        raise ValueError(
            f"{', '.join(k for k in EXTENDED_FIELDS if getattr(m, k))} are counted for the Llama "
            f"recipe only (rmsnorm, no biases, rope), got norm {m.norm!r}, bias {m.bias}, "
            f"positions {m.positions!r}"
        )
    moe_only = [k for k in ("shared_experts", "dense_layers", "node_limit") if getattr(m, k)]
    if moe_only and m.experts < 2:
        raise ValueError(f"{moe_only[0]} needs an MoE model (experts > 1), got {m.experts} expert")
    if m.dense_layers >= m.layers:
        raise ValueError(f"dense layers ({m.dense_layers}) must be < layers ({m.layers})")
    if m.node_limit > m.top_k:
        raise ValueError(
            f"node limit ({m.node_limit}) must be <= top_k ({m.top_k}): a token's experts span "
            "at most top_k nodes"
        )
    mla = ("q_lora", "kv_lora") + MLA_FIELDS
    if m.kv_lora:
        missing = [k for k in MLA_FIELDS if not getattr(m, k)]
        if missing:
            raise ValueError(
                f"multi-head latent attention (kv_lora {m.kv_lora}) needs {missing[0]} > 0"
            )
        if m.head_dim or m.qk_norm:
            raise ValueError(
                "head_dim and qk_norm describe grouped-query attention, not MLA (kv_lora > 0)"
            )
    elif any(getattr(m, k) for k in mla):
        k = next(k for k in mla if getattr(m, k))
        raise ValueError(f"{k} ({getattr(m, k)}) needs multi-head latent attention: kv_lora > 0")


def gqa_params(h: int, a: int, a_kv: int, head_dim: int = 0, qk_norm: bool = False) -> int:
    """One layer's attention weights, grouped-query, no biases: Q (h × a·d) and output (a·d × h)
    projections, K and V (h × a_kv·d each), d the head dimension (``head_dim``, h/a when 0);
    with ``qk_norm`` an RMSNorm scale of d on the queries and one on the keys (Qwen3's
    QK-norm, the Qwen3 Technical Report §2 and its released configs: ``head_dim`` 128 while
    h/a is 64 on Qwen3-30B-A3B). Ainslie et al. 2023 ("GQA") for the grouped K and V."""
    check_positive(h=h, a=a, a_kv=a_kv)
    d = head_dim or h // a
    return 2 * h * a * d + 2 * h * a_kv * d + (2 * d if qk_norm else 0)


def mla_params(h: int, a: int, q_lora: int, kv_lora: int, rope: int, nope: int, v: int) -> int:
    """One layer's multi-head latent attention weights (DeepSeek-V2 technical report §2.1,
    Eq. 9-14 and §2.1.3, decoupled RoPE; the DeepSeek-V3 technical report §2.1.1, Eq. 1-11).

    queries: down-projection W_DQ (h × q_lora), an RMSNorm of q_lora, up-projection W_UQ
        (q_lora × a·(nope + rope)) giving each head's no-RoPE and RoPE parts; without a query
        compression (``q_lora`` 0, DeepSeek-V2-Lite) one W_Q (h × a·(nope + rope));
    keys and values: the joint down-projection W_DKV with the shared RoPE key W_KR
        (h × (kv_lora + rope)), an RMSNorm of kv_lora, the up-projections W_UK and W_UV
        (kv_lora × a·(nope + v));
    output: W_O (a·v × h).
    DeepSeek-V3 (h 7168, a 128, q_lora 1536, kv_lora 512, rope 64, nope 128, v 128):
    187 107 328 per layer."""
    check_positive(h=h, a=a, kv_lora=kv_lora, rope=rope, nope=nope, v=v)
    qk = a * (nope + rope)
    q = h * q_lora + q_lora + q_lora * qk if q_lora else h * qk
    kv = h * (kv_lora + rope) + kv_lora + kv_lora * a * (nope + v)
    return q + kv + a * v * h


class DecoderCounts(NamedTuple):
    """Parameter counts of a decoder (:func:`decoder_counts`)."""

    total: int  # every parameter of the main model (the MTP modules apart)
    active: int  # what one token's forward uses: K routed + the shared experts, both embeddings
    embedding: int  # the input embedding V·h (a lookup: no FLOPs; DeepSeek leaves it out of active)
    mtp_total: int  # the MTP modules' own parameters (their embedding and head are the model's)
    mtp_active: int  # what one token uses in them, the shared output head included
    mtp_projection: int  # of mtp_total: the modules' 2h × h projections M_k


def decoder_counts(m) -> DecoderCounts:
    """Total and active parameters of ``m``, a decoder of the Llama recipe (RMSNorm, rotary
    positions, no biases) with mixture-of-experts MLPs, as DeepSeek-V3, Qwen3-MoE and Mixtral
    are built. ``m`` is a shape with the planner's ``ModelShape`` fields (layers, hidden,
    heads, vocab, ffn (0: 4h), experts, top_k, kv_heads, mlp_matrices, tied and
    :data:`EXTENDED_FIELDS`):

    per layer: attention (:func:`mla_params` when ``kv_lora`` > 0, else :func:`gqa_params`)
        and two RMSNorms (2h);
    the first ``dense_layers`` layers: a dense SwiGLU MLP of width ``dense_ffn``
        (``mlp_matrices``·h·f; DeepSeek-V3 report §4.2: the first three layers dense, f 18432);
    every other layer: E routed experts of width ``ffn`` and ``shared_experts`` always-on ones
        (DeepSeekMoE; DeepSeek-V3 report §2.1.2, Eq. 12-16, 1 shared + 256 routed), each
        ``mlp_matrices``·h·f, and the router's h·E (Fedus et al. 2022, "Switch Transformers";
        Mixtral, Jiang et al. 2024 §2.1: 8 experts, top-2; Qwen3 Technical Report §2: 128
        experts, top-8, no shared expert);
    the final RMSNorm h, the input embedding V·h and, untied, the output head V·h;
    active: the same with K routed experts of E (and all shared ones) per MoE layer;
    MTP (DeepSeek-V3 report §2.2, Eq. 21-25): each of ``mtp_depth`` modules adds two RMSNorms
        (2h) on its inputs, the projection M_k (2h × h), one MoE layer as above and a final
        RMSNorm (h), and shares the embedding and the output head.

    Not counted: DeepSeek-V3's per-expert routing bias (256 per MoE layer, 14 848 in all, a
    load-balancing buffer, report §2.1.2). Reproduces the published counts (tests/
    test_cost_moe_shape.py): DeepSeek-V3 671.0 B total, 36.6 B active without the input
    embedding; Qwen3-235B-A22B 235.1 B / 22.2 B; Qwen3-30B-A3B 30.5 B / 3.35 B; Mixtral 8x22B
    140.6 B / 39.2 B; Mixtral 8x7B 46.7 B / 12.9 B."""
    h, L, E = m.hidden, m.layers, m.experts
    f = m.ffn or 4 * h
    check_positive(layers=L, hidden=h, heads=m.heads, vocab=m.vocab, ffn=f)
    if not 0 <= m.dense_layers < L:
        raise ValueError(f"dense layers ({m.dense_layers}) must be in [0, layers ({L}))")
    if not 1 <= m.top_k <= E:
        raise ValueError(f"top_k ({m.top_k}) must be in [1, experts ({E})]")
    if m.kv_lora:
        attn = mla_params(
            h, m.heads, m.q_lora, m.kv_lora, m.qk_rope_dim, m.qk_nope_dim, m.v_head_dim
        )
    else:
        attn = gqa_params(h, m.heads, m.kv_heads or m.heads, m.head_dim, m.qk_norm)
    one = m.mlp_matrices * h * f  # one expert (or, when E = 1, the dense MLP)
    router = h * E if E > 1 else 0
    moe = (E + m.shared_experts) * one + router
    moe_active = (m.top_k + m.shared_experts) * one + router
    dense = m.mlp_matrices * h * (m.dense_ffn or f)
    n_moe = L - m.dense_layers
    body = L * (attn + 2 * h) + m.dense_layers * dense
    embedding = m.vocab * h
    ends = h + embedding * (1 if m.tied else 2)  # final norm, embedding, untied head
    projection = 2 * h * h
    module = 2 * h + projection + h + attn + 2 * h  # input norms, M_k, final norm, the layer
    depth = m.mtp_depth
    return DecoderCounts(
        total=body + n_moe * moe + ends,
        active=body + n_moe * moe_active + ends,
        embedding=embedding,
        mtp_total=depth * (module + moe),
        mtp_active=depth * (module + moe_active) + (embedding if depth else 0),
        mtp_projection=depth * projection,
    )


def moe_flops_per_token(m, mtp: bool = True) -> float:
    """Training FLOPs per token (forward + backward, no recomputation) of ``m`` (a shape as
    :func:`decoder_counts` takes, with ``seq``): 6 per active weight used in a matrix product
    (Kaplan et al. 2020, "Scaling Laws for Neural Language Models" §2.1: 2 forward, 4
    backward), the input embedding left out (a lookup) and the head kept, plus causal
    attention's two score products, 6·L·s·a·(d_qk + d_v)/2 per token: each of s positions
    attends to s/2 on average, forward 2·(s/2)·a·d_qk for QKᵀ and 2·(s/2)·a·d_v for the
    weighted sum (d_qk = nope + rope and d_v under MLA, the head width otherwise). With ``mtp``
    the MTP modules' matrices, the shared head and one layer's attention each (DeepSeek-V3
    report §2.2). Reproduces the 250 GFLOPs per token that Zhao et al. 2025 ("Insights into
    DeepSeek-V3: Scaling Challenges and Reflections on Hardware for AI Architectures", Table 2)
    give for DeepSeek-V3 at s = 4096 without the MTP module (250.5 here)."""
    c = decoder_counts(m)
    check_positive(seq=m.seq)
    if m.kv_lora:
        d_qk, d_v = m.qk_nope_dim + m.qk_rope_dim, m.v_head_dim
    else:
        d_qk = d_v = m.head_dim or m.hidden // m.heads
    per_layer = 6 * m.seq * m.heads * (d_qk + d_v) / 2
    matrices = c.active - (0 if m.tied else c.embedding)  # tied: the table is the head
    flops = 6 * matrices + m.layers * per_layer
    if mtp and m.mtp_depth:
        flops += 6 * c.mtp_active + m.mtp_depth * per_layer
    return flops
