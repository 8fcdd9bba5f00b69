"""The 3D planner's step time and memory as a sum of named terms, one pure function per term.

:func:`minipar.cost.planner.three_d.evaluate` calls :func:`breakdown`, which runs every term of the one
table :data:`minipar.cost.planner.term_table.TERMS` in order, each ``term_<name>(m_, cl, lay, opt,
ctx)``; a ``Config`` holds the resulting :class:`~minipar.cost.planner.breakdown.StepBreakdown`. The
explorer's JavaScript (``widgets/three_d.js``) has one twin per function here, named in
camelCase (``term_tp`` → ``termTp``), so a parity failure names the term. The model each
term implements, with its sources, is stated in :mod:`minipar.cost.planner.three_d`'s docstring and in the
term's own.

Inputs: a :class:`~minipar.cost.planner.three_d.ModelShape` ``m_``, a ``Cluster`` ``cl``, a
:class:`Layout` (the integers of one layout and the global batch) and :class:`Options` (the
model's switches). Units: seconds, bytes; rank order t → cp → d → p (Megatron's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from ..chapters.context_parallel import allgather_collectives_per_layer, ring_sent_bytes_per_layer
from ..chapters.expert_parallel import all_to_all_time
from ..chapters.memory_time import activation_bytes_per_layer, model_state_bytes
from ..chapters.pipeline_parallel import bubble_fraction_of_total, bubble_relative_to_ideal
from ..kernels.compute import (
    FP8_SCALING,
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
from ..model import ATTENTION
from ..network.collectives import collective_time, hierarchical_all_reduce_time
from .breakdown import StepBreakdown
from .term_table import TERMS, python_name

HEADROOM = 0.10
"""Fraction of a GPU's memory "fits" leaves free in the 2021 runs, for the CUDA context, NCCL
buffers, workspaces and fragmentation (Rajbhandari et al. 2020 §3.2 report out-of-memory errors
with over 30 % free in extreme cases)."""

GRAD_REDUCE_BYTES = 4
"""Bytes per gradient element in the data-parallel reduction: Megatron-LM accumulates and
reduces bf16 gradients in fp32 by default (``accumulate_allreduce_grads_in_fp32``)."""

ZERO3_COLLECTIVES = ("hierarchical", "flat-ring")
"""Algorithms for ZeRO-3's per-layer collectives over a group spanning nodes: NCCL's multi-NIC
(hierarchical, multi-rail) one, the default as for every other group, or the flat ring through
one NIC per GPU that DeepSpeed's ZeRO-3 reached in 2021 (Narayanan et al. 2021 §5.2; kept to
reproduce that comparison)."""


CP_ALGORITHMS = ("ring", "all-gather")


class Recipe(NamedTuple):
    """A mixed-precision recipe: bytes per parameter of each model state, of the DP reduction,
    of the per-micro-batch gradient accumulation and of the Adam step, and whether the fp32
    logits and their gradient count in the peak memory."""

    weight_bytes: float
    grad_bytes: float
    optimizer_bytes: float
    reduce_bytes: float
    accumulate_bytes: float
    adam_bytes: float
    fp32_logits: bool
    headroom: float  # the hard reserve: "fits" keeps this fraction free
    margin: float  # the allocator margin: a layout above it is flagged "tight", not refused


ALLOCATOR_MARGIN = 0.12
"""Fraction of a GPU's memory inside which a layout of the modern recipes is flagged "tight"
(it no longer decides whether a layout fits: :data:`RESERVE` does). It stands for the CUDA
context, NCCL, cuBLAS workspaces and the caching allocator's fragmentation, set from the whole-step rows of
measurements/h200_step_times.json (one H200, the "megatron" recipe): with two fp32 logit
tensors their ``torch.cuda.max_memory_allocated()`` exceeded this model's bytes by 2.6 % to
12.9 % (GPT 350M, the smallest), and 12 % free admits up to 1/(1 − 0.12) = 1.136 times the
model's bytes. With :data:`LOGIT_TENSORS` = 3 the allocated peaks are within 0.5 %, and the
margin is what ``max_memory_allocated`` does not count (the context, NCCL and cuBLAS buffers,
the allocator's reserve), which that file does not measure: an assumption kept at 12 %. The
2021 reproductions keep their 10 %."""

RESERVE = 0.025
"""Fraction of a GPU's memory the modern recipes keep free whatever the layout: the CUDA context
(about 0.5 GiB), NCCL's buffers and cuBLAS workspaces, 2 GiB of 80 in all (an assumption: no
file here measures them; set knowing that Llama 3 405B trained at 8K without activation
checkpointing, which at 77.7 GiB of 80 this model admits only below a 2.9 % reserve).
Above it, up to :data:`ALLOCATOR_MARGIN`, a layout is "tight": the caching allocator's
fragmentation, measured on single-GPU runs, may or may not leave room, so the margin flags a
layout rather than deciding against it (at scale a 1 GiB difference in a 12 % margin used to
push Llama 3 405B to full recomputation)."""

RECOMPUTE_MODULES = ("core_attn", "layernorm", "act", "mlp")
"""What selective recomputation may drop and recompute, per module (Megatron-Core's
``--recompute-modules``; torchtitan's selective activation checkpointing saves the matmul and
attention outputs and recomputes the rest): the attention core's scores (Korthikanti et al.
2022 §5; nothing to drop under flash attention, which recomputes them anyway), the two norms'
outputs, the MLP's activation output (GeLU, or SwiGLU's product), or the whole MLP but its input."""

SPLITS = ("even", "units")
"""Pipeline splits: "even" puts L/p layers on every stage (L divisible by p; the embedding and
the head on top of the first and last stage, Megatron-LM 2021); "units" counts the embedding
and the head as one layer each (Megatron-Core's ``--account-for-embedding-in-pipeline-split``
and ``--account-for-loss-in-pipeline-split``; Llama 3 405B's 126 layers on 16 stages): the
middle stages hold u = ⌈(L + 2)/p⌉ layers, the first and the last u − 1 with the embedding or
the head. Interleaved (v chunks per stage) it needs L + 2 divisible by p·v, as Megatron-Core
does: the first and the last virtual stage are one layer short (Llama 3.1 405B on p = 8, v = 8
in NVIDIA's recipes), and every physical stage holds what it holds with v = 1."""

RECIPES: dict[str, Recipe] = {
    # The 2021 reproductions as this model priced them: ZeRO's 16 bytes per parameter
    # (Rajbhandari et al. 2020 §3.1: 2 + 2 + 12), the reduction in fp32, no logits, 10 % free.
    "2021": Recipe(2, 2, 12, GRAD_REDUCE_BYTES, 10, 30, False, HEADROOM, HEADROOM),
    # Megatron-LM's default (Megatron-Core ``DistributedDataParallel`` with fp32 main gradients,
    # ``accumulate_allreduce_grads_in_fp32``): bf16 weights, fp32 main gradients, fp32 master
    # weights and moments: 2 + 4 + 12 = 18 bytes; reduced in fp32; each micro-batch reads the
    # 16-bit gradient and reads + writes the fp32 one (10); Adam 30 bytes per parameter.
    "megatron": Recipe(2, 4, 12, 4, 10, 30, True, RESERVE, ALLOCATOR_MARGIN),
    # bf16 gradients, accumulated and reduced in bf16: a what-if, no stack's default (Megatron's
    # ``--no-gradient-accumulation-fusion`` is something else: it only turns off the fused fp32
    # accumulation kernel, the main gradients stay fp32; torchtitan's FSDP2 reduces in fp32,
    # ``MixedPrecisionPolicy(reduce_dtype=torch.float32)``): 2 + 2 + 12 = 16 bytes;
    # accumulation 2 + 2 + 2 = 6 bytes; Adam reads a 16-bit gradient: 28 bytes.
    "bf16-grads": Recipe(2, 2, 12, 2, 6, 28, True, RESERVE, ALLOCATOR_MARGIN),
}


@dataclass(frozen=True)
class Options:
    """The planner's switches, one config for every layout of a search (nanoGPT's one config).
    A field left ``None`` is decided once by :meth:`resolved`: the kernel and the recipe by the
    shape and the GPU's era (:func:`minipar.cost.planner.three_d.attention_for`,
    :func:`~minipar.cost.planner.three_d.precision_for`), the rest by the recipe."""

    grad_reduce_bytes: float | None = None  # per gradient element in the DP reduction
    dp_overlap: bool = True  # the DP reduction under the last micro-batch's backward when p = 1
    headroom: float | None = None  # fraction of the GPU's memory kept free
    zero3_overlap: bool = True  # ZeRO-3 prefetches one layer ahead
    zero3_collectives: str = "hierarchical"  # ZeRO-3's algorithm across nodes (ZERO3_COLLECTIVES)
    attention: str | None = None  # "unfused", "flash" or "fa3" for every layout
    precision: str | None = None  # one of RECIPES, for memory and time alike
    # the activation checkpoint wrapper inside each layer's sharded unit (torchtitan's placement,
    # any FSDP version): 2 gathers per layer and micro-batch under full recomputation, not 3
    zero3_ac_inside_unit: bool = False  # (zero3_gathers)
    overlap_grad_reduce: bool = False  # also with p > 1 (Megatron-Core's --overlap-grad-reduce)
    cp_algorithm: str = "ring"  # "ring" (Megatron-Core) or "all-gather" (Llama 3): term_cp
    # ZeRO-1/2's all-gather of the updated parameters under the next step's first forward
    # (Megatron-Core's --overlap-param-gather; None: on for the modern recipes, off for "2021")
    overlap_param_gather: bool | None = None
    # ZeRO-3 frees each layer's gathered weights after its forward (None: torchtitan's `not pp`;
    # always for "2021", DeepSpeed's ZeRO-3): reshards
    reshard_after_forward: bool | None = None
    recompute_modules: tuple | None = None  # what "selective" drops (RECOMPUTE_MODULES)
    # FP8 GEMMs of the layers' linears, one of compute.FP8_SCALING or None (bf16): the FP8 rate
    # (fp8_gemm_delta), the casts (term_fp8_casts) and the weight copies (term_fp8_weights)
    fp8: str | None = None
    # a compiled step (torch.compile, CUDA graphs, Megatron/Transformer Engine's fused kernels):
    # element-wise kernels fused, launches hidden (compute.elementwise_seconds)
    compiled: bool = False
    # TP's all-gathers and reduce-scatters (with SP) in t chunks under the GEMMs (torchtitan's
    # async TP, Megatron-Core's --tp-comm-overlap): tp_overlap_exposed
    tp_overlap: bool = False
    # MoE routing imbalance: the busiest EP rank's routed tokens over the mean (1: perfectly
    # balanced). It sets the step, since every rank waits for that rank's expert GEMMs and
    # all-to-alls. The expert-parallel chapter measures it: 1.2-1.8 on its toy router.
    moe_imbalance: float = 1.0

    @property
    def recipe(self) -> Recipe:
        return RECIPES[self.precision or "2021"]

    def resolved(self, attention: str, precision: str) -> "Options":
        """Every ``None`` filled: the kernel and the recipe given, then the recipe's bytes and
        the era's switches (``reshard_after_forward`` stays ``None``: it depends on p)."""
        o = replace(
            self, attention=self.attention or attention, precision=self.precision or precision
        )
        modern = o.precision != "2021"
        default = dict(
            grad_reduce_bytes=o.recipe.reduce_bytes,
            headroom=o.recipe.headroom,
            overlap_param_gather=modern,
            reshard_after_forward=None if modern else True,
            recompute_modules=("core_attn", "layernorm", "act") if modern else ("core_attn",),
        )
        given = {k: getattr(o, k) for k in default if getattr(o, k) is not None}
        o = replace(o, **(default | given))
        return replace(o, recompute_modules=tuple(o.recompute_modules))

    @property
    def margin(self) -> float:
        """The allocator margin above which a layout is flagged tight (at least the headroom)."""
        return max(self.headroom or 0.0, self.recipe.margin)

    def __post_init__(self):
        for name, allowed, none_ok in (
            ("zero3_collectives", ZERO3_COLLECTIVES, False),
            ("attention", ATTENTION, True),
            ("fp8", FP8_SCALING, True),
            ("cp_algorithm", CP_ALGORITHMS, False),
            ("precision", RECIPES, True),
        ):
            value = getattr(self, name)
            if value not in allowed and not (none_ok and value is None):
                raise ValueError(f"{name} ({value!r}) must be one of {', '.join(allowed)}")
        bad = [m for m in self.recompute_modules or () if m not in RECOMPUTE_MODULES]
        if bad:
            raise ValueError(
                f"recompute module ({bad[0]!r}) must be one of {', '.join(RECOMPUTE_MODULES)}"
            )
        if not self.moe_imbalance >= 1:
            raise ValueError(
                f"moe imbalance ({self.moe_imbalance}) must be >= 1 (the busiest EP rank's "
                "tokens over the mean)"
            )
        grb = GRAD_REDUCE_BYTES if self.grad_reduce_bytes is None else self.grad_reduce_bytes
        room = HEADROOM if self.headroom is None else self.headroom
        if grb <= 0 or not 0 <= room < 1:
            raise ValueError(
                f"grad_reduce_bytes ({grb}) must be > 0 and headroom ({room}) in [0, 1)"
            )


def options(**kw) -> Options:
    """:class:`Options` from keywords; an unknown one is a ``ValueError`` naming it."""
    unknown = sorted(set(kw) - set(Options.__dataclass_fields__))
    if unknown:
        raise ValueError(
            f"option ({unknown[0]!r}) must be one of {', '.join(Options.__dataclass_fields__)}"
        )
    return Options(**kw)


@dataclass(frozen=True)
class Layout:
    """One layout: t, p, d, b, v, recomputation, SP, ZeRO stage, cp, ep and the global batch B."""

    global_batch: int
    tp: int
    pp: int
    dp: int
    micro_batch: int
    chunks: int = 1
    recompute: str = "selective"
    sp: bool = False
    zero: int = 1
    cp: int = 1
    ep: int = 1
    split: str = "even"  # the pipeline split, one of SPLITS

    @property
    def microbatches(self) -> int:
        """m = B/(d·b)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def schedule(self) -> str:
        return "interleaved" if self.chunks > 1 else "1f1b"


def stage_layers(L: int, lay: Layout) -> tuple[int, int]:
    """(layers on a middle stage, layers on the first or last stage) under ``lay.split``
    (:data:`SPLITS`): L/p each when "even" (or p = 1); u = ⌈(L + 2)/p⌉ and u − 1 when "units"
    (the embedding and the head take a layer's place on the end stages)."""
    p = lay.pp
    if lay.split == "even" or p == 1:
        return L // p, L // p
    u = -(-(L + 2) // p)
    return u, u - 1


def expert_grid(lay: Layout) -> tuple[int, int, int]:
    """(ETP, EDP, EDP stride) of the experts: MoE parallel folding (Liu et al. 2025, "MoE
    Parallel Folding", §3; Megatron-Core) lays ETP × EP × EDP over the t·cp·d ranks of a stage
    with ETP = 1 once ep > 1, so EDP = t·cp·d/ep ranks, ep apart, share each expert
    (:func:`minipar.cost.chapters.expert_parallel.folded_expert_dp`); with ep = 1 the MLP is split over
    the t ranks like the attention and replicated over d·cp, t apart."""
    dcp = lay.dp * lay.cp
    if lay.ep == 1:
        return lay.tp, dcp, lay.tp
    return 1, lay.tp * dcp // lay.ep, lay.ep


class StageParams(NamedTuple):
    """Parameters of one layer and of the first (fullest) stage, as one rank of t·cp sees them
    before the t split: the dense part is replicated over d·cp, the experts over d·cp/ep."""

    dense_layer: float  # Eq. 2's layer less its MLP: 4h² + 13h
    expert_layer: float  # the MLP, all E experts (ModelShape.expert_params_per_layer)
    layer: float  # what one rank holds of a layer: dense + experts/ep
    stage: float  # L/p layers + the (V + s)·h embedding (first and last stage)
    dense: float  # the stage's dense part, embedding included
    expert: float  # the stage's experts ÷ ep


def stage_params(m_, lay: Layout) -> StageParams:
    """Narayanan et al. 2021 Eq. 2 per stage (:class:`~minipar.cost.planner.three_d.ModelShape`'s
    counts); Megatron keeps the whole V·h embedding (+ the s·h learned positions) on the first
    stage and a tied copy, or the untied output layer, on the last, split over t: with p = 1
    an untied model holds both. The fullest stage: the first (its layers and the embedding),
    or under the "units" split a middle one when its extra layer outweighs the embedding."""
    mid, end = stage_layers(m_.layers, lay)
    exp_layer = m_.expert_params_per_layer
    dense_layer = m_.dense_params_per_layer
    layer = dense_layer + exp_layer / lay.ep
    emb = m_.embedding_params(both_ends=lay.pp == 1)
    lp = end
    if mid * layer > end * layer + emb:
        lp, emb = mid, 0
    return StageParams(
        dense_layer,
        exp_layer,
        layer,
        lp * layer + emb,
        lp * dense_layer + emb,
        lp * exp_layer / lay.ep,
    )


# --- links and collectives ------------------------------------------------------------------


def _ring(op: str, n: int, nbytes: float, lk) -> float:
    return collective_time(op, "ring", n, nbytes, lk.alpha, lk.bandwidth)


def dp_allreduce_seconds(nbytes: float, d: int, t: int, cl) -> tuple[float, str]:
    """All-reduce of ``nbytes`` over the d ranks of one DP group (stride t in the rank order).

    Inside one node: a ring on the intra link. Spanning nodes with k = gpus_per_node/t group
    members per node: the hierarchical all-reduce (intra reduce-scatter, inter all-reduce on
    each rail, intra all-gather; Mikami et al. 2018). One member per node: a ring on the inter
    link. A reduce-scatter or an all-gather of the same bytes takes half this time (ring).
    """
    g = cl.gpus_per_node
    if d == 1:
        return 0.0, "-"
    if t * d <= g:
        return _ring("all-reduce", d, nbytes, cl.intra), cl.intra.name
    k = max(1, g // t)
    if k > 1 and d % k == 0:
        return hierarchical_all_reduce_time(
            d // k, k, nbytes, cl.intra, cl.inter
        ), f"{cl.intra.name}+{cl.inter.name}"
    return _ring("all-reduce", d, nbytes, cl.inter), cl.inter.name


def zero3_collective_seconds(
    nbytes: float, n: int, t: int, cl, algorithm: str = "hierarchical"
) -> tuple[float, str]:
    """One ZeRO-3 all-gather (S = ``nbytes``, the whole gathered buffer) or reduce-scatter (S the
    whole input) over the n ranks of one data-parallel group (stride t in the rank order).

    Inside one node (t·n ≤ GPUs per node): ring on the intra link. Spanning nodes:
    ``"flat-ring"``: one ring whose slowest hop limits it, so each rank's (n−1)/n·S crosses its
    own NIC: (n−1)α + (n−1)/n·S/B with B the slower of the two links (the NIC on a DGX; PCIe
    inside a PCIe server whose NIC is faster) and α the larger (Thakur et al. 2005 §4);
    ``"hierarchical"``: half of :func:`dp_allreduce_seconds` (Mikami et al. 2018), the NCCL-ideal
    algorithm that spreads the inter-node bytes over the node's NICs. Returns (seconds, link).
    """
    if algorithm not in ZERO3_COLLECTIVES:
        raise ValueError(
            f"zero3_collectives ({algorithm!r}) must be one of {', '.join(ZERO3_COLLECTIVES)}"
        )
    if n == 1:
        return 0.0, "-"
    if t * n <= cl.gpus_per_node or algorithm == "hierarchical":
        ar, name = dp_allreduce_seconds(nbytes, n, t, cl)
        return ar / 2, name
    slow = min(cl.intra, cl.inter, key=lambda lk: lk.bandwidth)  # the ring's slowest hop
    return collective_time(
        "all-gather", "ring", n, nbytes, max(cl.intra.alpha, cl.inter.alpha), slow.bandwidth
    ), slow.name


def kv_width_per_rank(m_, t: int) -> int:
    """Width of the K (or V) rows one TP rank holds: kv/t heads of h/a each, kv the model's
    key/value heads (a without GQA). Megatron-Core requires t to divide the key/value heads
    (``num_query_groups % tensor_model_parallel_size == 0``): it neither replicates nor splits
    a head, and :func:`minipar.cost.planner.three_d.check` refuses t > kv."""
    kv = m_.kv_heads or m_.heads
    return (m_.hidden // m_.heads) * -(-kv // t)


def zero3_gathers(recompute: str, ac_inside_unit: bool = False) -> int:
    """All-gathers of a layer's weights per micro-batch under ZeRO-3: forward and backward, plus
    the recomputed forward under full recomputation when the checkpoint wrapper sits outside
    the sharded unit (the unit's hooks free the gathered weights after its forward, and the
    recomputation gathers them again): 3. With the checkpoint wrapper inside the unit
    (torchtitan wraps each block in checkpointing before ``fully_shard``) the recomputation
    runs under the backward's gather: 2, as without recomputation. Where the wrapper sits
    decides the count, for FSDP1, FSDP2 and DeepSpeed alike, not the FSDP version. Selective
    recomputation re-runs only the weightless attention core: 2. One reduce-scatter of the
    gradients in every case."""
    return 3 if recompute == "full" and not ac_inside_unit else 2


def tp_collectives(t: int, sp: bool, recompute: str) -> float:
    """All-reduce equivalents per layer per micro-batch on the TP group
    (:mod:`minipar.cost.planner.three_d`): 4 (6 with full recomputation) without SP; with SP
    all-gathers and reduce-scatters, each half an all-reduce: (4 + 4 + 2)/2 = 5, or 12/2 = 6
    with full recomputation."""
    return 0.0 if t == 1 else 6.0 if recompute == "full" else 5.0 if sp else 4.0


# --- memory: model states and activations of the first stage --------------------------------


def term_states(m_, cl, lay: Layout, opt: Options, ctx=None) -> float:
    """Model-state bytes on the first stage: the dense part split over t and sharded by ZeRO
    over d·cp, the experts split over ETP and sharded over EDP (:func:`expert_grid`; ZeRO §5
    via :func:`minipar.cost.chapters.memory_time.model_state_bytes`), in the bytes of
    ``opt.precision``'s recipe; ZeRO-3 adds two gathered 16-bit layers and one unsharded layer
    gradient."""
    t, p, zero, dcp = lay.tp, lay.pp, lay.zero, lay.dp * lay.cp
    etp, edp, _ = expert_grid(lay)
    sp_ = stage_params(m_, lay)
    kw = {k: getattr(opt.recipe, k) for k in ("weight_bytes", "grad_bytes", "optimizer_bytes")}
    kw |= dict(p=p, zero=zero)
    states = (
        model_state_bytes(sp_.dense * p, d=dcp, t=t, **kw).total
        + model_state_bytes(sp_.expert * p, d=edp, t=etp, **kw).total
    )
    if zero == 3 and not reshards(lay, opt):  # the stage's weights gathered, its gradient whole
        whole = sp_.stage / t if lay.ep == 1 else sp_.dense / t + sp_.expert
        states += (2 + opt.grad_reduce_bytes) * whole
    elif zero == 3:  # 2 gathered layers + 1 gradient
        one = sp_.layer / t if lay.ep == 1 else sp_.dense_layer / t + sp_.expert_layer / lay.ep
        states += (2 * 2 + opt.grad_reduce_bytes) * one
    return states


def layers_in_flight(L: int, lay: Layout) -> float:
    """Layers' worth of one micro-batch's activations the first stage holds: min(p, m)·L/p under
    1F1B, L·(1 + (p−1)/(p·v)) interleaved (Korthikanti et al. 2022 §4.2.3, Eq. 5)."""
    p, m = lay.pp, lay.microbatches
    if lay.chunks > 1:
        return L * (1 + (p - 1) / (p * lay.chunks))
    mid, end = stage_layers(L, lay)  # the first stage, or the second under "units"
    return max(end * min(p, m), mid * min(p - 1, m))


def module_activation_bytes(m_, lay: Layout, opt: Options) -> float:
    """Per-layer bytes selective recomputation drops beyond the attention core, per module of
    ``opt.recompute_modules`` (:data:`RECOMPUTE_MODULES`): "layernorm" the two norms' 16-bit
    outputs (4 bytes per token and hidden unit; ÷ t with SP), "act" the MLP activation's output
    (2f per token for each of the K routed experts, ÷ t), "mlp" every MLP tensor but its input
    (2·matrices·f·K, ÷ t; it includes "act")."""
    if lay.recompute != "selective":
        return 0.0
    mods, sb, t = opt.recompute_modules or (), m_.seq * lay.micro_batch, lay.tp
    out = 4 * sb * m_.hidden / (t if lay.sp else 1) if "layernorm" in mods else 0.0
    f, k = m_.ffn_width, m_.top_k
    if "mlp" in mods:
        out += 2 * m_.mlp_matrices * f * k * sb / t
    elif "act" in mods:
        out += 2 * f * k * sb / t
    return out


def shape_activation_bytes(m_, lay: Layout) -> float:
    """Per-layer activation bytes a shape adds to Korthikanti et al. 2022's GPT count (whose
    24/t part is Q, K, V and the projection's input, 8·sbh, and the MLP's two 4h tensors,
    16·sbh): K and V are kv_width wide (GQA), and each of the K routed experts keeps its
    2·matrices·f bytes per token (GELU: input of the down projection and of the GeLU; SwiGLU:
    the gate, the up projection and their product); without dropout (``dropout`` 0, the Llama
    recipe) the two 1-byte masks after attention and the MLP go (2 bytes per token and hidden
    unit, ÷ t with SP). 0 under full recomputation."""
    if lay.recompute == "full":
        return 0.0
    h, f = m_.hidden, m_.ffn_width
    per_token = 4 * m_.kv_width - 4 * h + 2 * m_.mlp_matrices * f * m_.top_k - 16 * h
    masks = 0.0 if m_.dropout > 0 else 2 * h / (lay.tp if lay.sp else 1)
    return m_.seq * lay.micro_batch * (per_token / lay.tp - masks)


def term_activations(m_, cl, lay: Layout, opt: Options, ctx=None) -> float:
    """Activation bytes on the fullest stage (Korthikanti et al. 2022 Table 2 and §4.2.3, with
    :func:`shape_activation_bytes`). First stage: :func:`layers_in_flight` layers of one
    micro-batch, plus one layer's full activations under full recomputation (the layer being
    recomputed). ``opt.attention`` "flash" stores no s² scores, only a logsumexp per row and
    head (:func:`minipar.cost.chapters.memory_time.activation_bytes_per_layer`); with cp > 1 every
    tensor holds s/cp tokens and ring attention is blockwise: no s² scores either. With the
    recipe's fp32 logits (:func:`logits_bytes`) the last stage may be the fullest: under 1F1B it
    holds one micro-batch of its L/p layers and the logits (with p = 1 the one stage holds
    both)."""
    s, b, h, a, L = m_.seq, lay.micro_batch, m_.hidden, m_.heads, m_.layers
    t, sp, rc, cp, att = lay.tp, lay.sp, lay.recompute, lay.cp, opt.attention
    mem_rc = "selective" if cp > 1 and rc == "none" else rc
    if mem_rc == "selective" and "core_attn" not in (opt.recompute_modules or ()):
        mem_rc = "none"
    per_layer = (
        activation_bytes_per_layer(s, b, h, a, t=t, sp=sp, recompute=mem_rc, attention=att)
        + shape_activation_bytes(m_, lay)
        - module_activation_bytes(m_, lay, opt)
    )
    recomputed = 0.0
    if rc == "full":  # the layer being recomputed
        recomputed = activation_bytes_per_layer(
            s, b, h, a, t=t, sp=sp, recompute="selective" if cp > 1 else "none", attention=att
        ) + shape_activation_bytes(m_, replace(lay, recompute="none"))
    act = (per_layer * layers_in_flight(L, lay) + recomputed) / cp
    if not opt.recipe.fp32_logits:
        return act
    if lay.pp == 1:
        return act + logits_bytes(m_, lay)
    end = stage_layers(L, lay)[1]  # the last stage: one micro-batch and the logits
    return max(act, (per_layer * end + recomputed) / cp + logits_bytes(m_, lay))


LOGIT_TENSORS = 3
"""fp32 (b, s/cp, V/t) tensors alive at the loss's backward peak: PyTorch's cross-entropy on
fp32 logits saves the log-probabilities, and its backward holds them with the incoming
gradient and the logits' gradient (autograd's saved tensors). Megatron-LM's fused
vocabulary-parallel cross-entropy keeps one buffer and writes the gradient into it, so it needs
less. Found on the H200 step-time rows (the validation set, so the memory check is in-sample
for this term): with 2 tensors every row's peak was short by 4·b·s·V bytes within 0.25 GiB;
with 3 all five are within 0.5 %."""


def logits_bytes(m_, lay: Layout) -> float:
    """The fp32 (b, s/cp, V/t) logits on the last stage at the loss's backward peak:
    :data:`LOGIT_TENSORS`·4·b·s·V/(cp·t) bytes (the loss in fp32; the vocabulary split over t,
    Shoeybi et al. 2019 §3)."""
    return LOGIT_TENSORS * 4 * lay.micro_batch * (m_.seq // lay.cp) * m_.vocab / lay.tp


# --- one micro-batch on the slowest (last) stage ----------------------------------------------


class ComputeTerm(NamedTuple):
    value: float  # L/p layers + the output layer: the compute of one pipeline slot
    layer: float  # one layer, forward + backward + recomputation, all cp key blocks
    core: float  # one (s/cp)² attention-core block, forward(s) + backward


class LinkTerm(NamedTuple):
    value: float  # seconds per micro-batch
    link: str  # the link it crosses ("-": none)


def _gemm_pass(gpu, M: int, N: int, K: int, fp8: bool = False) -> tuple[float, float]:
    """(forward, backward) seconds of one (M, N, K) GEMM under the GPU's rule: the backward's
    input and weight gradients (M, K, N) and (K, N, M) (:mod:`minipar.cost.kernels.compute`);
    ``fp8``: FP8 operands (:func:`~minipar.cost.kernels.compute.gpu_gemm_seconds`)."""
    f, di, dw = (gpu_gemm_seconds(gpu, *mnk, 1, fp8) for mnk in ((M, N, K), (M, K, N), (K, N, M)))
    return f, di + dw


def layer_dense_gemms(m_, lay: Layout) -> list[tuple[int, int, int]]:
    """The dense (M, N, K) GEMMs of one layer on one of t ranks at the shape's own widths: QKV
    (b·s/cp, h/t + 2·kv_width_per_rank, h), the projection (·, h, h/t), the MLP's first
    (·, (matrices − 1)·K·f/t, h) and last (·, h, K·f/t), K the routed experts."""
    t, h, bs = lay.tp, m_.hidden, lay.micro_batch * (m_.seq // lay.cp)
    f = m_.top_k * m_.ffn_width // t
    n_qkv = h // t + 2 * kv_width_per_rank(m_, t)
    return [(bs, n_qkv, h), (bs, h, h // t), (bs, (m_.mlp_matrices - 1) * f, h), (bs, h, f)]


def fp8_gemm_delta(m_, cl, lay: Layout, opt: Options) -> float:
    """Seconds one layer's dense GEMMs (:func:`layer_dense_gemms`) gain under ``opt.fp8``: each
    at the FP8 rate less at the bf16 one, forward (twice under full recomputation) and
    backward (Micikevicius et al. 2022, "FP8 Formats for Deep Learning": the three GEMMs of
    each linear layer in FP8; Transformer Engine, torchao Float8); 0 without FP8."""
    if not opt.fp8:
        return 0.0
    return layer_gemm_seconds(m_, cl, lay, opt) - layer_gemm_seconds(
        m_, cl, lay, replace(opt, fp8=None)
    )


def term_compute(m_, cl, lay: Layout, opt: Options, ctx=None) -> ComputeTerm:
    """Compute of one micro-batch on the last stage: :func:`~minipar.cost.kernels.compute.layer_seconds`
    per layer on s/cp tokens with ``opt.attention``; the attention core once more for each of
    the other cp−1 key blocks, GEMMs (or the flash kernel) and, unfused, the per-score bytes
    (``GPU.attention_score_bytes``, the forward's share again when recomputed); the QKV GEMM
    at the GQA width h/t + 2·kv_width_per_rank instead of 3h/t; the MLP rescaled to the active
    experts' width (K·matrices·f over GPT's 8h²), on the busiest EP rank
    (``opt.moe_imbalance`` times the mean when ep > 1); and
    :func:`~minipar.cost.kernels.compute.logits_seconds`."""
    b, h, a, t, rc = lay.micro_batch, m_.hidden, m_.heads, lay.tp, lay.recompute
    sl, gpu, att = m_.seq // lay.cp, cl.gpu, opt.attention
    accumulate = opt.recipe.accumulate_bytes
    kw = dict(sp=lay.sp, recompute=rc, attention=att, grad_accum_bytes=accumulate)
    lt = layer_seconds(b, sl, h, a, gpu, t, **kw).total_s
    parts = attention_core_and_mlp_seconds(b, sl, h, a, gpu, t, attention=att)
    refwd = 1 if rc == "none" else 2  # the core is recomputed
    core = refwd * parts["core_f"] + parts["core_b"]  # one (s/cp)² block
    if att == "unfused":  # its scores' bytes
        sb = gpu.attention_score_bytes
        f_share = sb * SCORE_BYTES_FWD / (SCORE_BYTES_FWD + SCORE_BYTES_BWD)
        core += (sb + (f_share if rc != "none" else 0.0)) * a * sl * sl * b / t / gpu.hbm_bandwidth
    if lay.cp > 1:  # the other cp−1 key blocks
        lt += (lay.cp - 1) * core
    n_qkv = h // t + 2 * kv_width_per_rank(m_, t)
    if rc == "selective" and "core_attn" not in (opt.recompute_modules or ()):
        lt -= parts["core_f"]  # the attention core is kept, not recomputed
    if n_qkv != 3 * h // t:  # GQA's narrower QKV GEMM
        (gf, gb), (mf, mb) = (_gemm_pass(gpu, b * sl, n, h) for n in (n_qkv, 3 * h // t))
        lt += (2 if rc == "full" else 1) * (gf - mf) + (gb - mb)
    scale = m_.top_k * m_.mlp_matrices * m_.ffn_width / (2 * 4 * h)  # active MLP / GPT's 8h²
    scale *= opt.moe_imbalance if m_.moe and lay.ep > 1 else 1  # the busiest EP rank's
    if scale != 1:
        lt += (scale - 1) * ((2 if rc == "full" else 1) * parts["mlp_f"] + parts["mlp_b"])
    lt += module_recompute_seconds(m_, cl, lay, opt, scale * parts["mlp_f"])
    lt += recipe_kernels_seconds(m_, cl, lay, opt) + fp8_gemm_delta(m_, cl, lay, opt)
    mid, end = stage_layers(m_.layers, lay)  # the slowest stage
    logits = logits_seconds(b, sl, h, m_.vocab, gpu, t)
    return ComputeTerm(max(mid * lt, end * lt + logits), lt, core)


def recipe_kernels_seconds(m_, cl, lay: Layout, opt: Options) -> float:
    """Where the GPU prices element-wise kernels one by one (``GPU.elementwise_bandwidth``,
    the H200's and the H100s'): the recipe's own kernels
    (:func:`~minipar.cost.kernels.compute.elementwise_kernels`: the shape's norm, GeLU or SwiGLU on
    the K active experts' f, RoPE, dropout only when above 0, residual adds, bias gradients),
    each at max(issue time, traffic) (:func:`~minipar.cost.kernels.compute.elementwise_seconds`), in
    place of the fused byte count and the fixed per-layer time that ``layer_seconds``
    charged; fused and without issue time when ``opt.compiled``."""
    gpu = cl.gpu
    if not gpu.elementwise_bandwidth:
        return 0.0
    b, sl, h, t, rc = lay.micro_batch, m_.seq // lay.cp, m_.hidden, lay.tp, lay.recompute
    recipe = {k: getattr(m_, k) for k in ("norm", "mlp_matrices", "dropout", "bias")}
    recipe["rope"] = m_.positions == "rope"
    kernels = elementwise_kernels(
        h, m_.ffn_width * m_.top_k, m_.kv_width, t, sp=lay.sp, recipe=recipe
    )
    fixed = gpu.layer_overhead_s * (4 / 3 if rc == "full" else 1)
    return (
        elementwise_seconds(kernels, b * sl, gpu, rc, opt.compiled)
        - fused_activation_seconds(b, sl, h, t, gpu, sp=lay.sp, recompute=rc)
        - fixed
    )


def module_recompute_seconds(m_, cl, lay: Layout, opt: Options, mlp_forward: float) -> float:
    """What selective recomputation of ``opt.recompute_modules`` re-runs per layer beyond the
    attention core: the two norms (read and write (b, s, h): 8 bytes per token and hidden unit,
    ÷ t with SP), the MLP's activation (read its inputs, write its output: 2·matrices·f bytes
    per token and routed expert, ÷ t), or the MLP's forward GEMMs (``mlp_forward``) and its
    activation; all memory-bound at the HBM bandwidth but the GEMMs."""
    if lay.recompute != "selective":
        return 0.0
    mods, sl, t = opt.recompute_modules or (), lay.micro_batch * (m_.seq // lay.cp), lay.tp
    moved = 8 * sl * m_.hidden / (t if lay.sp else 1) if "layernorm" in mods else 0.0
    if "mlp" in mods or "act" in mods:
        moved += 2 * m_.mlp_matrices * m_.ffn_width * m_.top_k * sl / t
    return moved / cl.gpu.hbm_bandwidth + (mlp_forward if "mlp" in mods else 0.0)


def term_fp8_casts(m_, cl, lay: Layout, opt: Options, ctx=None) -> float:
    """FP8 scaling of one micro-batch on the slowest stage, per layer: the casts of the four
    dense GEMMs' inputs forward (again under full recomputation) and of their output gradients
    backward (:func:`~minipar.cost.kernels.compute.fp8_cast_bytes_per_token` under
    ``opt.fp8``'s scaling), and the layer's weights cast once per micro-batch
    (:func:`~minipar.cost.kernels.compute.fp8_weight_cast_bytes` per weight on the rank), all
    at the HBM rate (fused cast-transpose kernels, Transformer Engine); 0 without FP8."""
    if not opt.fp8:
        return 0.0
    t, tokens = lay.tp, lay.micro_batch * (m_.seq // lay.cp)
    widths = (m_.hidden, m_.top_k * m_.ffn_width, m_.kv_width, t)
    kw = dict(sp=lay.sp, scaling=opt.fp8, mlp_matrices=m_.mlp_matrices)
    fwd, bwd = fp8_cast_bytes_per_token(*widths, **kw)
    weights = fp8_weight_cast_bytes(opt.fp8) * sum(N * K for _, N, K in layer_dense_gemms(m_, lay))
    refwd = 2 if lay.recompute == "full" else 1
    per_layer = (tokens * (refwd * fwd + bwd) + weights) / cl.gpu.hbm_bandwidth
    return stage_layers(m_.layers, lay)[0] * per_layer


def term_fp8_weights(m_, cl, lay: Layout, opt: Options, ctx=None) -> float:
    """Bytes of the FP8 weight copies on the fullest stage: Transformer Engine keeps each
    linear weight in FP8 and its transpose (2 bytes per weight on the rank) across the
    micro-batches of a step; under ZeRO-3 only the two gathered layers have them; 0 without
    FP8. The saved inputs of the FP8 GEMMs are counted 16-bit (an over-estimate: Transformer
    Engine saves some in FP8)."""
    if not opt.fp8:
        return 0.0
    per_layer = 2 * sum(N * K for _, N, K in layer_dense_gemms(m_, lay))
    if lay.zero == 3:
        return 2 * per_layer
    return max(stage_layers(m_.layers, lay)) * per_layer


def tp_overlap_exposed(comm: float, gemm: float, t: int) -> float:
    """Seconds of ``comm`` left exposed when a collective over t ranks is decomposed into t
    chunks pipelined with the ``gemm`` seconds that depend on it (Wang et al. 2023, "Overlap
    Communication with Dependent Computation via Decomposition in Large Deep Learning Models",
    ASPLOS: each step computes on the chunk that has arrived while the next one moves): the
    first chunk cannot overlap (comm / t), the rest hides under the GEMM as far as it lasts.
    The GEMM's slowdown from the SMs a collective takes and from its t smaller pieces is
    ignored (no published figure used); so is the chunks' extra latency."""
    return comm / t + max(0.0, comm * (t - 1) / t - gemm)


def layer_gemm_seconds(m_, cl, lay: Layout, opt: Options) -> float:
    """One layer's dense GEMMs (:func:`layer_dense_gemms`) forward (twice under full
    recomputation) and backward, at the FP8 rate under ``opt.fp8``: the compute TP's
    collectives can overlap with."""
    refwd, out = (2 if lay.recompute == "full" else 1), 0.0
    for M, N, K in layer_dense_gemms(m_, lay):
        f, b = _gemm_pass(cl.gpu, M, N, K, bool(opt.fp8))
        out += refwd * f + b
    return out


def term_tp(m_, cl, lay: Layout, opt: Options, ctx=None) -> LinkTerm:
    """TP collectives of one micro-batch on the critical path: :func:`tp_collectives` all-reduce
    equivalents of the (b, s/cp, h) 16-bit activation per layer (Shoeybi et al. 2019 §3;
    Korthikanti et al. 2022 §4.2.2): a ring inside a node, NCCL's multi-NIC algorithm
    (:func:`dp_allreduce_seconds` at stride 1) for a group spanning nodes. With
    ``opt.tp_overlap`` and SP (both stacks overlap only the all-gathers and reduce-scatters of
    sequence parallelism), each layer's collectives are pipelined with its dense GEMMs
    (:func:`layer_gemm_seconds`, shared evenly among them: the same sum as pairing each
    collective with an equal share) and only :func:`tp_overlap_exposed` counts. Returns
    (seconds, link)."""
    t = lay.tp
    act_bytes = lay.micro_batch * (m_.seq // lay.cp) * m_.hidden * 2
    ar, name = dp_allreduce_seconds(act_bytes, t, 1, cl)
    lp = stage_layers(m_.layers, lay)[0]
    per_layer = tp_collectives(t, lay.sp, lay.recompute) * ar
    if opt.tp_overlap and lay.sp and t > 1:
        per_layer = tp_overlap_exposed(per_layer, layer_gemm_seconds(m_, cl, lay, opt), t)
    return LinkTerm(lp * per_layer, name)


def term_pp(m_, cl, lay: Layout, opt: Options, ctx=None) -> LinkTerm:
    """Pipeline sends of one micro-batch: the (b, s/cp, h)/t activation forward and its gradient
    backward across each stage boundary, v times with v chunks (Narayanan et al. 2021 §4.1);
    stage neighbours are t·cp·d ranks apart. Returns (seconds, link)."""
    t, cp, d, p = lay.tp, lay.cp, lay.dp, lay.pp
    pp_link = cl.intra if t * cp * d * p <= cl.gpus_per_node else cl.inter
    act_bytes = lay.micro_batch * (m_.seq // cp) * m_.hidden * 2
    seconds = 2 * lay.chunks * (pp_link.alpha + act_bytes / t / pp_link.bandwidth)
    return LinkTerm(seconds, pp_link.name) if p > 1 else LinkTerm(0.0, "-")


def term_cp(m_, cl, lay: Layout, opt: Options, ctx) -> float:
    """Context parallelism's K/V traffic of one micro-batch on the critical path.
    ``opt.cp_algorithm`` "ring" (Liu et al. 2023; Megatron-Core): per layer (cp−1) K/V blocks
    forward (twice with full recomputation), (cp−1) K/V + cp fp32 dK/dV blocks backward
    (:func:`minipar.cost.chapters.context_parallel.ring_sent_bytes_per_layer`), each step a send to the
    next of the cp ranks (its own link, t apart), overlapped with one ``core`` block (``ctx["compute"].core``), only the
    excess exposed. "all-gather" (Llama Team 2024 §3.3.2): all-gather the cp·K/V forward (again
    when fully recomputed), all-gather it and reduce-scatter the cp·dK/dV backward
    (:func:`minipar.cost.chapters.context_parallel.allgather_collectives_per_layer`), each half of
    :func:`dp_allreduce_seconds` over the cp ranks (NCCL's multi-NIC algorithm across nodes),
    not overlapped."""
    cp, t, lp = lay.cp, lay.tp, stage_layers(m_.layers, lay)[0]
    if cp == 1:
        return 0.0
    core = ctx["compute"].core
    b, s, kvw = lay.micro_batch, m_.seq, kv_width_per_rank(m_, t)
    refwd = 2 if lay.recompute == "full" else 1
    if opt.cp_algorithm == "all-gather":
        colls = allgather_collectives_per_layer(b, s, kvw, cp)
        one = [dp_allreduce_seconds(S, cp, t, cl)[0] / 2 for _, S in colls["forward"]]
        two = [dp_allreduce_seconds(S, cp, t, cl)[0] / 2 for _, S in colls["backward"]]
        return lp * (refwd * sum(one) + sum(two))
    ring = ring_sent_bytes_per_layer(b, s, kvw, cp)
    cp_link = cl.intra if t * cp <= cl.gpus_per_node else cl.inter
    kv = ring["forward"] / (cp - 1)
    dkv = (ring["backward"] - ring["forward"]) / cp
    alpha, bw = cp_link.alpha, cp_link.bandwidth
    comm = (refwd * (cp - 1) + (cp - 1)) * (alpha + kv / bw) + cp * (alpha + dkv / bw)
    return lp * max(0.0, comm - cp * core)


def term_ep(m_, cl, lay: Layout, opt: Options, ctx=None) -> float:
    """MoE all-to-alls of one micro-batch on the critical path: dispatch + combine forward and
    backward (six with full recomputation) of the K·b·s/cp routed 16-bit (·, h) rows per layer
    (÷ t with SP) over the ep ranks, consecutive in the rank order under folding (Lepikhin et
    al. 2021; :func:`minipar.cost.chapters.expert_parallel.all_to_all_time`), the busiest rank's
    ``opt.moe_imbalance`` times the mean."""
    ep, t = lay.ep, lay.tp
    if ep == 1:
        return 0.0
    rows = m_.top_k * lay.micro_batch * (m_.seq // lay.cp) * m_.hidden * 2 / (t if lay.sp else 1)
    rows *= opt.moe_imbalance
    n_a2a = 6 if lay.recompute == "full" else 4
    return stage_layers(m_.layers, lay)[0] * n_a2a * ep_all_to_all_seconds(rows, ep, cl)


def ep_all_to_all_seconds(nbytes: float, ep: int, cl) -> float:
    """One all-to-all of ``nbytes`` per rank over ep consecutive ranks: inside a node the
    pairwise exchange on the intra link (:func:`minipar.cost.chapters.expert_parallel.all_to_all_time`);
    spanning nodes, a rank's min(ep, g) − 1 on-node peers over NVLink and its ep − min(ep, g)
    off-node peers over its own NIC at the same time (each GPU's rail; the off-node share
    (ep − min(ep, g))/ep of :func:`minipar.cost.chapters.expert_parallel.off_node_fraction`), the slower
    of the two: (n−1)α + (n−1)/ep·S/B on each."""
    g = cl.gpus_per_node
    if ep <= g:
        return all_to_all_time(nbytes, ep, cl.intra.alpha, cl.intra.bandwidth)
    on = min(ep, g)
    near = (on - 1) * cl.intra.alpha + (on - 1) / ep * nbytes / cl.intra.bandwidth
    far = (ep - on) * cl.inter.alpha + (ep - on) / ep * nbytes / cl.inter.bandwidth
    return max(near, far)


class Zero3Term(NamedTuple):
    value: float  # exposed per micro-batch, on the critical path
    per_layer: float  # all-gathers + reduce-scatter of one layer, one micro-batch
    link: str


def term_zero3_exposed(m_, cl, lay: Layout, opt: Options, ctx) -> Zero3Term:
    """ZeRO-3 per layer and micro-batch: :func:`zero3_gathers` all-gathers of the 16-bit weights
    + one reduce-scatter of the gradients (:func:`zero3_collective_seconds`); prefetching hides
    each layer's collectives under the previous ``layer``'s compute, so max(0, comm − compute)
    per layer and the first layer's gather are exposed (Zhao et al. 2023 §3.4); all of it with
    ``zero3_overlap=False``."""
    if lay.zero != 3:
        return Zero3Term(0.0, 0.0, "-")
    t, dcp, lp = lay.tp, lay.dp * lay.cp, stage_layers(m_.layers, lay)[0]
    layer = ctx["compute"].layer  # prefetch hides the collectives under one layer
    sp_ = stage_params(m_, lay)
    _, edp, stride = expert_grid(lay)
    groups = (
        [(sp_.layer / t, dcp, t)]
        if lay.ep == 1
        # dense, then the experts
        else [(sp_.dense_layer / t, dcp, t), (sp_.expert_layer / lay.ep, edp, stride)]
    )
    gather = scatter = 0.0
    name = "-"
    for i, (x, n, k) in enumerate(groups):
        g, link = zero3_collective_seconds(2 * x, n, k, cl, opt.zero3_collectives)
        gather += g
        scatter += zero3_collective_seconds(
            opt.grad_reduce_bytes * x, n, k, cl, opt.zero3_collectives
        )[0]
        if i == 0:
            name = link
    # without resharding: gathered once per step, reduced once per step (÷ m per micro-batch)
    m, gathers = 1, zero3_gathers(lay.recompute, opt.zero3_ac_inside_unit)
    if not reshards(lay, opt):
        m, gathers = lay.microbatches, 1
    comm_layer = gathers * gather + scatter
    exposed = (
        lp * max(0.0, comm_layer - layer) + gather  # prefetch hides ≤ one layer
        if opt.zero3_overlap
        else lp * comm_layer
    )
    return Zero3Term(exposed / m, comm_layer / m, name)


def reshards(lay: Layout, opt: Options) -> bool:
    """ZeRO-3 frees a layer's gathered weights after its forward: ``opt.reshard_after_forward``,
    by default torchtitan's ``reshard_after_forward = not pp`` (with PP the weights stay
    gathered over the micro-batches: one all-gather before the first forward, one
    reduce-scatter after the last backward, and the stage's whole 16-bit weights and unsharded
    gradient in memory)."""
    r = opt.reshard_after_forward
    return lay.pp == 1 if r is None else r


def term_bubble(lay: Layout) -> tuple[float, float]:
    """(relative to the ideal time, fraction of the step) of the pipeline bubble: (p−1)/(v·m)
    and its share of the step (Narayanan et al. 2021 §2.2; 0 when p = 1)."""
    if lay.pp == 1:
        return 0.0, 0.0
    args = (lay.schedule, lay.pp, lay.microbatches, lay.chunks)
    return bubble_relative_to_ideal(*args), bubble_fraction_of_total(*args)


# --- after the last micro-batch ---------------------------------------------------------------


class DpTerm(NamedTuple):
    value: float  # exposed, per step
    total: float
    link: str


def term_dp_exposed(m_, cl, lay: Layout, opt: Options, ctx) -> DpTerm:
    """The data-parallel gradient reduction after the last micro-batch. ZeRO 0: all-reduce of
    the stage's gradients in ``grad_reduce_bytes`` per element; ZeRO 1-2: reduce-scatter + an
    all-gather of the 16-bit parameters; with ep > 1 the dense part over d·cp, then the experts
    over the EDP ranks of :func:`expert_grid` (t·cp·d/ep, ep apart). Exposed: all of it, less 2/3 of the last micro-batch's compute (its backward)
    when p = 1 and ``dp_overlap`` (Li et al. 2020), or at any p with ``overlap_grad_reduce``
    (Megatron-Core's ``--overlap-grad-reduce``: the buckets reduce as the stage's last backward
    produces them). ZeRO-3's collectives are per layer
    (:func:`term_zero3_exposed`): here only their total, none exposed."""
    t, zero, dcp, ep = lay.tp, lay.zero, lay.dp * lay.cp, lay.ep
    compute_microbatch, z3 = ctx["compute"].value, ctx["zero3_exposed"]
    if zero == 3:
        lp = stage_layers(m_.layers, lay)[0]
        return DpTerm(0.0, lay.microbatches * lp * z3.per_layer, z3.link)
    sp_ = stage_params(m_, lay)
    etp, edp, stride = expert_grid(lay)

    def reduce(psi: float, n: int, split: int, k: int) -> tuple[float, float, str]:
        """(reduction, parameter all-gather, link)."""
        ar, name = dp_allreduce_seconds(opt.grad_reduce_bytes * psi / split, n, k, cl)
        if zero in (1, 2):  # RS(grads) + AG(16-bit params)
            return ar / 2, dp_allreduce_seconds(2 * psi / split, n, k, cl)[0] / 2, name
        return ar, 0.0, name

    if ep == 1:
        rs, ag, name = reduce(sp_.stage, dcp, t, t)
    else:  # two groups, one after the other
        rs, ag, name = reduce(sp_.dense, dcp, t, t)
        rs2, ag2, _ = reduce(sp_.expert, edp, etp, stride)
        rs, ag = rs + rs2, ag + ag2
    overlap = (lay.pp == 1 and opt.dp_overlap) or opt.overlap_grad_reduce
    window = (2 / 3) * compute_microbatch if overlap else 0.0
    if opt.overlap_param_gather:  # the gather under the next step's first forward
        exposed = max(0.0, rs - window) + max(0.0, ag - compute_microbatch / 3)
    else:
        exposed = max(0.0, rs + ag - window)
    return DpTerm(exposed, rs + ag, name)


def term_embedding(m_, cl, lay: Layout, opt: Options, ctx=None) -> float:
    """All-reduce of the tied embedding's V·h gradient between the first and the last stage
    (p > 1; Narayanan et al. 2021 §3, Megatron-LM's ``_allreduce_embedding_grads``); none for
    an untied output layer."""
    t, cp, d, p = lay.tp, lay.cp, lay.dp, lay.pp
    if p == 1 or not m_.tied:
        return 0.0
    link = cl.inter if t * cp * d * p > cl.gpus_per_node else cl.intra
    return _ring("all-reduce", 2, opt.grad_reduce_bytes * m_.vocab * m_.hidden / t, link)


def term_optimizer(m_, cl, lay: Layout, opt: Options, ctx=None) -> float:
    """The Adam step on this rank's shard (:func:`minipar.cost.kernels.compute.optimizer_seconds`): the
    dense parameters ÷ t (÷ d·cp under ZeRO ≥ 1), the experts ÷ ETP (÷ EDP), at the recipe's
    bytes per parameter."""
    dcp, t = lay.dp * lay.cp, lay.tp
    sp_ = stage_params(m_, lay)
    if lay.ep == 1:
        shard = ((sp_.dense / dcp + sp_.expert / dcp) if lay.zero >= 1 else sp_.stage) / t
    else:
        etp, edp, _ = expert_grid(lay)
        z = lay.zero >= 1
        shard = sp_.dense / t / (dcp if z else 1) + sp_.expert / etp / (edp if z else 1)
    return optimizer_seconds(shard, cl.gpu, opt.recipe.adam_bytes)


def _value(result) -> float:
    """A term's value: the number it returns, or its record's first field (``value``)."""
    return result if isinstance(result, (int, float)) else result[0]


def breakdown(m_, cl, lay: Layout, opt: Options) -> StepBreakdown:
    """Every term of one (already checked) layout, kept apart: each row of
    :data:`minipar.cost.planner.term_table.TERMS` in order, ``term_<name>(m_, cl, lay, opt, ctx)`` with
    ``ctx`` the results so far by name."""
    ctx: dict = {}
    module = globals()
    for term in TERMS:
        ctx[term.name] = module[python_name(term.name)](m_, cl, lay, opt, ctx)
    r, f = term_bubble(lay)
    link = {k: getattr(v, "link", "-") for k, v in ctx.items()}
    return StepBreakdown(
        microbatches=lay.microbatches,
        bubble_relative=r,
        bubble_fraction=f,
        memory_limit=cl.gpu.memory_bytes * (1 - opt.headroom),
        margin_limit=cl.gpu.memory_bytes * (1 - opt.margin),
        values={k: _value(v) for k, v in ctx.items()},
        dp=ctx["dp_exposed"].total,
        tp_link=link["tp"],
        pp_link=link["pp"],
        dp_link=link["dp_exposed"],
    )
