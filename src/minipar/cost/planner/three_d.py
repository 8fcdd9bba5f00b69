"""The 3D planner: search data × tensor × pipeline layouts and rank them by predicted step time.

Pure Python (the command line is ``minipar plan`` in :mod:`minipar.cost.cli`). Every number comes
from a cost-model function that names its source:
  parameters and FLOPs      :mod:`minipar.cost.model` (Narayanan et al. 2021 Eq. 2-3,
                            Korthikanti et al. 2022 Eq. 7-8)
  memory                    :mod:`minipar.cost.chapters.memory_time` (ZeRO §5; Korthikanti Table 2, §4.2.3)
  compute                   :mod:`minipar.cost.kernels.compute` (each GEMM by the GPU's rule: the
                            measured additive one on every preset; the recipe's element-wise
                            kernels at max(issue time, traffic); the optimizer step)
  bubble                    :mod:`minipar.cost.chapters.pipeline_parallel`
  collectives               :mod:`minipar.cost.network.collectives` (α-β, Thakur et al. 2005; the
                            hierarchical all-reduce of Mikami et al. 2018)
  links and GPUs            :mod:`minipar.cost.kernels.hardware` (each GPU with its generation's links)

The step and the memory are sums of named terms, one pure function each in
:mod:`minipar.cost.planner.three_d_terms` (compute, bubble, tp, pp, cp, ep, zero3_exposed, dp_exposed,
edp_exposed, embedding, optimizer; states, activations), kept apart in a
:class:`~minipar.cost.planner.breakdown.StepBreakdown` (:func:`terms`) that :func:`evaluate` copies into
a :class:`Config`; the options every layout shares are one :class:`Options`.

One set of constants per cluster (the GPU's peak, HBM bandwidth, SM count and large-GEMM
efficiency η; the links' α and bandwidth): nothing is fitted per run.

How one step is timed (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM", §2.2 and §3); each term's docstring in
:mod:`~minipar.cost.planner.three_d_terms` states its model and sources. N = d·t·p GPUs,
B = d·b·m sequences per step, rank order t innermost, then d, then p (Megatron's; Llama 3's
[TP, CP, PP, DP], Dubey et al. 2024 §3.3.2, differs only in hops, which are not priced).
  per micro-batch on the slowest stage: compute, TP collectives on the critical path (Shoeybi
      et al. 2019 §3; with SP, Korthikanti et al. 2022 §4.2.2), PP sends (Narayanan §4.1),
      ZeRO-3's gathers prefetched one layer ahead (Zhao et al. 2023 §3.4), CP and EP;
  pipeline: (m + (p−1)/v) slots, (p−1)/v of them bubble (Narayanan §2.2);
  after the last micro-batch: the DP reduction (hierarchical across nodes, Mikami et al. 2018),
      the experts' over their expert-data-parallel group (ep > 1), the tied embedding's
      all-reduce, the optimizer step;
  memory: the fullest stage's states in the precision recipe's bytes and its activations
      (Korthikanti §4.2.3), "fits" within the recipe's headroom (10 % for the 2021 runs,
      Rajbhandari et al. 2020 §3.2; the modern recipes' reserve and allocator margin);
  ignored: stragglers, NCCL kernels slowing overlapped compute, data loading.

Validation: :mod:`minipar.cost.validation.published` (the 2021 published runs and §5.2's
ZeRO-3 against PTD-P, :func:`~minipar.cost.validation.published.zero3_missing_effect`) and
:mod:`minipar.cost.validation.modern` (the frozen model on modern published rows); the numbers
are computed there and held by tests/test_cost_validation.py, not quoted here. The 2021 ZeRO-3
is priced as a flat ring (``zero3_collectives="flat-ring"``, α-β as in Thakur et al. 2005):
§5.2's measured ZeRO-3 step stays constant as the GPU count doubles, 4 × 349 GB (175B) in
67-82 s, 17-21 GB/s per GPU, about one HDR NIC's 25 GB/s; every other run keeps NCCL's
hierarchical algorithm.

Optional dimensions (at 1, every result above is unchanged): context parallelism ``cp``
(default 1) and, for MoE shapes (:class:`ModelShape` ``experts``, ``top_k``, ``ffn``), expert
parallelism ``ep``, which :func:`search` ranges over by default (:func:`ep_limit`; a dense
model keeps 1); :func:`evaluate` states what each changes.
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from ..chapters.expert_parallel import folded_expert_dp
from ..chapters.memory_time import ZERO_STAGES, check_zero_stage
from ..kernels.compute import check_fp8_gpu
from ..kernels.hardware import GPU, Link
from ..kernels.hardware import gpu as gpu_preset
from ..kernels.hardware import link as link_preset
from ..model import (
    EXTENDED_FIELDS,
    RECOMPUTE,
    DecoderCounts,
    check_extended,
    decoder_counts,
    flops_per_iteration,
    param_count,
)
from .breakdown import StepBreakdown, check_layout
from .term_table import MEMORY, SLOT, STEP, TERMS
from .three_d_terms import GRAD_REDUCE_BYTES as GRAD_REDUCE_BYTES
from .three_d_terms import HEADROOM as HEADROOM
from .three_d_terms import RECIPES as RECIPES
from .three_d_terms import SPLITS, Layout, Options, breakdown
from .three_d_terms import ZERO3_COLLECTIVES as ZERO3_COLLECTIVES
from .three_d_terms import dp_allreduce_seconds as dp_allreduce_seconds
from .three_d_terms import kv_width_per_rank as kv_width_per_rank
from .three_d_terms import tp_collectives as tp_collectives
from .three_d_terms import zero3_collective_seconds as zero3_collective_seconds
from .three_d_terms import zero3_gathers as zero3_gathers

ATTENTION = ("unfused", "flash", "fa3")
"""Attention kernels (:mod:`minipar.cost.kernels.compute`): the scores materialised, or fused:
"flash" (FlashAttention-2, SDPA; its rate measured on the H200) or "fa3" (FlashAttention-3 /
cuDNN on Hopper; its rate assumed from the paper, :data:`~minipar.cost.kernels.compute.FA3_EFFICIENCY`)."""

NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope")


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer. The defaults are GPT as Narayanan et al. 2021 count it (MHA,
    a 4h GELU MLP, LayerNorm, biases, learned positions, tied embedding); the other fields
    describe the shapes trained since (Llama: GQA, SwiGLU, RMSNorm, no biases, rotary
    positions, untied embeddings; MoE)."""

    layers: int  # L
    hidden: int  # h
    heads: int  # a
    seq: int  # s
    vocab: int  # V
    note: str = ""
    experts: int = 1  # E, experts per MLP (1: dense)
    top_k: int = 1  # K, experts each token is routed to
    ffn: int = 0  # f, one expert's hidden width (0: 4h, GPT's MLP)
    mlp_matrices: int = 2  # 2 (GELU MLP) or 3 (SwiGLU)
    kv_heads: int = 0  # key/value heads (0: a, multi-head attention; fewer: GQA)
    norm: str = "layernorm"  # or "rmsnorm" (a scale only: h parameters per norm, not 2h)
    bias: bool = True  # biases in the linear layers (Llama family: none)
    positions: str = "learned"  # a learned s·h table, or "rope" (rotary: no parameters)
    tied: bool = True  # output layer tied to the input embedding
    attention: str = ""  # "unfused", "flash" or "fa3"; "" = the GPU's era (:func:`attention_for`)
    dropout: float = 0.1  # GPT's (Megatron-LM's default); the Llama recipe trains without
    # DeepSeek-V3 / Qwen3-MoE shapes (minipar.cost.model.decoder_counts; 0: absent). What the
    # step's terms price of them: the routed experts as before; the rest counts parameters only
    shared_experts: int = 0  # experts every token uses besides its top_k (DeepSeekMoE)
    dense_layers: int = 0  # the first layers' MLP is dense, of width dense_ffn
    dense_ffn: int = 0  # the dense-first layers' MLP width (0: ffn)
    node_limit: int = 0  # nodes a token's experts may span (node-limited routing; 0: any)
    head_dim: int = 0  # attention head width (0: h/a; Qwen3: 128)
    qk_norm: bool = False  # RMSNorm on each head's queries and keys (Qwen3)
    q_lora: int = 0  # MLA: query down-projection width (0: none)
    kv_lora: int = 0  # MLA: key-value latent width (0: not MLA)
    qk_rope_dim: int = 0  # MLA: the decoupled RoPE part of a query/key head
    qk_nope_dim: int = 0  # MLA: the no-RoPE part of a query/key head
    v_head_dim: int = 0  # MLA: a value head's width
    mtp_depth: int = 0  # multi-token prediction modules (DeepSeek-V3: 1)

    @property
    def moe(self) -> bool:
        return self.experts > 1

    @property
    def extended(self) -> bool:
        """Whether a DeepSeek-V3 / Qwen3-MoE field is set (counted by
        :func:`minipar.cost.model.decoder_counts`)."""
        return any(getattr(self, k) for k in EXTENDED_FIELDS)

    @property
    def counts(self) -> DecoderCounts:
        """Total, active and MTP parameters (:func:`minipar.cost.model.decoder_counts`)."""
        return decoder_counts(self)

    @property
    def ffn_width(self) -> int:
        """f: one expert's hidden width (4h when not given)."""
        return self.ffn or 4 * self.hidden

    @property
    def kv_width(self) -> int:
        """Width of K (and of V): (h/a)·kv heads (h without GQA; Ainslie et al. 2023, "GQA")."""
        return (self.head_dim or self.hidden // self.heads) * (self.kv_heads or self.heads)

    @property
    def expert_params_per_layer(self) -> int:
        """One layer's MLP weights: E experts of ``mlp_matrices``·h·f (+ the router h·E)."""
        router = self.hidden * self.experts if self.moe else 0
        return self.experts * self.mlp_matrices * self.hidden * self.ffn_width + router

    @property
    def dense_params_per_layer(self) -> int:
        """Everything of a layer but the MLP weights: Q and output projections 2h², K and V
        2h·kv_width, two norms (2h each for LayerNorm, h for RMSNorm) and, with ``bias``, the
        biases of QKV (h + 2·kv_width), of the projection (h) and of each expert's MLP
        ((matrices − 1)·f + h). GPT: 4h² + 13h, Eq. 2's 12h² + 13h less the 8h² MLP."""
        h, f, kv = self.hidden, self.ffn_width, self.kv_width
        norms = 2 * (2 * h if self.norm == "layernorm" else h)
        biases = (
            2 * h + 2 * kv + self.experts * ((self.mlp_matrices - 1) * f + h) if self.bias else 0
        )
        return 2 * h * h + 2 * h * kv + norms + biases

    def embedding_params(self, both_ends: bool = True) -> int:
        """The V·h token embedding (twice when untied and ``both_ends``: the output layer)
        and the s·h learned position table."""
        h = self.hidden
        tokens = self.vocab * h * (2 if not self.tied and both_ends else 1)
        return tokens + (self.seq * h if self.positions == "learned" else 0)

    @property
    def is_gpt(self) -> bool:
        """The shape of Narayanan et al. 2021 Eq. 2 (every field at its default)."""
        return (
            not self.moe
            and self.ffn in (0, 4 * self.hidden)
            and self.mlp_matrices == 2
            and self.kv_heads in (0, self.heads)
            and self.norm == "layernorm"
            and self.bias
            and self.positions == "learned"
            and self.tied
        )

    @property
    def params(self) -> int:
        """Total parameters: Eq. 2 for GPT (which leaves out the final layer norm); otherwise
        L·(dense + MLP) + embeddings + the final norm, which for Llama reproduces
        :func:`minipar.cost.model.param_count_llama` exactly."""
        if self.is_gpt:
            return param_count(self.layers, self.hidden, self.vocab, self.seq)
        if self.extended:
            return self.counts.total
        final = 2 * self.hidden if self.norm == "layernorm" else self.hidden
        return (
            self.layers * (self.dense_params_per_layer + self.expert_params_per_layer)
            + self.embedding_params()
            + final
        )

    @property
    def active_params(self) -> int:
        """Parameters one token uses: K of the E experts (all of them when dense)."""
        if self.extended:
            return self.counts.active
        unused = (self.experts - self.top_k) * self.mlp_matrices * self.hidden * self.ffn_width
        return self.params - self.layers * unused

    def check(self) -> None:
        """Raise ``ValueError`` naming the rule a shape breaks."""
        for name, allowed in (("norm", NORMS), ("positions", POSITIONS), ("attention", ATTENTION)):
            value = getattr(self, name)
            if value not in allowed and (value or name != "attention"):  # "": the GPU's era
                raise ValueError(f"{name} ({value!r}) must be one of {', '.join(allowed)}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout ({self.dropout}) must be in [0, 1)")
        if self.mlp_matrices not in (2, 3):
            raise ValueError(f"mlp matrices ({self.mlp_matrices}) must be 2 (GELU) or 3 (SwiGLU)")
        kv = self.kv_heads or self.heads
        if kv < 1 or self.heads % kv:
            raise ValueError(f"heads ({self.heads}) must be divisible by kv heads ({kv})")
        if self.ffn < 0 or not 1 <= self.top_k <= self.experts:
            raise ValueError(
                f"ffn ({self.ffn}) must be >= 0 and top_k ({self.top_k}) in "
                f"[1, experts ({self.experts})]"
            )
        check_extended(self)


SHAPE_RECIPES = {  # a preset's ``recipe`` in models.toml: the fields it stands for
    "llama": dict(
        mlp_matrices=3,
        norm="rmsnorm",
        bias=False,
        positions="rope",
        tied=False,
        attention="flash",
        dropout=0.0,
    ),
}
MODELS: dict[str, ModelShape] = {  # the shapes as published, each with its source (models.toml)
    name: ModelShape(**SHAPE_RECIPES.get(m.pop("recipe", ""), {}) | m)
    for name, m in tomllib.loads(Path(__file__).with_name("models.toml").read_text("utf-8")).items()
}

ERA_FLASH_GPUS = ("H100-SXM", "H100-HBM2e-500W", "H100-PCIe", "H200", "H800", "B200", "GB200-NVL72")
"""GPUs whose training stacks run fused attention by default (FlashAttention-2 and PyTorch's
SDPA shipped for Hopper in 2023; cuDNN's fused attention for Blackwell in Transformer Engine)
and today's recipe (:func:`precision_for`): every Hopper and Blackwell preset; the A100
presets reproduce 2021 runs, unfused."""


def precision_for(gpu_name: str) -> str:
    """The mixed-precision recipe a run uses by default
    (:data:`minipar.cost.planner.three_d_terms.RECIPES`): Megatron-LM's "megatron" (18 bytes per
    parameter, fp32 logits) on an H100/H200, the "2021" pricing of the A100 reproductions."""
    return "megatron" if gpu_name.split("*")[0] in ERA_FLASH_GPUS else "2021"


def attention_for(model: "ModelShape", gpu_name: str) -> str:
    """The attention kernel a run uses: the shape's own, else "flash" on an H100/H200 and
    "unfused" otherwise (the 2021 A100 reproductions)."""
    if model.attention:
        return model.attention
    return "flash" if gpu_name.split("*")[0] in ERA_FLASH_GPUS else "unfused"


@dataclass(frozen=True)
class Cluster:
    gpus: int
    gpus_per_node: int
    gpu: GPU
    intra: Link  # inside a node (NVLink, PCIe)
    inter: Link  # between nodes, one NIC per GPU (rail-optimised)
    dtype: str = "bf16"

    @property
    def peak(self) -> float:
        return self.gpu.peak_flops[self.dtype]


LAYOUT_FIELDS = tuple(f for f in Layout.__dataclass_fields__ if f != "global_batch")


def _from_layout(name: str) -> property:
    return property(lambda self: getattr(self.layout, name), doc=f"The layout's ``{name}``.")


def _from_breakdown(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.breakdown, name), doc=doc)


