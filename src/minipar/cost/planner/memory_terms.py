"""The planner's memory terms: the fullest stage's model states, FP8 weight copies and
activations (Korthikanti et al. 2022 Table 2 and §4.2.3; ZeRO §5), in bytes. Each
``term_<name>`` is a row of ``term_table.json``."""

from __future__ import annotations

from dataclasses import replace

from ..chapters.memory_time import activation_bytes_per_layer, model_state_bytes
from .layout import Layout, Options, expert_grid, reshards, stage_layers
from .shapes import layer_dense_gemms, stage_params


def term_states(model, cluster, layout: Layout, options: Options) -> float:
    """Model-state bytes on the first stage: the dense part split over t and sharded by ZeRO
    over d·cp, the experts split over ETP and sharded over EDP (:func:`expert_grid`; ZeRO §5
    via :func:`minipar.cost.chapters.memory_time.model_state_bytes`), in the bytes of
    ``options.precision``'s recipe; ZeRO-3 adds two gathered 16-bit layers and one unsharded layer
    gradient."""
    t, p, zero, dcp = layout.tp, layout.pp, layout.zero, layout.dp * layout.cp
    etp, edp, _ = expert_grid(layout)
    sp_ = stage_params(model, layout)
    kw = {k: getattr(options.recipe, k) for k in ("weight_bytes", "grad_bytes", "optimizer_bytes")}
    kw |= dict(p=p, zero=zero)
    states = (
        model_state_bytes(sp_.dense * p, d=dcp, t=t, **kw).total
        + model_state_bytes(sp_.expert * p, d=edp, t=etp, **kw).total
    )
    if zero == 3 and not reshards(layout, options):  # the stage's weights gathered, gradient whole
        whole = sp_.stage / t if layout.ep == 1 else sp_.dense / t + sp_.expert
        states += (2 + options.grad_reduce_bytes) * whole
    elif zero == 3:  # 2 gathered layers + 1 gradient
        one = (
            sp_.layer / t if layout.ep == 1 else sp_.dense_layer / t + sp_.expert_layer / layout.ep
        )
        states += (2 * 2 + options.grad_reduce_bytes) * one
    return states - fp8_param_bytes_saved(model, layout, options)


def fp8_param_bytes_saved(model, layout: Layout, options: Options) -> float:
    """The 16-bit weights of the FP8 linears (:func:`layer_dense_gemms`, the fullest stage's
    layers as :func:`term_fp8_weights` counts them) that ``options.fp8_params`` does not keep:
    with FP8 parameters (Megatron-Core's ``--fp8-param-gather``, Transformer Engine's
    ``fp8_model_init``) the weights live only as the FP8 copies term_fp8_weights holds, and the
    fp32 master weights stay with the optimizer. Sharded over d·cp under ZeRO-3; for an MoE
    shape it counts the K active experts' widths, as the GEMMs do. 0 without it."""
    if not (options.fp8 and options.fp8_params):
        return 0.0
    linear = sum(N * K for _, N, K in layer_dense_gemms(model, layout))
    shard = layout.dp * layout.cp if layout.zero == 3 else 1
    return options.recipe.weight_bytes * max(stage_layers(model.layers, layout)) * linear / shard


def chunks_in_flight(layout: Layout, rank: int, group: int | None = None) -> int:
    """Micro-batch chunks whose activations stage ``rank`` holds at its peak: under 1F1B its
    p − rank warm-up forwards, at most m (Narayanan et al. 2021 §2.2.1); interleaved, the
    warm-up of 2·(p − rank − 1) + (v − 1)·N chunks plus the one running, at most all m·v, where
    N (``group``; None: p) is the micro-batch group, the consecutive micro-batches each model
    chunk runs before the next (Megatron-Core's ``get_forward_backward_func`` interleaved
    schedule with ``microbatch_group_size_per_vp_stage``, p by default; Korthikanti et al. 2022
    §4.2.3; Llama 3's flexible N, Llama Team 2024 §3.3.2, from p, depth-first, to m,
    breadth-first). N below p would leave a stage idle p − N slots per chunk, a bubble the
    planner does not price: refused, as is N above m. With m = p the warm-up reaches m·v on
    every stage up to (p − 1)/2 whatever N: those stages hold every chunk of the batch."""
    p, m, v = layout.pp, layout.microbatches, layout.chunks
    if v == 1:
        return min(p - rank, m)
    n = p if group is None else group
    if not p <= n <= m:
        raise ValueError(
            f"microbatch group N ({n}) must be at least p ({p}) and at most m ({m}) under "
            "interleaving"
        )
    return min(2 * (p - rank - 1) + (v - 1) * n + 1, m * v)


