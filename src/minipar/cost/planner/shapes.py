"""What one rank holds of a layout: the parameters of a layer and of the fullest stage, the
width of its K/V rows and its dense GEMMs' shapes (inputs of the compute, communication and
memory terms)."""

from __future__ import annotations

from typing import NamedTuple

from .layout import Layout, stage_layers


class StageParams(NamedTuple):
    """Parameters of one layer and of the first (fullest) stage, as one rank of t·cp sees them
    before the t split: the dense part is replicated over d·cp, the experts over d·cp/ep."""

    dense_layer: float  # Eq. 2's layer less its MLP: 4h² + 13h
    expert_layer: float  # the MLP, all E experts (ModelShape.expert_params_per_layer)
    layer: float  # what one rank holds of a layer: dense + experts/ep
    stage: float  # L/p layers + the (V + s)·h embedding (first and last stage)
    dense: float  # the stage's dense part, embedding included
    expert: float  # the stage's experts ÷ ep


def stage_params(model, layout: Layout) -> StageParams:
    """Narayanan et al. 2021 Eq. 2 per stage (:class:`~minipar.cost.planner.three_d.ModelShape`'s
    counts); Megatron keeps the whole V·h embedding (+ the s·h learned positions) on the first
    stage and a tied copy, or the untied output layer, on the last, split over t: with p = 1
    an untied model holds both. The fullest stage: the first (its layers and the embedding),
    or under the "units" split a middle one when its extra layer outweighs the embedding."""
    mid, end = stage_layers(model.layers, layout)
    exp_layer = model.expert_params_per_layer
    dense_layer = model.dense_params_per_layer
    layer = dense_layer + exp_layer / layout.ep
    emb = model.embedding_params(both_ends=layout.pp == 1)
    lp = end
    if mid * layer > end * layer + emb:
        lp, emb = mid, 0
    return StageParams(
        dense_layer,
        exp_layer,
        layer,
        lp * layer + emb,
        lp * dense_layer + emb,
        lp * exp_layer / layout.ep,
    )


def kv_width_per_rank(model, t: int) -> int:
    """Width of the K (or V) rows one TP rank holds: kv/t heads of h/a each, kv the model's
    key/value heads (a without GQA). Megatron-Core requires t to divide the key/value heads
    (``num_query_groups % tensor_model_parallel_size == 0``): it neither replicates nor splits
    a head, and :func:`minipar.cost.planner.three_d.check` refuses t > kv."""
    kv = model.kv_heads or model.heads
    return (model.hidden // model.heads) * -(-kv // t)


def layer_dense_gemms(model, layout: Layout) -> list[tuple[int, int, int]]:
    """The dense (M, N, K) GEMMs of one layer on one of t ranks at the shape's own widths: QKV
    (b·s/cp, h/t + 2·kv_width_per_rank, h), the projection (·, h, h/t), the MLP's first
    (·, (matrices − 1)·K·f/t, h) and last (·, h, K·f/t), K the routed experts."""
    t, h, bs = layout.tp, model.hidden, layout.micro_batch * (model.seq // layout.cp)
    f = model.top_k * model.ffn_width // t
    n_qkv = h // t + 2 * kv_width_per_rank(model, t)
    return [(bs, n_qkv, h), (bs, h, h // t), (bs, (model.mlp_matrices - 1) * f, h), (bs, h, f)]
