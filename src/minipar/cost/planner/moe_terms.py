"""The planner's mixture-of-experts terms: the router, the permute and unpermute around the
all-to-alls, the grouped expert GEMMs at few rows per expert, and the cost of overlapping the
all-to-alls with compute; with the load the busiest EP rank carries (dropless or capped by a
capacity factor). Each ``term_<name>`` is a row of ``term_table.json``; the all-to-alls
themselves are :func:`~minipar.cost.planner.communication_terms.term_ep`.

Tokens per rank: b·s/cp, ÷ t with sequence parallelism (Megatron-Core routes each TP rank's
sequence shard); a token goes to K routed experts (the shared experts are dense MLPs and stay
in the compute term). Units: seconds, bytes."""

from __future__ import annotations

from typing import NamedTuple

from ..kernels.compute import fp8_peak, gpu_gemm_seconds
from .layout import Layout, Options, expert_grid, stage_layers

EP_COMM_SMS = 20
"""Streaming multiprocessors the dispatch and combine kernels keep while they overlap compute:
DeepSeek-V3's 20 of the H800's 132 (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §3.2.2:
20 SMs suffice to saturate IB and NVLink); DeepEP's training kernels default to the same
20. The same count on every GPU, an assumption (no file here measures it on Blackwell)."""

ROUTER_BYTES_PER_EXPERT = 16
"""Bytes per token and expert the router's element-wise kernels move forward (and again
backward): the fp32 logits written by the router GEMM and read by the score function
(softmax or sigmoid), the fp32 scores written and read by top-k: 4 × 4 bytes. The top-k
indices and weights (12 bytes per chosen expert) are added on top. Megatron-Core computes the
router's scores in fp32 (``--moe-router-dtype fp32``, the DeepSeek-V3 recipe)."""

ROUTER_KERNELS = 3
"""Kernels of the router per pass beyond its GEMM: the score function, top-k and the
auxiliary (load-balancing) loss or bias update."""


def moe_load(model, layout: Layout, options: Options) -> float:
    """The busiest EP rank's routed tokens over the mean: 1 without EP; dropless (Megatron-Core's
    default, ``options.moe_capacity`` None) ``options.moe_imbalance``; with a capacity factor c
    (GShard's, Lepikhin et al. 2021 §2.2; ``--moe-expert-capacity-factor``) the tokens above
    c times the mean are dropped, not padded: min(imbalance, c)."""
    if not model.moe or layout.ep == 1:
        return 1.0
    if options.moe_capacity is None:
        return options.moe_imbalance
    return min(options.moe_imbalance, options.moe_capacity)


def moe_layers(model, layout: Layout) -> int:
    """MoE layers on the slowest (first-stage-sized) stage: the stage's layers, less the
    dense-first layers (DeepSeek-V3's first 3) where they can all sit on it (the first stage
    holds them; the slowest stage is priced with L/p layers)."""
    lp = stage_layers(model.layers, layout)[0]
    return min(lp, model.layers - model.dense_layers) if model.moe else 0