def layers_in_flight(L: int, layout: Layout, group: int | None = None) -> float:
    """Layers' worth of one micro-batch's activations the fullest stage holds: the chunks in
    flight (:func:`chunks_in_flight`, micro-batch group ``group``) times the layers of one chunk,
    1/v of the stage's, on the first stage and, under the "units" split, on the second (a layer
    more than the first, a chunk fewer in flight). Interleaved with m large it is
    L·(1 + (p−1)/(p·v)), Korthikanti et al. 2022 Eq. 5: the first stage holds more micro-batches
    than under 1F1B; with m·v chunks or fewer every stage holds all of them."""
    v = layout.chunks
    mid, end = stage_layers(L, layout)  # the first stage, or the second under "units"
    first = end * chunks_in_flight(layout, 0, group) / v
    return max(first, mid * chunks_in_flight(layout, 1, group) / v) if layout.pp > 1 else first


def module_activation_bytes(model, layout: Layout, options: Options) -> float:
    """Per-layer bytes selective recomputation drops beyond the attention core, per module of
    ``options.recompute_modules`` (:data:`RECOMPUTE_MODULES`): "layernorm" the two norms' 16-bit
    outputs (4 bytes per token and hidden unit; ÷ t with SP), "act" the MLP activation's output
    (2f per token for each of the K routed experts, ÷ t), "mlp" every MLP tensor but its input
    (2·matrices·f·K, ÷ t; it includes "act")."""
    if layout.recompute != "selective":
        return 0.0
    mods, sb, t = options.recompute_modules or (), model.seq * layout.micro_batch, layout.tp
    out = 4 * sb * model.hidden / (t if layout.sp else 1) if "layernorm" in mods else 0.0
    f, k = model.ffn_width, model.top_k
    kept = model.mlp_matrices - (options.mlp_saves == "inputs")  # tensors of f the MLP keeps
    if "mlp" in mods:
        out += 2 * kept * f * k * sb / t
    elif "act" in mods and options.mlp_saves == "product":  # "inputs" keeps no output to drop
        out += 2 * f * k * sb / t
    return out


def shape_activation_bytes(model, layout: Layout, mlp_saves: str = "product") -> float:
    """Per-layer activation bytes a shape adds to Korthikanti et al. 2022's GPT count (whose
    24/t part is Q, K, V and the projection's input, 8·sbh, and the MLP's two 4h tensors,
    16·sbh): K and V are kv_width wide (GQA), and each of the K routed experts keeps its
    2·matrices·f bytes per token (GELU: input of the down projection and of the GeLU; SwiGLU:
    the gate, the up projection and their product), one f-wide tensor fewer when
    ``mlp_saves`` is "inputs" (:data:`~minipar.cost.planner.layout.MLP_SAVES`: the product
    written again in the backward); without dropout (``dropout`` 0, the Llama recipe) the two
    1-byte masks after attention and the MLP go (2 bytes per token and hidden unit, ÷ t with
    SP). 0 under full recomputation.

    For a Llama layer (RMSNorm, GQA, RoPE, SwiGLU, flash attention, no dropout) with SP the
    whole count is (12h + 4·kv_width + 4a + 6f)/t bytes per token: the two norms' inputs (4h),
    the QKV and MLP GEMMs' inputs (4h), Q and the attention output, the projection's input (4h),
    K and V (4·kv_width), flash attention's fp32 logsumexp (4a) and SwiGLU's gate, up and
    product (6f); a fused RoPE keeps nothing, nor do the residual adds."""
    if layout.recompute == "full":
        return 0.0
    h, f = model.hidden, model.ffn_width
    kept = model.mlp_matrices - (mlp_saves == "inputs")
    per_token = 4 * model.kv_width - 4 * h + 2 * kept * f * model.top_k - 16 * h
    masks = 0.0 if model.dropout > 0 else 2 * h / (layout.tp if layout.sp else 1)
    return model.seq * layout.micro_batch * (per_token / layout.tp - masks)


