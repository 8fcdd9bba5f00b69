"""The planner's communication terms: TP, PP, CP, EP and ZeRO-3 per micro-batch, the DP
reduction and the tied embedding's all-reduce per step, and the collectives they are priced
with (α-β rings, NCCL's hierarchical all-reduce). Each ``term_<name>`` is a row of
``term_table.json``; a term that needs an earlier one's result takes it as a typed argument
named after it (the table's ``needs`` column)."""

from __future__ import annotations

from typing import NamedTuple

from ..chapters.context_parallel import allgather_collectives_per_layer, ring_sent_bytes_per_layer
from ..chapters.expert_parallel import all_to_all_time
from ..kernels.compute import FP8_GEMM_EFFICIENCY, FP8_ROWWISE_GEMM_RATIO, fp8_peak
from ..network.collectives import collective_time, hierarchical_all_reduce_time
from .compute_terms import ComputeTerm, layer_gemm_seconds
from .layout import ZERO3_COLLECTIVES, Layout, Options, expert_grid, reshards, stage_layers
from .moe_terms import moe_layers, moe_load
from .shapes import kv_width_per_rank, layer_dense_gemms, stage_params


def _ring_seconds(op: str, n: int, nbytes: float, lk) -> float:
    return collective_time(op, "ring", n, nbytes, lk.alpha, lk.bandwidth)