def routed_tokens(model, layout: Layout) -> int:
    """Tokens one rank routes per micro-batch: b·s/cp, ÷ t with SP."""
    tokens = layout.micro_batch * (model.seq // layout.cp)
    return tokens // layout.tp if layout.sp else tokens


def memory_bound_seconds(nbytes: float, kernels: int, gpu, compiled: bool) -> float:
    """``kernels`` element-wise kernels moving ``nbytes``: the longer of their issue time
    (``GPU.kernel_issue_s`` each; none when ``compiled``) and their traffic at the GPU's
    element-wise rate (``GPU.elementwise_bandwidth``, else its HBM bandwidth): the rule of
    :func:`minipar.cost.kernels.compute.elementwise_seconds`."""
    bw = gpu.elementwise_bandwidth or gpu.hbm_bandwidth
    issue = 0.0 if compiled else kernels * gpu.kernel_issue_s
    return max(issue, nbytes / bw)


def _passes(layout: Layout) -> int:
    """Forward passes per micro-batch: two under full recomputation."""
    return 2 if layout.recompute == "full" else 1


def term_router(model, cluster, layout: Layout, options: Options) -> float:
    """The router of one micro-batch on the slowest stage, per MoE layer: its (T, E, h) GEMM
    forward and the two backward ones at the GPU's GEMM rule, and its element-wise kernels
    (:data:`ROUTER_KERNELS`, :data:`ROUTER_BYTES_PER_EXPERT` per token and expert, 12 bytes per
    chosen expert) forward and backward as memory-bound kernels
    (:func:`memory_bound_seconds`). T = :func:`routed_tokens` (Fedus et al. 2022, "Switch
    Transformers", §2.1; DeepSeek-AI 2024 §2.1.2's sigmoid scores)."""
    if not model.moe:
        return 0.0
    T, E, gpu = routed_tokens(model, layout), model.experts, cluster.gpu
    gemm = gpu_gemm_seconds(gpu, T, E, model.hidden)
    back = gpu_gemm_seconds(gpu, T, model.hidden, E) + gpu_gemm_seconds(gpu, model.hidden, E, T)
    moved = T * (ROUTER_BYTES_PER_EXPERT * E + 12 * model.top_k)
    one = memory_bound_seconds(moved, ROUTER_KERNELS, gpu, options.compiled)
    per_layer = _passes(layout) * (gemm + one) + back + one
    return moe_layers(model, layout) * per_layer


def permute_bytes(model, layout: Layout, options: Options) -> float:
    """Bytes one rank's permute and unpermute move per MoE layer and forward pass: the sender's
    permute reads T rows of h and writes K·T (16-bit), its unpermute reads the K·T returned
    rows and writes T; with ep > 1 the receiver sorts the K·T·load rows it got by local expert
    and back (Megatron-Core's ``MoEAlltoAllTokenDispatcher``: ``permute`` and
    ``sort_chunks_by_idxs``), each a read and a write."""
    T, K, h = routed_tokens(model, layout), model.top_k, model.hidden
    out = 2 * (1 + K) * T * h * 2
    if layout.ep > 1:
        out += 2 * 2 * K * T * moe_load(model, layout, options) * h * 2
    return out


def term_permute(model, cluster, layout: Layout, options: Options) -> float:
    """Permute and unpermute of one micro-batch on the slowest stage: :func:`permute_bytes`
    forward (twice under full recomputation) and the same backward, as memory-bound kernels
    (:func:`memory_bound_seconds`, two kernels per pass, four with ep > 1), per MoE layer."""
    if not model.moe:
        return 0.0
    kernels = 4 if layout.ep > 1 else 2
    one = memory_bound_seconds(
        permute_bytes(model, layout, options), kernels, cluster.gpu, options.compiled
    )
    return moe_layers(model, layout) * (_passes(layout) + 1) * one


def grouped_gemm_half_rows(gpu, fp8: bool = False) -> float:
    """r₀: the rows per expert at which an expert's GEMM spends as long reading its weights as
    multiplying, b·P·η/(2W) (b bytes per element, P the peak, η the GEMM efficiency, W the HBM
    rate), from the additive GEMM rule measured on the H200
    (:mod:`minipar.cost.kernels.compute`: λ + 2MNK/(Pη) + 2(MK + KN + MN)/W): an expert GEMM of
    r rows reads its N·K weights once whatever r, so it runs at r/(r + r₀) of a large GEMM's
    rate (:func:`grouped_gemm_efficiency`). H800, bf16: about 260 rows."""
    b = 1 if fp8 else 2
    peak = fp8_peak(gpu) if fp8 else gpu.peak_flops["bf16"]
    return b * peak * gpu.gemm_efficiency / (2 * gpu.hbm_bandwidth)


def grouped_gemm_efficiency(rows: float, gpu, fp8: bool = False) -> float:
    """An expert GEMM's rate over a large GEMM's at ``rows`` rows per expert: r/(r + r₀)
    (:func:`grouped_gemm_half_rows`); 1 for no rows."""
    return rows / (rows + grouped_gemm_half_rows(gpu, fp8)) if rows > 0 else 1.0


class GroupedGemmTerm(NamedTuple):
    value: float  # seconds per micro-batch on the slowest stage
    rows: float  # routed rows per local expert on the busiest rank
    efficiency: float  # grouped_gemm_efficiency at those rows


def term_grouped_gemm(model, cluster, layout: Layout, options: Options) -> GroupedGemmTerm:
    """What the grouped expert GEMMs cost beyond the compute term's pricing of the routed MLP as
    one dense MLP of width K·f: a rank holding E/ep experts (each split over ETP,
    :func:`expert_grid`) reads every local expert's weights in each GEMM pass (forward, twice
    under full recomputation, input and weight gradients), where the dense pricing read K
    experts' worth: the difference (never below 0) in bytes at the HBM rate, per MoE layer.
    Equivalently, the expert GEMMs run at :func:`grouped_gemm_efficiency` of r routed rows per
    local expert, r = K·T·load·ep/E (Megatron-Core's ``GroupedMLP``; DeepSeek-AI 2024 §3.3's
    grouped GEMMs; the rows are not padded to the kernel's tile, an approximation)."""
    if not model.moe:
        return GroupedGemmTerm(0.0, 0.0, 1.0)
    etp = expert_grid(layout)[0]
    e_local = model.experts // layout.ep
    if layout.ep > 1:  # a rank's K·T rows, gathered from the ep ranks, over its E/ep experts
        rows = (
            model.top_k
            * routed_tokens(model, layout)
            * moe_load(model, layout, options)
            * layout.ep
            / model.experts
        )
    else:  # every TP rank runs all b·s/cp tokens through its slice of every expert
        rows = model.top_k * layout.micro_batch * (model.seq // layout.cp) / model.experts
    one = model.mlp_matrices * model.hidden * model.ffn_width  # one expert's weights
    extra = max(0.0, e_local * one / etp - model.top_k * one / layout.tp)
    b = 1 if options.fp8 else 2
    per_layer = (_passes(layout) + 2) * b * extra / cluster.gpu.hbm_bandwidth
    eff = grouped_gemm_efficiency(rows, cluster.gpu, bool(options.fp8))
    return GroupedGemmTerm(moe_layers(model, layout) * per_layer, rows, eff)


def term_ep_overlap(model, cluster, layout: Layout, options: Options, ep) -> float:
    """What overlapping the all-to-alls with compute costs (``options.ep_overlap``: Megatron-Core's
    ``--overlap-moe-expert-parallel-comm``, which pairs one micro-batch's forward with
    another's backward, and DeepSeek-V3's DualPipe, which does the same inside its
    bidirectional schedule, DeepSeek-AI 2024 §3.2.1): the dispatch and combine kernels hold
    :data:`EP_COMM_SMS` of the GPU's SMs while they run, so the compute they overlap loses that
    share of the GPU for as long as they last: ``ep.hidden`` × EP_COMM_SMS/SMs (the hidden
    all-to-all seconds of :func:`~minipar.cost.planner.communication_terms.term_ep`). DualPipe's
    own bubble and its second copy of the weights are :func:`dualpipe_bubble` and
    :func:`term_dualpipe` (``options.dualpipe``)."""
    if not options.ep_overlap:
        return 0.0
    return ep.hidden * min(1.0, EP_COMM_SMS / cluster.gpu.sms)


DUALPIPE_W = 1 / 3
"""W, a "backward for weights" chunk, as a share of one micro-batch's forward and backward on a
stage (F + B): the backward runs two GEMMs per forward GEMM (B = 2F) and W is its weight-gradient
half (W = F), so W = (F + B)/3. A ratio of FLOPs, not a measurement of DualPipe's chunks."""


def dualpipe_bubble(layout: Layout) -> tuple[float, float]:
    """(relative to the ideal time, fraction of the step) of DualPipe's bubble, in place of
    :func:`~minipar.cost.planner.layout.term_bubble`'s 1F1B (p − 1)(F + B): DeepSeek-AI 2024,
    "DeepSeek-V3 Technical Report", §3.2.1 Table 2, (p/2 − 1)(F&B + B − 3W), F, B and W one
    micro-batch's forward, full backward and weight-gradient backward on a stage, F&B a forward
    and a backward overlapped. Overlapping hides their communication, not their compute, so
    F&B = F + B, and with :data:`DUALPIPE_W` the bubble is (p/2 − 1)·(2/3)·(F + B): relative to
    m micro-batches, r = (p/2 − 1)·(2/3)/m, and r/(1 + r) of the step. DualPipe feeds
    micro-batches from both ends of the pipeline and needs p and m even (ibid.), and v = 1 here
    (its chunks are not the interleaved schedule's)."""
    p, m = layout.pp, layout.microbatches
    if layout.chunks != 1 or p % 2 or m % 2:
        raise ValueError(
            f"DualPipe needs p ({p}) and microbatches m ({m}) even and v ({layout.chunks}) = 1"
        )
    fb, b, w = 1.0, 2 * DUALPIPE_W, DUALPIPE_W  # F&B = F + B = 1 slot; B = 2F = 2W
    r = (p / 2 - 1) * (fb + b - 3 * w) / m
    return r, r / (1 + r)


def term_dualpipe(
    model, cluster, layout: Layout, options: Options, states, fp8_weights, activations
) -> float:
    """DualPipe's extra memory (``options.dualpipe``): each rank holds two stages, one per
    direction, so a second copy of its model states (the stage's weights, gradients and
    optimizer states, and its FP8 weight copies: Table 2's parameters 2×, an upper bound where
    the two copies' optimizer states could be shared) and 1/p more activations (Table 2's
    activations p + 1 against 1F1B's p) (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report",
    §3.2.1; :func:`dualpipe_bubble`). Checks the schedule's rules (:func:`dualpipe_bubble`)."""
    if not options.dualpipe:
        return 0.0
    dualpipe_bubble(layout)
    return states + fp8_weights + activations / layout.pp