@dataclass(frozen=True)
class Config:
    """One layout and its predicted costs: the :class:`Layout`, its
    :class:`~minipar.cost.planner.breakdown.StepBreakdown` (every term of
    :data:`minipar.cost.planner.term_table.TERMS`, kept apart) and the FLOP utilisations.

    Read: the layout's fields (``c.tp``), :meth:`seconds` of a time term over the whole step
    (:meth:`StepBreakdown.per_step`), :meth:`bytes` of a memory term, and the breakdown's
    totals (``c.step_seconds``, ``c.bytes_per_gpu``, ...). ``mfu``: model FLOPs (Narayanan et
    al. 2021 Eq. 3, no recomputation; ``hfu``: with it) over the step's peak FLOPs. Eq. 3 counts
    the attention scores without the causal saving (PaLM's convention too), so with a causal
    flash kernel, which skips the masked half, MFU credits FLOPs the GPU did not run: s/(12h) of
    1 + s/(6h) per layer, a fifth at s = 8192, h = 2048."""

    layout: Layout
    breakdown: StepBreakdown
    mfu: float
    hfu: float

    tp = _from_layout("tp")
    pp = _from_layout("pp")
    dp = _from_layout("dp")
    micro_batch = _from_layout("micro_batch")
    chunks = _from_layout("chunks")
    recompute = _from_layout("recompute")
    sp = _from_layout("sp")
    zero = _from_layout("zero")
    cp = _from_layout("cp")
    ep = _from_layout("ep")
    split = _from_layout("split")

    microbatches = _from_breakdown("microbatches", "m = B/(d·b).")
    bytes_per_gpu = _from_breakdown("bytes_per_gpu", "Every memory term, on the fullest stage.")
    model_state_bytes = _from_breakdown("states", "The model states of the fullest stage.")
    activation_bytes = _from_breakdown("activations", "The activations of the fullest stage.")
    fits = _from_breakdown("fits", "Within the memory limit.")
    memory_limit = _from_breakdown("memory_limit", "The GPU's memory less the headroom.")
    margin_limit = _from_breakdown("margin_limit", "Above it (within the limit): tight.")
    tight = _from_breakdown("tight", "Fits, but inside the allocator margin.")
    bubble = _from_breakdown("bubble_fraction", "The bubble's fraction of the step (GPipe's).")
    bubble_relative = _from_breakdown("bubble_relative", "Bubble / ideal time (Megatron's).")
    dp_seconds = _from_breakdown("dp", "The whole DP/ZeRO reduction per step, exposed or not.")
    step_seconds = _from_breakdown("step_seconds", "Seconds per step.")
    tp_link = _from_breakdown("tp_link", "The link TP's collectives cross.")
    pp_link = _from_breakdown("pp_link", "The link PP's sends cross.")
    dp_link = _from_breakdown("dp_link", "The link DP's reduction crosses.")

    def seconds(self, term: str) -> float:
        """A time term of :data:`~minipar.cost.planner.term_table.TERMS` over the whole step
        (:meth:`StepBreakdown.per_step`); a ``KeyError`` names an unknown or memory term."""
        if term not in SLOT + STEP:
            raise KeyError(
                f"term ({term!r}) must be one of the time terms: {', '.join(SLOT + STEP)}"
            )
        return self.breakdown.per_step(term)

    def bytes(self, term: str) -> float:
        """A memory term of :data:`~minipar.cost.planner.term_table.TERMS`, in bytes on the
        fullest stage; a ``KeyError`` names an unknown or time term."""
        if term not in MEMORY:
            raise KeyError(f"term ({term!r}) must be one of the memory terms: {', '.join(MEMORY)}")
        return self.breakdown.values[term]

    def group_seconds(self) -> dict[str, float]:
        """Seconds per step of each part of the step (:meth:`StepBreakdown.group_seconds`)."""
        return self.breakdown.group_seconds()

    def as_dict(self) -> dict:
        """Flat, by name: the layout, memory, each term (``<term>_seconds`` per step,
        ``<term>_bytes``), the step, MFU and the links (what the JavaScript ``planEvaluate``
        returns)."""
        out = {k: getattr(self.layout, k) for k in LAYOUT_FIELDS}
        for k in _HEAD:
            out[k] = getattr(self, k)
        for t in TERMS:
            if t.where == "memory":
                out[f"{t.name}_bytes"] = self.bytes(t.name)
            else:
                out[f"{t.name}_seconds"] = self.seconds(t.name)
        for k in _TAIL:
            out[k] = getattr(self, k)
        return out


