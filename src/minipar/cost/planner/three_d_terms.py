"""The 3D planner's step time and memory as a sum of named terms, one pure function per term.

:func:`minipar.cost.planner.three_d.evaluate` calls :func:`breakdown`, which runs every term of
the one table :data:`minipar.cost.planner.term_table.TERMS` in order,
``term_<name>(model, cluster, layout, options, *needs)``, each earlier result it ``needs``
passed as an argument of that name (a typed record: :class:`ComputeTerm`,
:class:`Zero3Term`, ...); a ``Config`` holds the resulting
:class:`~minipar.cost.planner.breakdown.StepBreakdown`. The terms live by kind:
:mod:`~minipar.cost.planner.layout` (the options and the layout),
:mod:`~minipar.cost.planner.shapes` (what one rank holds),
:mod:`~minipar.cost.planner.compute_terms`, :mod:`~minipar.cost.planner.communication_terms`
and :mod:`~minipar.cost.planner.memory_terms`; this module imports them all, so
``three_d_terms.term_tp`` and the helpers are read here as before. The explorer's JavaScript
(``widgets/three_d_model.js``) has one twin per term, camelCase (``term_tp`` → ``termTp``), so a
parity failure names the term. The model each term implements, with its sources, is stated in
:mod:`minipar.cost.planner.three_d`'s docstring and in the term's own.

Units: seconds, bytes; rank order t → cp → d → p (Megatron's).
"""

from __future__ import annotations

from .breakdown import StepBreakdown
from .communication_terms import (
    DpTerm,
    EpTerm,
    LinkTerm,
    Zero3Term,
    dp_allreduce_seconds,
    dp_exposed_seconds,
    dp_reduce_seconds,
    dp_windows,
    ep_all_to_all_seconds,
    split_gemm_extra,
    term_cp,
    term_dp_exposed,
    term_edp_exposed,
    term_embedding,
    term_ep,
    term_pp,
    term_tp,
    term_zero3_exposed,
    tp_collectives,
    tp_overlap_cost,
    tp_overlap_exposed,
    zero3_collective_seconds,
    zero3_gathers,
)
from .compute_terms import (
    ComputeTerm,
    fp8_gemm_delta,
    layer_gemm_seconds,
    module_recompute_seconds,
    recipe_kernels_seconds,
    term_compute,
    term_fp8_casts,
    term_optimizer,
    weight_casts_per_microbatch,
)
from .layout import (
    ALLOCATOR_MARGIN,
    CP_ALGORITHMS,
    GRAD_REDUCE_BYTES,
    HEADROOM,
    RECIPES,
    RECOMPUTE_MODULES,
    RESERVE,
    SPLITS,
    ZERO3_COLLECTIVES,
    Layout,
    Options,
    Recipe,
    expert_grid,
    options,
    reshards,
    stage_layers,
    term_bubble,
)
from .memory_terms import (
    LOGIT_TENSORS,
    layers_in_flight,
    logits_bytes,
    module_activation_bytes,
    shape_activation_bytes,
    term_activations,
    term_fp8_weights,
    term_states,
)
from .moe_terms import (
    DUALPIPE_W,
    EP_COMM_SMS,
    GroupedGemmTerm,
    dualpipe_bubble,
    grouped_gemm_efficiency,
    grouped_gemm_half_rows,
    moe_layers,
    moe_load,
    permute_bytes,
    routed_tokens,
    term_dualpipe,
    term_ep_overlap,
    term_grouped_gemm,
    term_permute,
    term_router,
)
from .shapes import StageParams, kv_width_per_rank, layer_dense_gemms, stage_params
from .term_table import TERMS, python_name

__all__ = [  # the terms and what the planner, the validation and the tests read of them
    "ALLOCATOR_MARGIN",
    "CP_ALGORITHMS",
    "GRAD_REDUCE_BYTES",
    "HEADROOM",
    "LOGIT_TENSORS",
    "RECIPES",
    "RECOMPUTE_MODULES",
    "RESERVE",
    "SPLITS",
    "ZERO3_COLLECTIVES",
    "ComputeTerm",
    "DpTerm",
    "Layout",
    "LinkTerm",
    "Options",
    "Recipe",
    "StageParams",
    "Zero3Term",
    "breakdown",
    "dp_allreduce_seconds",
    "dp_exposed_seconds",
    "dp_reduce_seconds",
    "dp_windows",
    "ep_all_to_all_seconds",
    "expert_grid",
    "fp8_gemm_delta",
    "kv_width_per_rank",
    "layer_dense_gemms",
    "layer_gemm_seconds",
    "layers_in_flight",
    "logits_bytes",
    "module_activation_bytes",
    "module_recompute_seconds",
    "options",
    "recipe_kernels_seconds",
    "reshards",
    "shape_activation_bytes",
    "stage_layers",
    "stage_params",
    "term_activations",
    "term_bubble",
    "term_compute",
    "term_cp",
    "term_dp_exposed",
    "term_edp_exposed",
    "term_embedding",
    "term_ep",
    "term_fp8_casts",
    "term_fp8_weights",
    "term_optimizer",
    "term_pp",
    "term_states",
    "term_tp",
    "term_zero3_exposed",
    "split_gemm_extra",
    "tp_collectives",
    "tp_overlap_cost",
    "tp_overlap_exposed",
    "weight_casts_per_microbatch",
    "zero3_collective_seconds",
    "zero3_gathers",
    # mixture of experts (moe_terms)
    "DUALPIPE_W",
    "EP_COMM_SMS",
    "EpTerm",
    "GroupedGemmTerm",
    "dualpipe_bubble",
    "grouped_gemm_efficiency",
    "grouped_gemm_half_rows",
    "moe_layers",
    "moe_load",
    "permute_bytes",
    "routed_tokens",
    "term_dualpipe",
    "term_ep_overlap",
    "term_grouped_gemm",
    "term_permute",
    "term_router",
]


def _term_value(result) -> float:
    """A term's value: the number it returns, or its record's first field (``value``)."""
    return result if isinstance(result, (int, float)) else result[0]


def breakdown(model, cluster, layout: Layout, options: Options) -> StepBreakdown:
    """Every term of one (already checked) layout, kept apart: each row of
    :data:`minipar.cost.planner.term_table.TERMS` in order,
    ``term_<name>(model, cluster, layout, options, *needs)`` with the results of the terms its
    row ``needs``, by name (the function is looked up here, so a test may replace one)."""
    done: dict = {}
    module = globals()
    for term in TERMS:
        needs = (done[n] for n in term.needs)
        done[term.name] = module[python_name(term.name)](model, cluster, layout, options, *needs)
    # DualPipe's bubble, or 1F1B's
    r, f = dualpipe_bubble(layout) if options.dualpipe else term_bubble(layout)
    link = {k: getattr(v, "link", "-") for k, v in done.items()}
    dp: DpTerm = done["dp_exposed"]
    edp: DpTerm = done["edp_exposed"]
    return StepBreakdown(
        microbatches=layout.microbatches,
        bubble_relative=r,
        bubble_fraction=f,
        memory_limit=cluster.gpu.memory_bytes * (1 - options.headroom),
        margin_limit=cluster.gpu.memory_bytes * (1 - options.margin),
        values={k: _term_value(v) for k, v in done.items()},
        dp=dp.total + edp.total,  # the dense and the experts' reductions
        tp_link=link["tp"],
        pp_link=link["pp"],
        dp_link=link["dp_exposed"],
    )
