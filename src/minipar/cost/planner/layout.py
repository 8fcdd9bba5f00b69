"""The planner's inputs besides the model and the cluster: the options every layout of a search
shares (:class:`Options`, with the precision recipes and the era's constants) and one layout
(:class:`Layout`: t, p, d, b, v, recomputation, SP, ZeRO, cp, ep, the split and the global
batch), with what follows from the layout alone: the layers per stage, the experts' grid, the
pipeline bubble. Units: seconds, bytes; rank order t → cp → d → p (Megatron's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple

from ..kernels.compute import FP8_SCALING
from ..model import ATTENTION

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
push Llama 3 405B to full recomputation). The score of predicted memory does not hang on it: of
experiment 3's rows, every one of which ran, none is refused at a reserve of 0, 2.5 or 5 %
(:func:`minipar.cost.validation.experiment3.memory_score`, with the recipes' settings)."""

RECOMPUTE_MODULES = ("core_attn", "layernorm", "act", "mlp")
"""What selective recomputation may drop and recompute, per module (Megatron-Core's
``--recompute-modules``; torchtitan's selective activation checkpointing saves the matmul and
attention outputs and recomputes the rest): the attention core's scores (Korthikanti et al.
2022 §5; nothing to drop under flash attention, which recomputes them anyway), the two norms'
outputs, the MLP's activation output (GeLU, or SwiGLU's product), or the whole MLP but its input."""

MLP_SAVES = ("product", "inputs")
"""What the MLP keeps for its backward besides its input
(:func:`~minipar.cost.planner.memory_terms.shape_activation_bytes`): "product" the activation's inputs and its output, the
down projection's input (Megatron-Core's fused SwiGLU and Transformer Engine's LayerNormMLP
save both); "inputs" the activation's inputs only, its output written again by the backward's
fused kernel for the down projection's weight gradient (xFormers' fused SwiGLU, ``swiglu_op``:
``silu_bw_fused`` returns the product beside the gradients)."""

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
    # bf16 gradients, accumulated and reduced in bf16: NeMo's distributed optimizer with
    # ``grad_sync_dtype: bf16``, as NVIDIA's DGX Cloud Llama 3.1 and Nemotron-4 340B recipes set
    # it (Megatron-Core's and torchtitan's defaults keep fp32: Megatron's
    # ``--no-gradient-accumulation-fusion`` only turns off the fused fp32 accumulation kernel;
    # FSDP2 reduces with ``MixedPrecisionPolicy(reduce_dtype=torch.float32)``): 2 + 2 + 12 = 16 bytes;
    # accumulation 2 + 2 + 2 = 6 bytes; Adam reads a 16-bit gradient: 28 bytes.
    "bf16-grads": Recipe(2, 2, 12, 2, 6, 28, True, RESERVE, ALLOCATOR_MARGIN),
}