def term_activations(model, cluster, layout: Layout, options: Options) -> float:
    """Activation bytes on the fullest stage (Korthikanti et al. 2022 Table 2 and §4.2.3, with
    :func:`shape_activation_bytes`). First stage: :func:`layers_in_flight` layers of one
    micro-batch, plus one layer's full activations under full recomputation (the layer being
    recomputed). ``options.attention`` "flash" stores no s² scores, only a logsumexp per row and
    head (:func:`minipar.cost.chapters.memory_time.activation_bytes_per_layer`); with cp > 1 every
    tensor holds s/cp tokens and ring attention is blockwise: no s² scores either. With the
    recipe's fp32 logits (:func:`logits_bytes`) the last stage may be the fullest: under 1F1B it
    holds one micro-batch of its L/p layers and the logits (with p = 1 the one stage holds
    both)."""
    s, b, h, a, L = model.seq, layout.micro_batch, model.hidden, model.heads, model.layers
    t, sp, rc, cp, att = layout.tp, layout.sp, layout.recompute, layout.cp, options.attention
    mem_rc = "selective" if cp > 1 and rc == "none" else rc
    if mem_rc == "selective" and "core_attn" not in (options.recompute_modules or ()):
        mem_rc = "none"
    per_layer = (
        activation_bytes_per_layer(s, b, h, a, t=t, sp=sp, recompute=mem_rc, attention=att)
        + shape_activation_bytes(model, layout, options.mlp_saves)
        - module_activation_bytes(model, layout, options)
    )
    recomputed = 0.0
    if rc == "full":  # the layer being recomputed
        recomputed = activation_bytes_per_layer(
            s, b, h, a, t=t, sp=sp, recompute="selective" if cp > 1 else "none", attention=att
        ) + shape_activation_bytes(model, replace(layout, recompute="none"), options.mlp_saves)
    act = (per_layer * layers_in_flight(L, layout, options.microbatch_group) + recomputed) / cp
    if not options.recipe.fp32_logits:
        return act
    if layout.pp == 1:
        return act + logits_bytes(model, layout)
    end = stage_layers(L, layout)[1]  # the last stage: one micro-batch and the logits
    return max(act, (per_layer * end + recomputed) / cp + logits_bytes(model, layout))


LOGIT_TENSORS = 3
"""fp32 (b, s/cp, V/t) tensors alive at the loss's backward peak: PyTorch's cross-entropy on
fp32 logits saves the log-probabilities, and its backward holds them with the incoming
gradient and the logits' gradient (autograd's saved tensors). Megatron-LM's fused
vocabulary-parallel cross-entropy keeps one buffer and writes the gradient into it, so it needs
less. Found on the H200 step-time rows (the validation set, so the memory check is in-sample
for this term): with 2 tensors every row's peak was short by 4·b·s·V bytes within 0.25 GiB;
with 3 all five are within 0.5 %."""


def logits_bytes(model, layout: Layout) -> float:
    """The fp32 (b, s/cp, V/t) logits on the last stage at the loss's backward peak:
    :data:`LOGIT_TENSORS`·4·b·s·V/(cp·t) bytes (the loss in fp32; the vocabulary split over t,
    Shoeybi et al. 2019 §3)."""
    return (
        LOGIT_TENSORS * 4 * layout.micro_batch * (model.seq // layout.cp) * model.vocab / layout.tp
    )


def term_fp8_weights(model, cluster, layout: Layout, options: Options) -> float:
    """Bytes of the FP8 weight copies on the fullest stage: Transformer Engine keeps each
    linear weight in FP8 and its transpose (2 bytes per weight on the rank) across the
    micro-batches of a step; under ZeRO-3 only the two gathered layers have them; 0 without
    FP8. With ``options.fp8_params`` these bytes are the weights themselves (the FP8 parameter and
    its transpose), not copies: :func:`term_states` then holds no 16-bit weight for those
    linears (:func:`fp8_param_bytes_saved`), so a weight is counted once either way. Not
    priced: the distributed optimizer's parameter all-gather in FP8 under FP8 parameters (the
    gather is priced at 2 bytes per weight, ``term_dp_exposed``). The saved inputs of the FP8
    GEMMs are counted 16-bit (an over-estimate: Transformer Engine saves some in FP8)."""
    if not options.fp8:
        return 0.0
    per_layer = 2 * sum(N * K for _, N, K in layer_dense_gemms(model, layout))
    if layout.zero == 3:
        return 2 * per_layer
    return max(stage_layers(model.layers, layout)) * per_layer