_HEAD = ("microbatches", "bytes_per_gpu", "model_state_bytes", "activation_bytes", "fits")
_HEAD += ("memory_limit", "margin_limit", "tight", "bubble", "bubble_relative")
_TAIL = ("dp_seconds", "step_seconds", "mfu", "hfu", "tp_link", "pp_link", "dp_link")
"""The order of :meth:`Config.as_dict`: the layout, :data:`_HEAD`, the terms, :data:`_TAIL`."""


@dataclass(frozen=True)
class Space:
    """What :func:`search` ranges over: a field left ``None`` is searched (t a divisor of the
    heads within a node, p a divisor of L, b a power of two up to ``max_micro_batch``, v every
    chunk count the split allows (:func:`chunk_counts`) up to ``max_chunks`` under
    ``schedule``, every recomputation, every ZeRO stage the layout allows, cp and ep over powers
    of two up to ``max_cp`` and ``max_ep``), a value fixes it. ``max_ep`` None: up to the
    experts of an MoE model (:func:`ep_limit`), 1 for a dense one."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    micro_batch: int | None = None
    zero: int | None = None
    recompute: str | None = None
    cp: int | None = None
    ep: int | None = None
    chunks: int | None = None  # v, model chunks per stage (1: no interleaving)
    schedule: str | None = None  # "1f1b" (v = 1) or "interleaved" (v > 1); None: both
    max_micro_batch: int = 8
    max_chunks: int | None = None  # None: up to the layers per stage
    max_cp: int = 1
    max_ep: int | None = None  # None: the experts of an MoE model, 1 dense
    split: str | None = None  # None: "even" where p divides L, else "units"

    def __post_init__(self):
        if self.schedule not in (None, *SCHEDULES):
            raise ValueError(f"schedule ({self.schedule!r}) must be one of {', '.join(SCHEDULES)}")
        v = self.chunks
        if v is not None and (int(v) != v or v < 1):
            raise ValueError(f"chunks ({v}) must be a positive integer")
        if v and (self.schedule, v > 1) in (("1f1b", True), ("interleaved", False)):
            raise ValueError(
                f"chunks ({v}) contradicts schedule ({self.schedule}): 1f1b is v = 1, "
                "interleaved v > 1"
            )


def _stage_counts(model: ModelShape, space: Space) -> list[int]:
    """p to try: the fixed one, else the divisors of L and, for the "units" split, of L + 2
    (Llama 3 405B's 126 layers + embedding + head on 16 stages)."""
    if space.pp:
        return [space.pp]
    even = _divisors(model.layers)
    if space.split == "even":
        return even
    return sorted(set(even) | {p for p in _divisors(model.layers + 2) if 1 < p <= model.layers})


SCHEDULES = ("1f1b", "interleaved")
"""Pipeline schedules the search prices: 1F1B (v = 1, Narayanan et al. 2021 §2.2.1) and
interleaved 1F1B (v > 1 model chunks per stage, §2.2.2). The zero-bubble schedules the pipeline
chapter teaches (ZB-H1) split the backward into two passes, which this model does not price."""


def chunk_counts(model: ModelShape, space: Space, p: int, m: int, split: str) -> list[int]:
    """v to try for p stages and m micro-batches: 1 and every v > 1 the split allows, L (even)
    or L + 2 ("units") divisible by p·v, so every chunk has the same count of layers (v up to
    the layers per stage), when m ≥ p (Llama 3's flexible schedule, Llama Team 2024 §3.3.2:
    m need not be a multiple of p); capped by ``space.max_chunks``, narrowed by
    ``space.schedule`` and fixed by ``space.chunks``."""
    if space.chunks:
        return [space.chunks]
    units = model.layers + 2 if split == "units" else model.layers
    top = space.max_chunks or units
    inter = []
    if p > 1 and m >= p and units % p == 0:
        inter = [v for v in _divisors(units // p) if 1 < v <= top]
    return {"1f1b": [1], "interleaved": inter}.get(space.schedule, [1, *inter])


def _split_for(model: ModelShape, space: Space, p: int) -> str:
    return space.split or ("even" if model.layers % p == 0 else "units")


def _as_options(options) -> Options:
    """``options``, or the defaults for ``None``: an :class:`Options` is the only way in."""
    if options is None:
        return Options()
    if not isinstance(options, Options):
        raise TypeError(f"options ({options!r}) must be an Options (or None)")
    return options


def plan_options(model: ModelShape, cluster: Cluster, options: Options | None = None) -> Options:
    """``options`` with every default decided, once: the attention kernel (the shape's, else the
    GPU's era, :func:`attention_for`), the precision recipe (:func:`precision_for`), then the
    recipe's reduction bytes and headroom (:meth:`Options.resolved`)."""
    if options is not None and options.fp8 == "mxfp8":  # Blackwell only
        check_fp8_gpu(cluster.gpu, options.fp8)
    return (options or Options()).resolved(
        attention_for(model, cluster.gpu.name), precision_for(cluster.gpu.name)
    )


def model_flops(model: ModelShape, global_batch: int, recompute: str) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one step: Narayanan et al. 2021 Eq. 3 without and with
    the recomputation, plus the active MLP and GQA's narrower K and V against Eq. 3's 16h² MLP
    and 6h² QKV (forward ×3 for fwd + bwd, ×4 with full recomputation)."""
    L, h, s, V = model.layers, model.hidden, model.seq, model.vocab
    mf = flops_per_iteration(global_batch, s, L, h, V, "none")
    hw = flops_per_iteration(global_batch, s, L, h, V, recompute)
    per_token = (
        model.top_k * model.mlp_matrices * model.ffn_width * h
        - 8 * h * h
        + 2 * h * (model.kv_width - h)
    )
    extra = 2 * L * global_batch * s * per_token
    return mf + 3 * extra, hw + (4 if recompute == "full" else 3) * extra


def _divisors(n: int) -> list[int]:
    """The divisors of n in increasing order, in O(√n)."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return small + [n // k for k in reversed(small) if k * k != n]


def evaluate(
    model: ModelShape, cluster: Cluster, layout: Layout, options: Options | None = None
) -> Config:
    """Predicted memory and step time of one :class:`Layout` under ``options`` (an
    :class:`~minipar.cost.planner.three_d_terms.Options`; ``None``: every default) (see the
    module docstring for the model): the named terms of :func:`terms`, held by a
    :class:`Config`. What each option and the optional dimensions change is said by the term
    that prices it (:mod:`~minipar.cost.planner.three_d_terms`): context parallelism (``cp``,
    rank order t → cp → d → p) holds s/cp tokens per rank and replicates the weights over cp
    (``term_cp``); expert parallelism (``ep``, an MoE :class:`ModelShape`) folds the experts
    over the stage's ranks (MoE parallel folding, Liu et al. 2025; ``expert_grid``,
    ``term_ep``), and with t > 1 needs sequence parallelism (Megatron-Core), which
    :func:`check` enforces.
    """
    if not isinstance(layout, Layout):
        raise TypeError(f"layout ({layout!r}) must be a Layout")
    br = terms(model, cluster, layout, options)
    step = br.step_seconds
    n = layout.tp * layout.cp * layout.pp * layout.dp
    mf, hw = model_flops(model, layout.global_batch, layout.recompute)
    return Config(layout, br, mf / (step * n * cluster.peak), hw / (step * n * cluster.peak))


def terms(
    model: ModelShape, cluster: Cluster, layout: Layout, options: Options | None = None
) -> StepBreakdown:
    """The named terms of one layout (:func:`minipar.cost.planner.three_d_terms.breakdown`), after
    :func:`check` and the options' own rules, every default decided by :func:`plan_options`."""
    check(model, cluster, layout)
    return breakdown(model, cluster, layout, plan_options(model, cluster, _as_options(options)))


def _check_stages(model: ModelShape, layout: Layout) -> None:
    """The split's rules (:data:`~minipar.cost.planner.three_d_terms.SPLITS`) and the cost
    model's layout rules (:func:`minipar.cost.planner.breakdown.check_layout`)."""
    p, v = layout.pp, layout.chunks
    if layout.split not in SPLITS:
        raise ValueError(f"split ({layout.split!r}) must be one of {', '.join(SPLITS)}")
    uneven = layout.split == "units"
    check_layout(
        model.layers,
        model.hidden,
        model.heads,
        d=layout.dp,
        t=layout.tp,
        p=1 if uneven else p,
        zero=layout.zero,
    )
    if uneven and (not 1 <= p <= model.layers or (v > 1 and (model.layers + 2) % (p * v))):
        raise ValueError(
            f"uneven stages (split units) need p ({p}) in [1, layers ({model.layers})] and, "
            f"interleaved, layers + 2 ({model.layers + 2}) divisible by p·v ({p}·{v})"
        )
    if not uneven and model.layers % (p * v):
        raise ValueError(f"layers ({model.layers}) must be divisible by p·v ({p}·{v})")


def check(model: ModelShape, cluster: Cluster, layout: Layout) -> None:
    """Raise ``ValueError`` naming the first rule the layout breaks: the cost model's layout
    rules (:func:`minipar.cost.planner.breakdown.check_layout`), then the planner's own."""
    t, p, d, b, v = layout.tp, layout.pp, layout.dp, layout.micro_batch, layout.chunks
    zero, cp, ep, global_batch = layout.zero, layout.cp, layout.ep, layout.global_batch
    model.check()
    _check_stages(model, layout)
    kv = model.kv_heads or model.heads
    if kv % t:
        raise ValueError(
            f"kv heads ({kv}) must be divisible by t ({t}): Megatron-Core splits the key/value "
            "heads over TP, it does not replicate them"
        )
    if not (isinstance(cp, int) and cp >= 1 and isinstance(ep, int) and ep >= 1):
        raise ValueError(f"cp ({cp}) and ep ({ep}) must be integers >= 1")
    if model.seq % (2 * cp if cp > 1 else 1):
        raise ValueError(f"seq ({model.seq}) must be divisible by 2·cp ({2 * cp}): zigzag chunks")
    if ep > 1 and (not model.moe or model.experts % ep):
        raise ValueError(f"ep ({ep}) needs an MoE model whose experts ({model.experts}) it divides")
    if ep > 1:  # MoE parallel folding
        folded_expert_dp(t, cp, d, ep)
    if model.moe and t > 1 and not layout.sp:
        raise ValueError(
            f"an MoE model with t ({t}) > 1 needs sequence parallelism (Megatron-Core), got sp "
            "False"
        )
    if t * cp * p * d != cluster.gpus:
        raise ValueError(
            f"gpus ({cluster.gpus}) must equal t·cp·p·d ({t}·{cp}·{p}·{d})"
            if cp > 1
            else f"gpus ({cluster.gpus}) must equal t·p·d ({t}·{p}·{d})"
        )
    if global_batch % (d * b):
        raise ValueError(f"global batch ({global_batch}) must be divisible by d·b ({d}·{b})")
    m = global_batch // (d * b)
    if v > 1 and (p == 1 or m < p):
        raise ValueError(
            f"interleaving (v={v}) needs p > 1 and microbatches m ({m}) at least p ({p})"
        )
    if check_zero_stage(zero) == 2 and p > 1:
        raise ValueError(
            f"ZeRO stage (2) needs p = 1 (its sharded gradients would be reduced "
            f"every micro-batch under PP; use ZeRO-1 or ZeRO-3), got p ({p})"
        )


def _powers(fixed: int | None, top: int) -> list[int]:
    """``[fixed]`` if given, else the powers of two up to ``top``."""
    return [fixed] if fixed else [1 << k for k in range(top.bit_length())]


def ep_limit(model: ModelShape, space: Space) -> int:
    """The largest ep :func:`search` tries: ``space.max_ep`` when given, else the experts of an
    MoE model (every expert on its own rank at most: DeepSeek-V3 trained with EP 64 over its 256,
    DeepSeek-AI 2024 §3.2), 1 for a dense model."""
    if space.max_ep is not None:
        return space.max_ep
    return model.experts if model.moe else 1


def _ep_fits(model: ModelShape, e: int, t: int, cp_: int, d: int) -> bool:
    """ep = ``e`` divides the experts and the t·cp·d ranks of a stage it folds over (MoE
    parallel folding, :func:`~minipar.cost.chapters.expert_parallel.folded_expert_dp`)."""
    return model.experts % e == 0 and (t * cp_ * d) % e == 0


def _candidates(
    model: ModelShape, cluster: Cluster, global_batch: int, space: Space, refused: list
):
    """(t, cp, ep, p, d, b) of ``space`` that divide the GPUs and the batch; the rule and the
    values of each one left out go to ``refused``. A searched ep (``space.ep`` None) that does
    not fold onto the grid (:func:`_ep_fits`) is skipped without a refusal: the default search
    of an MoE model tries every power of two up to its experts (:func:`ep_limit`)."""
    sp = space
    kv = model.kv_heads or model.heads  # t divides the heads and the key/value heads
    within_node = [k for k in _divisors(math.gcd(model.heads, kv)) if k <= cluster.gpus_per_node]
    ts = [sp.tp] if sp.tp else within_node
    ps = _stage_counts(model, sp)
    for t, cp_, ep_, p in (
        (t, c, e, p)
        for t in ts
        for c in _powers(sp.cp, sp.max_cp)
        for e in _powers(sp.ep, ep_limit(model, sp))
        for p in ps
    ):
        if ep_ > 1 and not model.moe:
            continue
        if cluster.gpus % (t * cp_ * p):
            refused.append(f"t·cp·p ({t * cp_ * p}) must divide the GPUs ({cluster.gpus})")
            continue
        d = cluster.gpus // (t * cp_ * p)
        if ep_ > 1 and not sp.ep and not _ep_fits(model, ep_, t, cp_, d):
            continue
        if sp.dp and d != sp.dp:
            refused.append(f"t·cp·p·d ({t * cp_ * p * sp.dp}) must equal the GPUs ({cluster.gpus})")
            continue
        if global_batch % d:
            refused.append(f"d ({d}) must divide the global batch ({global_batch})")
            continue
        for b in _powers(sp.micro_batch, sp.max_micro_batch):
            if global_batch % (d * b):
                refused.append(
                    f"micro-batch ({b}) × d ({d}) must divide the global batch ({global_batch})"
                )
                continue
            yield t, cp_, ep_, p, d, b


def search(
    model: ModelShape,
    cluster: Cluster,
    global_batch: int,
    space: Space | None = None,
    options: Options | None = None,
    *,
    refusals: list[str] | None = None,
) -> list[Config]:
    """Every valid layout of ``space`` (:class:`Space`; default: everything), fitting ones
    first, each group ordered by predicted step time, every layout evaluated with the same
    ``options`` (:class:`~minipar.cost.planner.three_d_terms.Options`; an invalid one raises
    ``ValueError`` here rather than leaving every layout out).

    Beyond :class:`Space`'s ranges: t within a node (Megatron's rule: keep TP inside the NVLink
    domain, Narayanan et al. 2021 §3.3 Takeaway 1), SP on and off when t > 1, ZeRO 2 only with
    p = 1 and 1-3 only with d > 1 (ZeRO-3 composes with PP as in torchtitan). ``refusals``, a
    list, receives the rule and the values of each candidate left out (for
    :func:`why_nothing_fits`).
    """
    refused = refusals if refusals is not None else []
    space = space or Space()
    options = plan_options(model, cluster, _as_options(options))  # its rules and defaults, once
    out: list[Config] = []
    for t, cp_, ep_, p, d, b in list(_candidates(model, cluster, global_batch, space, refused)):
        m = global_batch // (d * b)
        split = _split_for(model, space, p)
        vs = chunk_counts(model, space, p, m, split)
        zs = list(ZERO_STAGES) if p == 1 else [0, 1, 3]  # ZeRO-2 needs p = 1
        zs = [space.zero] if space.zero is not None else [0] if d == 1 else zs
        for v, rc, sp, z in (
            (v, rc, sp, z)
            for v in vs
            for rc in ([space.recompute] if space.recompute else RECOMPUTE)
            for sp in ((True,) if model.moe and t > 1 else (False, True) if t > 1 else (False,))
            for z in zs
        ):
            layout = Layout(global_batch, t, p, d, b, v, rc, sp, z, cp_, ep_, split)
            try:
                out.append(evaluate(model, cluster, layout, options))
            except ValueError as e:
                refused.append(str(e))
    out.sort(key=lambda c: (not c.fits, c.step_seconds, c.bytes_per_gpu))
    return out


def why_nothing_fits(
    model: ModelShape,
    cluster: Cluster,
    configs: Iterable[Config],
    refusals: Iterable[str] = (),
    options: Options | str | None = None,
) -> str:
    """One line: why no layout fits one GPU's memory, or, when no layout was valid, the rules
    the candidates broke (``refusals`` from :func:`search`), most frequent first. Memory is
    compared with the limit after the headroom of ``options`` (an :class:`Options`, or a
    precision recipe's name; default: the GPU's era)."""
    if not isinstance(options, Options):
        options = Options(precision=options)
    options = plan_options(model, cluster, options)
    floor = states_floor(model, cluster, options)
    if floor is not None:
        return floor
    configs = list(configs)
    if not configs:
        return "no layout is valid: " + (
            "; ".join(_causes(refusals)) or f"no t divides the heads ({model.heads}) within a node"
        )
    best = min(configs, key=lambda c: c.bytes_per_gpu)
    return (
        f"smallest layout (t={best.tp}, p={best.pp}, d={best.dp}, b={best.micro_batch}, "
        f"{best.recompute} recomputation, ZeRO-{best.zero}) needs "
        f"{best.bytes_per_gpu / 2**30:.1f} GiB per GPU, more than the "
        f"{_limit_words(cluster, options)}"
    )


_PRUNED = ("t·cp·p (", "t·cp·p·d (", "d (", "micro-batch (")
"""How :func:`_candidates`' refusals begin: (t, cp, p, d, b) that do not divide the GPUs or
the batch, which the search leaves out of any plan; a cause only when no candidate passed."""


def _causes(refusals: Iterable[str]) -> list[str]:
    """The rules that made no layout valid: those the layouts that divide the GPUs and the batch
    broke (else the divisibility ones), the most frequent, and a second only if it was broken
    as often (both hold); never a pruned candidate's rule beside a layout rule."""
    rules = Counter(refusals)
    deeper = Counter({r: n for r, n in rules.items() if not r.startswith(_PRUNED)})
    ranked = (deeper or rules).most_common(2)
    return [r for r, n in ranked if n == ranked[0][1]]


def _limit_words(cluster: Cluster, options: Options) -> str:
    cap = cluster.gpu.memory_bytes
    return (
        f"{cap * (1 - options.headroom) / 2**30:.3g} GiB limit ({cap / 2**30:.0f} GiB of one "
        f"{cluster.gpu.name} less {100 * options.headroom:.6g} % headroom)"
    )


def states_floor(model: ModelShape, cluster: Cluster, options: Options) -> str | None:
    """Why the model states alone cannot fit even sharded over every GPU (ZeRO-3 over N, the
    recipe's bytes per parameter) within the limit after the headroom, or ``None``: a check
    from the parameter count alone, before any layout is searched."""
    rc = options.recipe
    per = rc.weight_bytes + rc.grad_bytes + rc.optimizer_bytes
    floor = per * model.params / cluster.gpus
    if floor <= cluster.gpu.memory_bytes * (1 - options.headroom):
        return None
    return (
        f"model states alone need {per:g} B × {model.params / 1e9:.4g} B params / "
        f"{cluster.gpus} GPUs = {floor / 2**30:.4g} GiB per GPU even fully sharded, more than the "
        f"{_limit_words(cluster, options)}"
    )


def preflight(
    model: ModelShape, cluster: Cluster, global_batch: int, space: Space, options: Options
) -> None:
    """Raise ``ValueError`` with the rule and its values when no layout of ``space`` can exist,
    before the search: the model states against memory (:func:`states_floor`), then which
    divisibility rule every candidate breaks, the first one that none passes: t·cp·p dividing
    the GPUs, then d = N/(t·cp·p) dividing the global batch B, then b·d dividing B."""
    floor = states_floor(model, cluster, options)
    if floor:
        raise ValueError(floor)
    refused: list[str] = []
    if next(_candidates(model, cluster, global_batch, space, refused), None) is not None:
        return
    if len(set(refused)) == 1:  # one rule, with its values
        raise ValueError(refused[0])
    ts = (
        [space.tp]
        if space.tp
        else [k for k in _divisors(model.heads) if k <= cluster.gpus_per_node]
    )
    ps = _stage_counts(model, space)
    cps = _powers(space.cp, space.max_cp)
    tcps = {t * c * p for t in ts for c in cps for p in ps if cluster.gpus % (t * c * p) == 0}
    ds = sorted(d for d in {cluster.gpus // n for n in tcps} if not space.dp or d == space.dp)
    if not ds:
        raise ValueError(
            f"no t·cp·p divides the GPUs ({cluster.gpus}): t from {_short_list(ts)} (dividing the "
            f"heads {model.heads}, at most {cluster.gpus_per_node} per node), p from "
            f"{_short_list(ps)} (dividing the layers {model.layers})"
        )
    ok = [d for d in ds if global_batch % d == 0]
    if not ok:
        raise ValueError(
            f"global batch ({global_batch}) must be divisible by d = N/(t·cp·p) of some layout: "
            f"d is one of {_short_list(ds)} here, and none divides {global_batch}"
        )
    b = space.micro_batch
    raise ValueError(
        f"global batch ({global_batch}) must be divisible by micro-batch × d: "
        + (f"micro-batch ({b})" if b else f"micro-batch up to {space.max_micro_batch}")
        + f" × d (one of {_short_list(ok)}) divides none"
    )


def _short_list(xs: list[int]) -> str:
    xs = list(xs)
    return ", ".join(map(str, xs)) if len(xs) <= 6 else f"{xs[0]}, {xs[1]}, … {xs[-1]}"


# --- what decides a plan ---------------------------------------------------------------------

SENSITIVITY_KNOBS = ("gemm_efficiency", "flash_efficiency", "alpha", "inter_bandwidth", "headroom")
"""The constants :func:`sensitivity` moves: η, the flash kernel's rate, both links' α, the NIC's
bandwidth and the memory kept free."""


def _perturbed(cluster: Cluster, options: Options, knob: str, f: float) -> tuple[Cluster, Options]:
    g = cluster.gpu
    if knob in ("gemm_efficiency", "flash_efficiency"):  # fractions of the peak, at most 1
        return replace(cluster, gpu=replace(g, **{knob: min(1.0, getattr(g, knob) * f)})), options
    if knob == "alpha":
        intra, inter = (replace(lk, alpha=lk.alpha * f) for lk in (cluster.intra, cluster.inter))
        return replace(cluster, intra=intra, inter=inter), options
    if knob == "inter_bandwidth":
        return replace(
            cluster, inter=replace(cluster.inter, bandwidth=cluster.inter.bandwidth * f)
        ), options
    return cluster, replace(options, headroom=min(0.99, options.headroom * f))


def _layout_values(c: Config) -> tuple:
    return tuple(getattr(c.layout, k) for k in _LAYOUT_KEYS)


def sensitivity(
    model: ModelShape,
    cluster: Cluster,
    global_batch: int,
    space: Space,
    options: Options,
    change: float = 0.2,
) -> list[dict]:
    """How the plan moves when each of :data:`SENSITIVITY_KNOBS` is ``change`` lower and higher:
    the best layout's step time and MFU under the changed constant, and the layout the search
    then ranks first (``same``: it is still the best). What a reader sees decide a choice."""
    options = plan_options(model, cluster, options)
    fitting = [c for c in search(model, cluster, global_batch, space, options) if c.fits]
    if not fitting:
        return []
    best = fitting[0]
    rows = []
    for knob in SENSITIVITY_KNOBS:
        for f in (1 - change, 1 + change):
            cl2, opt2 = _perturbed(cluster, options, knob, f)
            same = evaluate(model, cl2, best.layout, opt2)
            ranked = [c for c in search(model, cl2, global_batch, space, opt2) if c.fits]
            top = ranked[0] if ranked else None
            rows.append(
                {
                    "knob": knob,
                    "factor": f,
                    "step_seconds": same.step_seconds,
                    "step_change": same.step_seconds / best.step_seconds - 1,
                    "mfu": same.mfu,
                    "fits": same.fits,
                    "best": None if top is None else dict(zip(_LAYOUT_KEYS, _layout_values(top))),
                    "same": top is not None and _layout_values(top) == _layout_values(best),
                }
            )
    return rows


_LAYOUT_KEYS = ("tp", "cp", "pp", "dp", "micro_batch", "chunks", "recompute", "zero")


# --- whole runs and money -------------------------------------------------------------------


def training_seconds(
    params: float, tokens: float, gpus: int, flops_per_gpu: float, recompute: bool = True
) -> float:
    """End-to-end training time ≈ 8·T·P/(n·X) with activation recomputation, 6·T·P/(n·X)
    without (Narayanan et al. 2021 §5.1, Eq. 4): T tokens, P parameters, n GPUs, X achieved
    FLOP/s per GPU."""
    if min(params, tokens, gpus, flops_per_gpu) <= 0:
        raise ValueError("params, tokens, gpus and flops_per_gpu must be > 0")
    return (8 if recompute else 6) * tokens * params / (gpus * flops_per_gpu)


def implied_mfu(gpu_hours: float, params: float, tokens: float, peak: float) -> float:
    """MFU implied by a reported GPU-hour total: 6·N·D (Kaplan et al. 2020) / (hours·3600·peak)."""
    if min(gpu_hours, params, tokens, peak) <= 0:
        raise ValueError("gpu_hours, params, tokens and peak must be > 0")
    return 6 * params * tokens / (gpu_hours * 3600 * peak)


def dollars_per_million_tokens(
    step_seconds: float, gpus: int, tokens_per_step: float, dollars_per_gpu_hour: float
) -> float:
    """Price of training on one million tokens: GPU-hours per token × $/GPU-hour × 10⁶."""
    if min(step_seconds, gpus, tokens_per_step) <= 0 or dollars_per_gpu_hour < 0:
        raise ValueError("step_seconds, gpus, tokens_per_step must be > 0 and the price >= 0")
    return step_seconds * gpus / 3600 / tokens_per_step * dollars_per_gpu_hour * 1e6


BOUNDS = {
    "bandwidth": (1e6, 1e14, " B/s"),  # 1 MB/s .. 100 TB/s per direction: any link there is
    "alpha": (0.0, 1e-2, " s"),  # up to 10 ms per message: a wide-area network's latency
    "gemm_efficiency": (0.01, 1.0, ""),  # 1 % .. 100 % of the dense peak
}
"""Physical ranges of the constants a user may override; a value outside is refused (a step
time of 10⁴⁰ s from a bandwidth of 10⁻³⁰ B/s helps nobody)."""


def _in_range(name: str, value: float, kind: str) -> None:
    lo, hi, unit = BOUNDS[kind]
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ValueError(f"{name} ({value:g}) must be between {lo:g} and {hi:g}{unit}")


def achieved(lk: Link) -> Link:
    """``lk`` at NCCL's achieved bus bandwidth: its line rate times ``lk.bus_efficiency``
    (:class:`~minipar.cost.kernels.hardware.Link`; 1.0 for the A100 links, whose fit absorbed
    it); a bandwidth given on the command line is taken as achieved."""
    if lk.bus_efficiency == 1.0:
        return lk
    return replace(lk, bandwidth=lk.bandwidth * lk.bus_efficiency, bus_efficiency=1.0)


def cluster(
    gpus: int,
    gpus_per_node: int = 8,
    gpu: "str | GPU" = "A100-80GB",
    intra: str | None = None,
    inter: str | None = None,
    gemm_efficiency: float | None = None,
    **links: float,
) -> Cluster:
    """A :class:`Cluster` from presets. ``intra``/``inter`` default to the GPU generation's links
    (A100: NVLink 3 + HDR 200; H100, H200: NVLink 4 + NDR 400; :data:`hardware.GPUS`);
    ``intra_bandwidth``, ``intra_alpha``, ``inter_bandwidth``, ``inter_alpha`` keywords override a
    link's numbers and ``gemm_efficiency`` the GPU's η, each within :data:`BOUNDS`. ``gpu`` is a
    preset's name or a :class:`~minipar.cost.kernels.hardware.GPU` (a measured profile,
    :func:`minipar.cost.kernels.hardware.load_gpu_profile`)."""
    if not all(isinstance(n, int) and n >= 1 for n in (gpus, gpus_per_node)):
        raise ValueError(f"gpus ({gpus}) and gpus_per_node ({gpus_per_node}) must be integers >= 1")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise ValueError(f"gpus ({gpus}) must be a multiple of gpus_per_node ({gpus_per_node})")
    for k, v in links.items():  # finite and physical: no Infinity, no 40-digit step times
        if v is not None:
            _in_range(k, v, "alpha" if "alpha" in k else "bandwidth")
    g = gpu if isinstance(gpu, GPU) else gpu_preset(gpu)
    if gemm_efficiency is not None:
        _in_range("gemm_efficiency", gemm_efficiency, "gemm_efficiency")
        g = replace(g, gemm_efficiency=gemm_efficiency)
    pair = []
    for k, name in (("intra", intra or g.intra), ("inter", inter or g.inter)):
        lk = achieved(link_preset(name))
        bw, alpha = links.get(f"{k}_bandwidth"), links.get(f"{k}_alpha")
        if bw or alpha is not None:
            lk = Link(
                f"{lk.name}*",
                bw or lk.bandwidth,
                lk.alpha if alpha is None else alpha,
                "given on the command line",
            )
        pair.append(lk)
    return Cluster(gpus, gpus_per_node, g, *pair)


def megatron_rule_layout(
    model: ModelShape,
    cluster: Cluster,
    global_batch: int,
    micro_batch: int = 1,
    recompute: str = "full",
    zero: int = 0,
) -> Config | None:
    """Narayanan et al. 2021 §3.3's rule of thumb: t = GPUs per node (largest valid), then the
    smallest p that fits, then d = N/(t·p). ``None`` when no p fits."""
    t = max(
        k for k in _divisors(model.heads) if k <= cluster.gpus_per_node and cluster.gpus % k == 0
    )
    for p in _divisors(model.layers):
        if cluster.gpus % (t * p) or global_batch % ((cluster.gpus // (t * p)) * micro_batch):
            continue
        layout = Layout(
            global_batch, t, p, cluster.gpus // (t * p), micro_batch, 1, recompute, zero=zero
        )
        c = evaluate(model, cluster, layout)
        if c.fits:
            return c
    return None