MAIN_GRADS = {
    4: dict(grad_bytes=4, reduce_bytes=4, accumulate_bytes=10, adam_bytes=30),
    2: dict(grad_bytes=2, reduce_bytes=2, accumulate_bytes=6, adam_bytes=28),
}
"""A recipe's bytes per parameter by main-gradient dtype (``Options.main_grad_bytes``): fp32
main gradients, Megatron-Core's default ("megatron"), or bf16 ones accumulated and reduced in
bf16, the "bf16-grads" recipe's (NeMo's distributed optimizer with ``grad_sync_dtype: bf16``)."""


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
    # the DP reduction under the last backward also with p > 1 (Megatron-Core's
    # --overlap-grad-reduce; None: the era's, on for the modern recipes, off for "2021")
    overlap_grad_reduce: bool | None = None
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
    # async TP, Megatron-Core's --tp-comm-overlap): tp_overlap_exposed, tp_overlap_cost (None:
    # the era's, on for the modern recipes as in NVIDIA's Hopper recipes, off for "2021")
    tp_overlap: bool | None = None
    # MoE routing imbalance: the busiest EP rank's routed tokens over the mean (1: perfectly
    # balanced). It sets the step, since every rank waits for that rank's expert GEMMs and
    # all-to-alls. The expert-parallel chapter measures it: 1.2-1.8 on its toy router.
    moe_imbalance: float = 1.0
    # FP8 parameters (Megatron-Core's --fp8-param-gather, Transformer Engine's fp8_model_init):
    # the FP8 linears' weights live only in FP8, no 16-bit copy (memory_terms.fp8_param_bytes_saved)
    fp8_params: bool = False
    # MoE capacity factor (GShard's; Megatron-Core's --moe-expert-capacity-factor): tokens above
    # c times an expert's mean are dropped (moe_terms.moe_load); None: dropless (the default)
    moe_capacity: float | None = None
    # the all-to-alls under another micro-batch's compute (Megatron-Core's
    # --overlap-moe-expert-parallel-comm, DeepSeek-V3's DualPipe), at the SMs they take:
    # communication_terms.term_ep, moe_terms.term_ep_overlap
    ep_overlap: bool = False
    # DeepSeek-V3's DualPipe schedule (needs ep_overlap, v = 1, p and m even): its bubble
    # (moe_terms.dualpipe_bubble) and its second copy of the stage (moe_terms.term_dualpipe)
    dualpipe: bool = False

    # bytes per main-gradient element, the buffer the micro-batches accumulate into (4: fp32,
    # Megatron-Core's default; 2: bf16, NeMo's grad_sync_dtype bf16); None: the recipe's
    main_grad_bytes: float | None = None
    # what the MLP keeps for its backward (MLP_SAVES): "product" its activation's inputs and
    # output (Megatron-Core, Transformer Engine), "inputs" the inputs only (xFormers' fused
    # SwiGLU: the output rewritten in the backward; memory_terms.shape_activation_bytes)
    mlp_saves: str = "product"
    # the interleaved schedule's micro-batch group N: each model chunk runs N consecutive
    # micro-batches (Llama 3's flexible N, Llama Team 2024 §3.3.2; Megatron-Core's
    # microbatch_group_size_per_vp_stage); None: p (memory_terms.chunks_in_flight)
    microbatch_group: int | None = None

    @property
    def recipe(self) -> Recipe:
        """The precision recipe, with :data:`MAIN_GRADS` ``[main_grad_bytes]`` in place of its
        gradient, accumulation and Adam bytes where a main-gradient dtype is given."""
        base = RECIPES[self.precision or "2021"]
        if self.main_grad_bytes is None or self.main_grad_bytes == base.grad_bytes:
            return base
        return base._replace(**MAIN_GRADS[self.main_grad_bytes])

    def resolved(self, attention: str, precision: str) -> "Options":
        """Every ``None`` filled: the kernel and the recipe given, then the recipe's bytes and
        the era's switches (``reshard_after_forward`` stays ``None``: it depends on p). A search
        resolves the same options for every layout it prices: each answer is kept (a pure
        function of the fields and of this module's constant tables)."""
        try:
            hash(self)
        except TypeError:  # a field given as a list, not a tuple: resolved afresh
            return self._resolve(attention, precision)
        return _resolved(self, attention, precision)

    def _resolve(self, attention: str, precision: str) -> "Options":
        o = replace(
            self, attention=self.attention or attention, precision=self.precision or precision
        )
        modern = o.precision != "2021"
        default = dict(
            grad_reduce_bytes=o.recipe.reduce_bytes,
            headroom=o.recipe.headroom,
            overlap_param_gather=modern,
            overlap_grad_reduce=modern,
            tp_overlap=modern,
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
            ("mlp_saves", MLP_SAVES, False),
        ):
            value = getattr(self, name)
            if value not in allowed and not (none_ok and value is None):
                raise ValueError(f"{name} ({value!r}) must be one of {', '.join(allowed)}")
        bad = [m for m in self.recompute_modules or () if m not in RECOMPUTE_MODULES]
        if bad:
            raise ValueError(
                f"recompute module ({bad[0]!r}) must be one of {', '.join(RECOMPUTE_MODULES)}"
            )
        if self.fp8_params and not self.fp8:
            raise ValueError(
                f"fp8_params ({self.fp8_params}) needs fp8 GEMMs (a scaling), got fp8 ({self.fp8})"
            )
        if self.moe_capacity is not None and not self.moe_capacity > 0:
            raise ValueError(
                f"moe capacity ({self.moe_capacity}) must be > 0 (a capacity factor), or None "
                "(dropless)"
            )
        if not self.moe_imbalance >= 1:
            raise ValueError(
                f"moe imbalance ({self.moe_imbalance}) must be >= 1 (the busiest EP rank's "
                "tokens over the mean)"
            )
        if self.dualpipe and not self.ep_overlap:
            raise ValueError(
                f"dualpipe ({self.dualpipe}) needs ep_overlap: DualPipe overlaps the all-to-alls "
                f"with another micro-batch's compute, got ep_overlap ({self.ep_overlap})"
            )
        if self.main_grad_bytes not in (None, *MAIN_GRADS):
            raise ValueError(
                f"main_grad_bytes ({self.main_grad_bytes}) must be one of "
                f"{', '.join(map(str, MAIN_GRADS))} (fp32 or bf16 main gradients)"
            )
        n = self.microbatch_group
        if n is not None and not (isinstance(n, int) and n >= 1):
            raise ValueError(f"microbatch group ({n}) must be a positive integer, or None (p)")
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


