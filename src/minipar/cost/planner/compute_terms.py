"""The planner's compute terms: one micro-batch's layers and output layer on the slowest stage,
its FP8 casts, and the optimizer step, from the kernel model (:mod:`minipar.cost.kernels.compute`).
Each ``term_<name>`` is a row of ``term_table.json``."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from ..kernels.compute import (
    SCORE_BYTES_BWD,
    SCORE_BYTES_FWD,
    attention_core_and_mlp_seconds,
    elementwise_kernels,
    elementwise_seconds,
    fp8_cast_bytes_per_token,
    fp8_weight_cast_bytes,
    fused_activation_seconds,
    gpu_gemm_seconds,
    layer_seconds,
    logits_seconds,
    optimizer_seconds,
)
from .layout import Layout, Options, expert_grid, stage_layers
from .moe_terms import moe_load
from .shapes import kv_width_per_rank, layer_dense_gemms, stage_params


class ComputeTerm(NamedTuple):
    value: float  # L/p layers + the output layer: the compute of one pipeline slot
    layer: float  # one layer, forward + backward + recomputation, all cp key blocks
    core: float  # one (s/cp)² attention-core block, forward(s) + backward


def _gemm_pass(gpu, M: int, N: int, K: int, fp8: bool | str = False) -> tuple[float, float]:
    """(forward, backward) seconds of one (M, N, K) GEMM under the GPU's rule: the backward's
    input and weight gradients (M, K, N) and (K, N, M) (:mod:`minipar.cost.kernels.compute`);
    ``fp8``: FP8 operands under that scaling (:func:`~minipar.cost.kernels.compute.gpu_gemm_seconds`)."""
    f, di, dw = (gpu_gemm_seconds(gpu, *mnk, 1, fp8) for mnk in ((M, N, K), (M, K, N), (K, N, M)))
    return f, di + dw


def fp8_gemm_delta(model, cluster, layout: Layout, options: Options) -> float:
    """Seconds one layer's dense GEMMs (:func:`layer_dense_gemms`) gain under ``options.fp8``: each
    at the FP8 rate less at the bf16 one, forward (twice under full recomputation) and
    backward (Micikevicius et al. 2022, "FP8 Formats for Deep Learning": the three GEMMs of
    each linear layer in FP8; Transformer Engine, torchao Float8); 0 without FP8."""
    if not options.fp8:
        return 0.0
    return layer_gemm_seconds(model, cluster, layout, options) - layer_gemm_seconds(
        model, cluster, layout, replace(options, fp8=None, fp8_params=False)
    )


def term_compute(model, cluster, layout: Layout, options: Options) -> ComputeTerm:
    """Compute of one micro-batch on the last stage: :func:`~minipar.cost.kernels.compute.layer_seconds`
    per layer on s/cp tokens with ``options.attention``; the attention core once more for each of
    the other cp−1 key blocks, GEMMs (or the flash kernel) and, unfused, the per-score bytes
    (``GPU.attention_score_bytes``, the forward's share again when recomputed); the QKV GEMM
    at the GQA width h/t + 2·kv_width_per_rank instead of 3h/t; the MLP rescaled to the active
    experts' width (K·matrices·f over GPT's 8h²), on the busiest EP rank
    (:func:`~minipar.cost.planner.moe_terms.moe_load` times the mean when ep > 1), plus the
    shared experts every token runs (DeepSeekMoE); under multi-head latent attention the
    attention core's blocks at :func:`mla_core_scale`; and
    :func:`~minipar.cost.kernels.compute.logits_seconds`."""
    b, h, a, t, rc = layout.micro_batch, model.hidden, model.heads, layout.tp, layout.recompute
    sl, gpu, att = model.seq // layout.cp, cluster.gpu, options.attention
    accumulate = options.recipe.accumulate_bytes
    kw = dict(sp=layout.sp, recompute=rc, attention=att, grad_accum_bytes=accumulate)
    lt = layer_seconds(b, sl, h, a, gpu, t, **kw).total_s
    parts = attention_core_and_mlp_seconds(b, sl, h, a, gpu, t, attention=att)
    refwd = 1 if rc == "none" else 2  # the core is recomputed
    core = refwd * parts["core_f"] + parts["core_b"]  # one (s/cp)² block
    if att == "unfused":  # its scores' bytes
        sb = gpu.attention_score_bytes
        f_share = sb * SCORE_BYTES_FWD / (SCORE_BYTES_FWD + SCORE_BYTES_BWD)
        core += (sb + (f_share if rc != "none" else 0.0)) * a * sl * sl * b / t / gpu.hbm_bandwidth
    if layout.cp > 1:  # the other cp−1 key blocks
        lt += (layout.cp - 1) * core
    n_qkv = h // t + 2 * kv_width_per_rank(model, t)
    kept = rc == "selective" and "core_attn" not in (options.recompute_modules or ())
    if kept:
        lt -= parts["core_f"]  # the attention core is kept, not recomputed
    mla = mla_core_scale(model)
    if mla != 1:  # MLA's wider heads: every core block priced above at h/a, scaled
        n_f = (1 if rc == "none" else 2) - (1 if kept else 0)
        lt += (mla - 1) * (n_f * parts["core_f"] + parts["core_b"] + (layout.cp - 1) * core)
        core *= mla
    if n_qkv != 3 * h // t:  # GQA's narrower QKV GEMM
        (gf, gb), (mf, mb) = (_gemm_pass(gpu, b * sl, n, h) for n in (n_qkv, 3 * h // t))
        lt += (2 if rc == "full" else 1) * (gf - mf) + (gb - mb)
    # active MLP / GPT's 8h²: the routed experts on the busiest EP rank, and the shared ones
    routed = model.top_k * moe_load(model, layout, options) + model.shared_experts
    scale = routed * model.mlp_matrices * model.ffn_width / (2 * 4 * h)
    if scale != 1:
        lt += (scale - 1) * ((2 if rc == "full" else 1) * parts["mlp_f"] + parts["mlp_b"])
    lt += module_recompute_seconds(model, cluster, layout, options, scale * parts["mlp_f"])
    lt += recipe_kernels_seconds(model, cluster, layout, options) + fp8_gemm_delta(
        model, cluster, layout, options
    )
    mid, end = stage_layers(model.layers, layout)  # the slowest stage
    logits = logits_seconds(b, sl, h, model.vocab, gpu, t)
    return ComputeTerm(max(mid * lt, end * lt + logits), lt, core)


def mla_core_scale(model) -> float:
    """The attention core of multi-head latent attention over the h/a-wide heads the kernel
    model prices: a heads of d_qk = nope + rope in the scores and d_v in attention·V, against
    2·h/a (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §2.1.1: d_qk = 192, d_v = 128,
    h/a = 56: 2.86 ×); 1 without MLA. MLA's projections (the low-rank down and up ones) are
    priced as the QKV and output GEMMs of h/a heads (DeepSeek-V3: 187 M against 206 M
    multiply-adds per token, an approximation)."""
    if not model.kv_lora:
        return 1.0
    return (
        model.heads
        * (model.qk_nope_dim + model.qk_rope_dim + model.v_head_dim)
        / (2 * model.hidden)
    )


def recipe_kernels_seconds(model, cluster, layout: Layout, options: Options) -> float:
    """Where the GPU prices element-wise kernels one by one (``GPU.elementwise_bandwidth``,
    the H200's and the H100s'): the recipe's own kernels
    (:func:`~minipar.cost.kernels.compute.elementwise_kernels`: the shape's norm, GeLU or SwiGLU on
    the K active experts' f, RoPE, dropout only when above 0, residual adds, bias gradients),
    each at max(issue time, traffic) (:func:`~minipar.cost.kernels.compute.elementwise_seconds`), in
    place of the fused byte count and the fixed per-layer time that ``layer_seconds``
    charged; fused and without issue time when ``options.compiled``."""
    gpu = cluster.gpu
    if not gpu.elementwise_bandwidth:
        return 0.0
    b, sl, h, t, rc = (
        layout.micro_batch,
        model.seq // layout.cp,
        model.hidden,
        layout.tp,
        layout.recompute,
    )
    recipe = {k: getattr(model, k) for k in ("norm", "mlp_matrices", "dropout", "bias")}
    recipe["rope"] = model.positions == "rope"
    kernels = elementwise_kernels(
        h, model.ffn_width * model.top_k, model.kv_width, t, sp=layout.sp, recipe=recipe
    )
    fixed = gpu.layer_overhead_s * (4 / 3 if rc == "full" else 1)
    return (
        elementwise_seconds(kernels, b * sl, gpu, rc, options.compiled)
        - fused_activation_seconds(b, sl, h, t, gpu, sp=layout.sp, recompute=rc)
        - fixed
    )


def module_recompute_seconds(
    model, cluster, layout: Layout, options: Options, mlp_forward: float
) -> float:
    """What selective recomputation of ``options.recompute_modules`` re-runs per layer beyond the
    attention core: the two norms (read and write (b, s, h): 8 bytes per token and hidden unit,
    ÷ t with SP), the MLP's activation (read its inputs, write its output: 2·matrices·f bytes
    per token and routed expert, ÷ t), or the MLP's forward GEMMs (``mlp_forward``) and its
    activation; all memory-bound at the HBM bandwidth but the GEMMs. With ``options.mlp_saves``
    "inputs" the backward writes the activation's output again (2·f bytes per token and routed
    expert, ÷ t: xFormers' ``silu_bw_fused`` returns it beside the gradients it writes anyway)
    under any recomputation, unless the modules recompute the activation already."""
    mods = (options.recompute_modules or ()) if layout.recompute == "selective" else ()
    sl, t = layout.micro_batch * (model.seq // layout.cp), layout.tp
    moved = 8 * sl * model.hidden / (t if layout.sp else 1) if "layernorm" in mods else 0.0
    if "mlp" in mods or "act" in mods:
        moved += 2 * model.mlp_matrices * model.ffn_width * model.top_k * sl / t
    elif options.mlp_saves == "inputs":
        moved += 2 * model.ffn_width * model.top_k * sl / t
    return moved / cluster.gpu.hbm_bandwidth + (mlp_forward if "mlp" in mods else 0.0)


def term_fp8_casts(model, cluster, layout: Layout, options: Options) -> float:
    """FP8 scaling of one micro-batch on the slowest stage, per layer: the casts of the four
    dense GEMMs' inputs forward (again under full recomputation) and of their output gradients
    backward (:func:`~minipar.cost.kernels.compute.fp8_cast_bytes_per_token` under
    ``options.fp8``'s scaling), all at the HBM rate (fused cast-transpose kernels, Transformer
    Engine); and the layer's weights (:func:`weight_casts_per_microbatch`): cast once per
    optimizer step, not once per micro-batch. 0 without FP8."""
    if not options.fp8:
        return 0.0
    t, tokens = layout.tp, layout.micro_batch * (model.seq // layout.cp)
    widths = (model.hidden, model.top_k * model.ffn_width, model.kv_width, t)
    kw = dict(sp=layout.sp, scaling=options.fp8, mlp_matrices=model.mlp_matrices)
    fwd, bwd = fp8_cast_bytes_per_token(*widths, **kw)
    refwd = 2 if layout.recompute == "full" else 1
    per_layer = tokens * (refwd * fwd + bwd) / cluster.gpu.hbm_bandwidth
    return stage_layers(model.layers, layout)[0] * (
        per_layer + weight_casts_per_microbatch(model, cluster, layout, options)
    )


def weight_casts_per_microbatch(model, cluster, layout: Layout, options: Options) -> float:
    """One layer's FP8 weight casts (:func:`~minipar.cost.kernels.compute.fp8_weight_cast_bytes`
    per weight on the rank, at the HBM rate) spread over the step's m micro-batches: once per
    optimizer step. Transformer Engine casts a weight on the first micro-batch of a step and
    reuses the cached FP8 copy for the rest (its modules' ``is_first_microbatch`` argument,
    "Using FP8 with Transformer Engine", FP8 weight caching; Megatron-Core passes it on each
    step's first micro-batch); with FP8 parameters the optimizer writes the FP8 weight once per
    step instead. Per micro-batch that is 1/m of the cast (a share the bubble stretches, as it
    stretches every slot term). 0 without FP8."""
    if not options.fp8:
        return 0.0
    weights = fp8_weight_cast_bytes(options.fp8) * sum(
        N * K for _, N, K in layer_dense_gemms(model, layout)
    )
    return weights / cluster.gpu.hbm_bandwidth / layout.microbatches


def layer_gemm_seconds(model, cluster, layout: Layout, options: Options) -> float:
    """One layer's dense GEMMs (:func:`layer_dense_gemms`) forward (twice under full
    recomputation) and backward, at the FP8 rate under ``options.fp8``: the compute TP's
    collectives can overlap with."""
    refwd, out = (2 if layout.recompute == "full" else 1), 0.0
    for M, N, K in layer_dense_gemms(model, layout):
        f, b = _gemm_pass(cluster.gpu, M, N, K, options.fp8 or False)
        out += refwd * f + b
    return out


def term_optimizer(model, cluster, layout: Layout, options: Options) -> float:
    """The Adam step on this rank's shard (:func:`minipar.cost.kernels.compute.optimizer_seconds`): the
    dense parameters ÷ t (÷ d·cp under ZeRO ≥ 1), the experts ÷ ETP (÷ EDP), at the recipe's
    bytes per parameter."""
    dcp, t = layout.dp * layout.cp, layout.tp
    sp_ = stage_params(model, layout)
    if layout.ep == 1:
        shard = ((sp_.dense / dcp + sp_.expert / dcp) if layout.zero >= 1 else sp_.stage) / t
    else:
        etp, edp, _ = expert_grid(layout)
        z = layout.zero >= 1
        shard = sp_.dense / t / (dcp if z else 1) + sp_.expert / etp / (edp if z else 1)
    return optimizer_seconds(shard, cluster.gpu, options.recipe.adam_bytes)