def dp_allreduce_seconds(nbytes: float, d: int, t: int, cluster) -> tuple[float, str]:
    """All-reduce of ``nbytes`` over the d ranks of one DP group (stride t in the rank order).

    Inside one node: a ring on the intra link. Spanning nodes with k = gpus_per_node/t group
    members per node: the hierarchical all-reduce (intra reduce-scatter, inter all-reduce on
    each rail, intra all-gather; Mikami et al. 2018). One member per node: a ring on the inter
    link. A reduce-scatter or an all-gather of the same bytes takes half this time (ring).
    """
    g = cluster.gpus_per_node
    if d == 1:
        return 0.0, "-"
    if t * d <= g:
        return _ring_seconds("all-reduce", d, nbytes, cluster.intra), cluster.intra.name
    k = max(1, g // t)
    if k > 1 and d % k == 0:
        return hierarchical_all_reduce_time(
            d // k, k, nbytes, cluster.intra, cluster.inter
        ), f"{cluster.intra.name}+{cluster.inter.name}"
    return _ring_seconds("all-reduce", d, nbytes, cluster.inter), cluster.inter.name


def zero3_collective_seconds(
    nbytes: float, n: int, t: int, cluster, algorithm: str = "hierarchical"
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
    if t * n <= cluster.gpus_per_node or algorithm == "hierarchical":
        ar, name = dp_allreduce_seconds(nbytes, n, t, cluster)
        return ar / 2, name
    slow = min(cluster.intra, cluster.inter, key=lambda lk: lk.bandwidth)  # the ring's slowest hop
    return collective_time(
        "all-gather",
        "ring",
        n,
        nbytes,
        max(cluster.intra.alpha, cluster.inter.alpha),
        slow.bandwidth,
    ), slow.name


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


class LinkTerm(NamedTuple):
    value: float  # seconds per micro-batch
    link: str  # the link it crosses ("-": none)


def tp_overlap_exposed(comm: float, gemm: float, t: int) -> float:
    """Seconds of ``comm`` left exposed when a collective over t ranks is decomposed into t
    chunks pipelined with the ``gemm`` seconds that depend on it (Wang et al. 2023, "Overlap
    Communication with Dependent Computation via Decomposition in Large Deep Learning Models",
    ASPLOS: each step computes on the chunk that has arrived while the next one moves): the
    first chunk cannot overlap (comm / t), the rest hides under the GEMM as far as it lasts.
    What the overlap costs the GEMMs (SMs taken, smaller pieces) is :func:`tp_overlap_cost`."""
    return comm / t + max(0.0, comm * (t - 1) / t - gemm)


TP_OVERLAP_RING_SPLITS = "t"
"""The all-gather overlaps are ring exchanges: the GEMM after the gather runs as t pieces of M/t
rows, one per chunk received (Transformer Engine's userbuffers ``ring_exchange`` method, one SM
for the exchange, the copy engines moving the data)."""

TP_OVERLAP_PIPELINE = {"proj": (4, 24), "fc2": (4, 8)}
"""The reduce-scatter overlaps after the attention projection and after the second MLP GEMM:
(splits, SMs) of Transformer Engine's userbuffers ``pipeline`` method, the GEMM run as 4 pieces
on the GPU's SMs less 24 (projection) and 8 (second MLP GEMM) reserved for the reduce-scatter
(``set_sm_margin``). Source: the ``ub_tp_comm_overlap_cfg`` of NVIDIA's Llama 3.1 405B recipe
(dgxc-benchmarking 25.02, ``llama3.1/llama3.1_405b.yaml``: ``proj_fprop`` and ``fc2_fprop``);
the same file's backward ``bulk`` overlaps take 2 SMs each (24 for the QKV weight gradient's)
while their collective runs and are not priced here (2 SMs of 132 is 1.5 %). Read from the
recipe, not fitted; experiment 3's TP-overlap rows (Nemotron-4 15B and 340B, Llama 3.1 70B and
405B, GPT-3 175B; :mod:`minipar.cost.validation.experiment3`) are the calibration rows it is
checked on."""


def split_gemm_extra(gpu, M: int, N: int, K: int, pieces: int, reserved: int = 0, fp8=False):
    """Seconds a (M, N, K) GEMM gains when run as ``pieces`` GEMMs of ⌈M/pieces⌉ rows on the
    GPU's SMs less ``reserved``: each piece by the roofline (Williams et al. 2009: the larger of
    its FLOPs at the GPU's GEMM rate, :func:`~minipar.cost.kernels.compute.gpu_gemm_seconds`'s
    peak · η (· ρ for FP8), and its bytes at the HBM rate) plus the GPU's per-call
    ``gemm_latency_s``, times SMs/(SMs − reserved); less the whole GEMM by the same roofline.
    The roofline, not the additive rule, because a compute-bound piece's weight reads overlap its
    math: what splitting costs is the extra launches and any piece that turns memory-bound."""
    if fp8:
        rate = (
            fp8_peak(gpu)
            * FP8_GEMM_EFFICIENCY
            * (FP8_ROWWISE_GEMM_RATIO if fp8 == "rowwise" else 1)
        )
    else:
        rate = gpu.peak_flops["bf16"]
    rate *= gpu.gemm_efficiency
    size = 1 if fp8 else 2

    def one(rows: int) -> float:
        moved = (rows * K + K * N + rows * N) * size / gpu.hbm_bandwidth
        return gpu.gemm_latency_s + max(2.0 * rows * N * K / rate, moved)

    split = pieces * one(-(-M // pieces)) * gpu.sms / (gpu.sms - reserved)
    return split - one(M)


def tp_overlap_cost(model, cluster, layout: Layout, options: Options) -> float:
    """Seconds per layer and micro-batch that TP communication overlap adds to the GEMMs it
    runs under (Wang et al. 2023's decomposition as Transformer Engine runs it), each by
    :func:`split_gemm_extra`: the forward's QKV and first MLP GEMMs and the backward's input
    gradients of the projection and the second MLP GEMM as t pieces
    (:data:`TP_OVERLAP_RING_SPLITS`); the forward's projection and second MLP GEMM as 4 pieces
    on the SMs their reduce-scatter leaves them (:data:`TP_OVERLAP_PIPELINE`); FP8 under
    ``options.fp8``; the forward's twice under full recomputation. 0 without overlap."""
    t = layout.tp
    if not (options.tp_overlap and layout.sp and t > 1):
        return 0.0
    gpu, fp8 = cluster.gpu, options.fp8 or False
    qkv, proj, fc1, fc2 = layer_dense_gemms(model, layout)
    forward = sum(split_gemm_extra(gpu, *g, t, fp8=fp8) for g in (qkv, fc1))
    for g, name in ((proj, "proj"), (fc2, "fc2")):
        forward += split_gemm_extra(gpu, *g, *TP_OVERLAP_PIPELINE[name], fp8=fp8)
    # the input gradients (M, K, N) of the projection and the second MLP GEMM
    backward = sum(split_gemm_extra(gpu, M, K, N, t, fp8=fp8) for M, N, K in (proj, fc2))
    return (2 if layout.recompute == "full" else 1) * forward + backward


def term_tp(model, cluster, layout: Layout, options: Options) -> LinkTerm:
    """TP collectives of one micro-batch on the critical path: :func:`tp_collectives` all-reduce
    equivalents of the (b, s/cp, h) 16-bit activation per layer (Shoeybi et al. 2019 §3;
    Korthikanti et al. 2022 §4.2.2): a ring inside a node, NCCL's multi-NIC algorithm
    (:func:`dp_allreduce_seconds` at stride 1) for a group spanning nodes. With
    ``options.tp_overlap`` and SP (both stacks overlap only the all-gathers and reduce-scatters of
    sequence parallelism), each layer's collectives are pipelined with its dense GEMMs
    (:func:`layer_gemm_seconds`, shared evenly among them: the same sum as pairing each
    collective with an equal share): :func:`tp_overlap_exposed` counts, and what the overlap
    costs the GEMMs, :func:`tp_overlap_cost`. Returns (seconds, link)."""
    t = layout.tp
    act_bytes = layout.micro_batch * (model.seq // layout.cp) * model.hidden * 2
    ar, name = dp_allreduce_seconds(act_bytes, t, 1, cluster)
    lp = stage_layers(model.layers, layout)[0]
    per_layer = tp_collectives(t, layout.sp, layout.recompute) * ar
    if options.tp_overlap and layout.sp and t > 1:
        per_layer = tp_overlap_exposed(
            per_layer, layer_gemm_seconds(model, cluster, layout, options), t
        )
        per_layer += tp_overlap_cost(model, cluster, layout, options)
    return LinkTerm(lp * per_layer, name)


def term_pp(model, cluster, layout: Layout, options: Options) -> LinkTerm:
    """Pipeline sends of one micro-batch: the (b, s/cp, h)/t activation forward and its gradient
    backward across each stage boundary, v times with v chunks (Narayanan et al. 2021 §4.1);
    stage neighbours are t·cp·d ranks apart. Returns (seconds, link)."""
    t, cp, d, p = layout.tp, layout.cp, layout.dp, layout.pp
    pp_link = cluster.intra if t * cp * d * p <= cluster.gpus_per_node else cluster.inter
    act_bytes = layout.micro_batch * (model.seq // cp) * model.hidden * 2
    seconds = 2 * layout.chunks * (pp_link.alpha + act_bytes / t / pp_link.bandwidth)
    return LinkTerm(seconds, pp_link.name) if p > 1 else LinkTerm(0.0, "-")


def term_cp(model, cluster, layout: Layout, options: Options, compute: ComputeTerm) -> float:
    """Context parallelism's K/V traffic of one micro-batch on the critical path.
    ``options.cp_algorithm`` "ring" (Liu et al. 2023; Megatron-Core): per layer (cp−1) K/V blocks
    forward (twice with full recomputation), (cp−1) K/V + cp fp32 dK/dV blocks backward
    (:func:`minipar.cost.chapters.context_parallel.ring_sent_bytes_per_layer`), each step a send to the
    next of the cp ranks (its own link, t apart), overlapped with one ``core`` block (``compute.core``), only the
    excess exposed. "all-gather" (Llama Team 2024 §3.3.2): all-gather the cp·K/V forward (again
    when fully recomputed), all-gather it and reduce-scatter the cp·dK/dV backward
    (:func:`minipar.cost.chapters.context_parallel.allgather_collectives_per_layer`), each half of
    :func:`dp_allreduce_seconds` over the cp ranks (NCCL's multi-NIC algorithm across nodes),
    not overlapped. What the ring's overlap costs: its split is priced where the attention is
    (one kernel per (s/cp)² block, :func:`term_compute`'s cp − 1 extra blocks); the SMs the
    ring's send and receive kernels take from the attention kernel are not, an ASSUMPTION
    checked on experiment 3's CP rows (Llama 3.1 8B, 70B and 405B at cp = 2, the calibration
    set), where the ring hides entirely under the blocks."""
    cp, t, lp = layout.cp, layout.tp, stage_layers(model.layers, layout)[0]
    if cp == 1:
        return 0.0
    core = compute.core
    b, s, kvw = layout.micro_batch, model.seq, kv_width_per_rank(model, t)
    refwd = 2 if layout.recompute == "full" else 1
    if options.cp_algorithm == "all-gather":
        colls = allgather_collectives_per_layer(b, s, kvw, cp)
        one = [dp_allreduce_seconds(S, cp, t, cluster)[0] / 2 for _, S in colls["forward"]]
        two = [dp_allreduce_seconds(S, cp, t, cluster)[0] / 2 for _, S in colls["backward"]]
        return lp * (refwd * sum(one) + sum(two))
    ring = ring_sent_bytes_per_layer(b, s, kvw, cp)
    cp_link = cluster.intra if t * cp <= cluster.gpus_per_node else cluster.inter
    kv = ring["forward"] / (cp - 1)
    dkv = (ring["backward"] - ring["forward"]) / cp
    alpha, bw = cp_link.alpha, cp_link.bandwidth
    comm = (refwd * (cp - 1) + (cp - 1)) * (alpha + kv / bw) + cp * (alpha + dkv / bw)
    return lp * max(0.0, comm - cp * core)


class EpTerm(NamedTuple):
    value: float  # exposed seconds per micro-batch, on the critical path
    total: float  # every all-to-all of the micro-batch, exposed or not
    hidden: float  # of total, what runs under compute (options.ep_overlap)


def term_ep(model, cluster, layout: Layout, options: Options, compute: ComputeTerm) -> EpTerm:
    """MoE all-to-alls of one micro-batch on the critical path: dispatch + combine forward and
    backward (six with full recomputation) of the K·b·s/cp routed 16-bit (·, h) rows per MoE
    layer (÷ t with SP) over the ep ranks, consecutive in the rank order under folding (Lepikhin
    et al. 2021; :func:`ep_all_to_all_seconds`, node-limited when the shape's ``node_limit``
    is set), the busiest rank's load (:func:`~minipar.cost.planner.moe_terms.moe_load`) times
    the mean. With ``options.ep_overlap`` and at least two micro-batches, one micro-batch's
    all-to-alls run under another's compute (``compute.value``), so only what exceeds it is
    exposed; the overlap's price is :func:`~minipar.cost.planner.moe_terms.term_ep_overlap`."""
    ep, t = layout.ep, layout.tp
    if ep == 1:
        return EpTerm(0.0, 0.0, 0.0)
    rows = (
        model.top_k
        * layout.micro_batch
        * (model.seq // layout.cp)
        * model.hidden
        * 2
        / (t if layout.sp else 1)
    )
    rows *= moe_load(model, layout, options)
    n_a2a = 6 if layout.recompute == "full" else 4
    one = ep_all_to_all_seconds(rows, ep, cluster, model.node_limit, model.top_k)
    total = moe_layers(model, layout) * n_a2a * one
    hidden = min(total, compute.value) if options.ep_overlap and layout.microbatches > 1 else 0.0
    return EpTerm(total - hidden, total, hidden)


def ep_all_to_all_seconds(
    nbytes: float, ep: int, cluster, node_limit: int = 0, top_k: int = 1
) -> float:
    """One all-to-all of ``nbytes`` per rank over ep consecutive ranks: inside a node (an NVLink
    domain) the pairwise exchange on the intra link
    (:func:`minipar.cost.chapters.expert_parallel.all_to_all_time`); spanning nodes, a rank's
    min(ep, g) − 1 on-node peers over NVLink and its ep − min(ep, g) off-node peers over its own
    NIC at the same time (each GPU's rail; the off-node share (ep − min(ep, g))/ep of
    :func:`minipar.cost.chapters.expert_parallel.off_node_fraction`), the slower of the two:
    (n−1)α + (n−1)/ep·S/B on each. Node-limited routing (``node_limit`` M > 0, DeepSeek-V3's
    M = 4, DeepSeek-AI 2024 §2.1.2 and §3.2.2): each token crosses the network once per
    destination node, at most M of the N = ep/g nodes, and is forwarded to its experts over
    NVLink there (DeepEP's dispatch): the NIC carries min(K, M)/K of the off-node bytes, the
    NVLink (g − 1)/g of all of them."""
    g = cluster.gpus_per_node
    if ep <= g:
        return all_to_all_time(nbytes, ep, cluster.intra.alpha, cluster.intra.bandwidth)
    on = min(ep, g)
    near_share, far_share = (on - 1) / ep, (ep - on) / ep
    if node_limit:
        near_share, far_share = (g - 1) / g, far_share * min(top_k, node_limit) / top_k
    near = (on - 1) * cluster.intra.alpha + near_share * nbytes / cluster.intra.bandwidth
    far = (ep - on) * cluster.inter.alpha + far_share * nbytes / cluster.inter.bandwidth
    return max(near, far)


class Zero3Term(NamedTuple):
    value: float  # exposed per micro-batch, on the critical path
    per_layer: float  # all-gathers + reduce-scatter of one layer, one micro-batch
    link: str


def term_zero3_exposed(
    model, cluster, layout: Layout, options: Options, compute: ComputeTerm
) -> Zero3Term:
    """ZeRO-3 per layer and micro-batch: :func:`zero3_gathers` all-gathers of the 16-bit weights
    + one reduce-scatter of the gradients (:func:`zero3_collective_seconds`); prefetching hides
    each layer's collectives under the previous ``layer``'s compute, so max(0, comm − compute)
    per layer and the first layer's gather are exposed (Zhao et al. 2023 §3.4); all of it with
    ``zero3_overlap=False``."""
    if layout.zero != 3:
        return Zero3Term(0.0, 0.0, "-")
    t, dcp, lp = layout.tp, layout.dp * layout.cp, stage_layers(model.layers, layout)[0]
    layer = compute.layer  # prefetch hides the collectives under one layer
    sp_ = stage_params(model, layout)
    _, edp, stride = expert_grid(layout)
    groups = (
        [(sp_.layer / t, dcp, t)]
        if layout.ep == 1
        # dense, then the experts
        else [(sp_.dense_layer / t, dcp, t), (sp_.expert_layer / layout.ep, edp, stride)]
    )
    gather = scatter = 0.0
    name = "-"
    for i, (x, n, k) in enumerate(groups):
        g, link = zero3_collective_seconds(2 * x, n, k, cluster, options.zero3_collectives)
        gather += g
        scatter += zero3_collective_seconds(
            options.grad_reduce_bytes * x, n, k, cluster, options.zero3_collectives
        )[0]
        if i == 0:
            name = link
    # without resharding: gathered once per step, reduced once per step (÷ m per micro-batch)
    m, gathers = 1, zero3_gathers(layout.recompute, options.zero3_ac_inside_unit)
    if not reshards(layout, options):
        m, gathers = layout.microbatches, 1
    comm_layer = gathers * gather + scatter
    exposed = (
        lp * max(0.0, comm_layer - layer) + gather  # prefetch hides ≤ one layer
        if options.zero3_overlap
        else lp * comm_layer
    )
    return Zero3Term(exposed / m, comm_layer / m, name)


class DpTerm(NamedTuple):
    value: float  # exposed, per step
    total: float
    link: str
    reduce: float = 0.0  # its gradient reduction (reduce-scatter or all-reduce), per step
    gather: float = 0.0  # its 16-bit parameter all-gather (ZeRO 1-2), per step


def dp_reduce_seconds(psi: float, n: int, split: int, k: int, zero: int, cluster, options: Options):
    """(reduction, parameter all-gather, link) of ``psi`` parameters, each rank holding
    1/``split`` of them, over the n ranks of one group, k apart
    (:func:`dp_allreduce_seconds`): ZeRO 0 an all-reduce of the gradients in
    ``grad_reduce_bytes`` per element; ZeRO 1-2 a reduce-scatter of them and an all-gather of
    the 16-bit parameters, each half an all-reduce."""
    ar, name = dp_allreduce_seconds(options.grad_reduce_bytes * psi / split, n, k, cluster)
    if zero in (1, 2):  # RS(grads) + AG(16-bit params)
        return ar / 2, dp_allreduce_seconds(2 * psi / split, n, k, cluster)[0] / 2, name
    return ar, 0.0, name


def dp_windows(layout: Layout, options: Options, compute: ComputeTerm) -> tuple[float, float]:
    """(reduction window, gather window): the compute the DP collectives after the last
    micro-batch may hide under. The reduction: 2/3 of the last micro-batch's compute (its
    backward) when p = 1 and ``dp_overlap`` (Li et al. 2020), or at any p with
    ``overlap_grad_reduce`` (Megatron-Core's ``--overlap-grad-reduce``: the buckets reduce as
    the stage's last backward produces them), else none. The parameter all-gather: with
    ``overlap_param_gather`` the next step's first forward (1/3), else it shares the
    reduction's window."""
    overlap = (layout.pp == 1 and options.dp_overlap) or options.overlap_grad_reduce
    window = (2 / 3) * compute.value if overlap else 0.0
    return window, compute.value / 3 if options.overlap_param_gather else 0.0


def dp_exposed_seconds(rs: float, ag: float, window: float, gather_window: float, options) -> float:
    """What a reduction of ``rs`` seconds and a gather of ``ag`` leave exposed under their
    windows (:func:`dp_windows`)."""
    if options.overlap_param_gather:
        return max(0.0, rs - window) + max(0.0, ag - gather_window)
    return max(0.0, rs + ag - window)


def term_dp_exposed(
    model, cluster, layout: Layout, options: Options, compute: ComputeTerm, zero3_exposed: Zero3Term
) -> DpTerm:
    """The data-parallel gradient reduction after the last micro-batch, over the d·cp ranks that
    hold each weight (t apart): the stage's weights, or with ep > 1 the dense ones only (the
    experts' reduction over their own group is :func:`term_edp_exposed`, after this one).
    :func:`dp_reduce_seconds` prices it; exposed: what its windows (:func:`dp_windows`) do not
    hide (:func:`dp_exposed_seconds`). ZeRO-3's collectives are per layer
    (:func:`term_zero3_exposed`): here only their total, none exposed."""
    t, zero, dcp = layout.tp, layout.zero, layout.dp * layout.cp
    if zero == 3:
        lp = stage_layers(model.layers, layout)[0]
        return DpTerm(0.0, layout.microbatches * lp * zero3_exposed.per_layer, zero3_exposed.link)
    sp_ = stage_params(model, layout)
    rs, ag, name = dp_reduce_seconds(
        sp_.stage if layout.ep == 1 else sp_.dense, dcp, t, t, zero, cluster, options
    )
    exposed = dp_exposed_seconds(rs, ag, *dp_windows(layout, options, compute), options)
    return DpTerm(exposed, rs + ag, name, rs, ag)


def term_edp_exposed(
    model, cluster, layout: Layout, options: Options, compute: ComputeTerm, dp_exposed: DpTerm
) -> DpTerm:
    """The experts' gradient reduction over the expert-data-parallel group, after the dense one
    (:func:`term_dp_exposed`), with ep > 1 and ZeRO 0-2: each routed expert's weights (E/ep
    local experts, ETP = 1) are held by the EDP = t·cp·d/ep ranks of a stage that share its EP
    index, ep apart (:func:`expert_grid`; Megatron-Core's ``parallel_state``
    ``initialize_model_parallel``: expert_data_parallel_size = the t·cp·p·d ranks ÷
    (expert_tensor_parallel_size · expert_model_parallel_size · pipeline_model_parallel_size),
    its ranks generated with ep inside dp; Liu et al. 2025, "MoE Parallel Folding", §3), priced
    by :func:`dp_reduce_seconds`. Exposed: what the windows of :func:`dp_windows` left after the
    dense reduction (and gather) do not hide. None with ep = 1 (the experts are replicated
    as the dense MLP, over d·cp, and reduced with it) or ZeRO-3 (per layer, in
    :func:`term_zero3_exposed`)."""
    if layout.ep == 1 or layout.zero == 3:
        return DpTerm(0.0, 0.0, "-")
    etp, edp, stride = expert_grid(layout)
    rs, ag, name = dp_reduce_seconds(
        stage_params(model, layout).expert, edp, etp, stride, layout.zero, cluster, options
    )
    window, gather_window = dp_windows(layout, options, compute)
    dense = dp_exposed
    if options.overlap_param_gather:  # each window less what the dense collective took of it
        window, gather_window = (
            max(0.0, window - dense.reduce),
            max(0.0, gather_window - dense.gather),
        )
    else:
        window = max(0.0, window - dense.reduce - dense.gather)
    return DpTerm(dp_exposed_seconds(rs, ag, window, gather_window, options), rs + ag, name, rs, ag)


def term_embedding(model, cluster, layout: Layout, options: Options) -> float:
    """All-reduce of the tied embedding's V·h gradient between the first and the last stage
    (p > 1; Narayanan et al. 2021 §3, Megatron-LM's ``_allreduce_embedding_grads``); none for
    an untied output layer."""
    t, cp, d, p = layout.tp, layout.cp, layout.dp, layout.pp
    if p == 1 or not model.tied:
        return 0.0
    link = cluster.inter if t * cp * d * p > cluster.gpus_per_node else cluster.intra
    return _ring_seconds(
        "all-reduce", 2, options.grad_reduce_bytes * model.vocab * model.hidden / t, link
    )