@lru_cache(maxsize=256)
def _resolved(options: Options, attention: str, precision: str) -> Options:
    return options._resolve(attention, precision)


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


def stage_layers(L: int, layout: Layout) -> tuple[int, int]:
    """(layers on a middle stage, layers on the first or last stage) under ``layout.split``
    (:data:`SPLITS`): L/p each when "even" (or p = 1); u = ⌈(L + 2)/p⌉ and u − 1 when "units"
    (the embedding and the head take a layer's place on the end stages)."""
    p = layout.pp
    if layout.split == "even" or p == 1:
        return L // p, L // p
    u = -(-(L + 2) // p)
    return u, u - 1


def expert_grid(layout: Layout) -> tuple[int, int, int]:
    """(ETP, EDP, EDP stride) of the experts: MoE parallel folding (Liu et al. 2025, "MoE
    Parallel Folding", §3; Megatron-Core) lays ETP × EP × EDP over the t·cp·d ranks of a stage
    with ETP = 1 once ep > 1, so EDP = t·cp·d/ep ranks, ep apart, share each expert
    (:func:`minipar.cost.chapters.expert_parallel.folded_expert_dp`); with ep = 1 the MLP is split over
    the t ranks like the attention and replicated over d·cp, t apart."""
    dcp = layout.dp * layout.cp
    if layout.ep == 1:
        return layout.tp, dcp, layout.tp
    return 1, layout.tp * dcp // layout.ep, layout.ep


def reshards(layout: Layout, options: Options) -> bool:
    """ZeRO-3 frees a layer's gathered weights after its forward: ``options.reshard_after_forward``,
    by default torchtitan's ``reshard_after_forward = not pp`` (with PP the weights stay
    gathered over the micro-batches: one all-gather before the first forward, one
    reduce-scatter after the last backward, and the stage's whole 16-bit weights and unsharded
    gradient in memory)."""
    r = options.reshard_after_forward
    return layout.pp == 1 if r is None else r


def term_bubble(layout: Layout) -> tuple[float, float]:
    """(relative to the ideal time, fraction of the step) of the pipeline bubble: r = (p−1)/(v·m)
    and r/(1 + r) (Narayanan et al. 2021 §2.2; 0 when p = 1). Interleaved, m need only be at
    least p, not a multiple of it: Llama 3's flexible schedule runs any number of micro-batches
    per round (Llama Team 2024 §3.3.2), and Megatron-Core's interleaved schedule takes any
    m ≥ p in groups of p."""
    if layout.pp == 1:
        return 0.0, 0.0
    r = (layout.pp - 1) / (layout.chunks * layout.microbatches)
    return r, r / (1 + r)
