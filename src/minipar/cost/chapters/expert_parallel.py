"""Expert-parallel cost: all-to-all bytes from routed counts, α-β time, imbalance, parameters.

Pure Python. Symbols as on the notation page: E experts per MoE layer, K experts per token
(top-K), x the expert-parallel degree (``ep`` in code), n tokens per rank, h hidden, f expert
FFN width, C an expert's capacity, c_f the capacity factor. Sizes are BYTES unless a name says
rows (tokens) or elements.

* **All-to-all sizes** (GShard, Lepikhin et al. 2021, §3.2; nccl-tests' convention S = the
  per-rank send buffer): ``rows[s][d]`` assignments rank s sends to rank d (its kept tokens,
  counted once per chosen expert on d). Per MoE layer and step a rank runs, in order,
  [an all-gather of its (K, E) slot counts when a capacity is set], an all-to-all of its E
  counts, dispatch (S = Σ_d rows[s][d]·h·bytes), combine (S = Σ_d rows[d][s]·h·bytes, the rows
  it received), then in backward the combine's and dispatch's all-to-alls again with the splits
  swapped (:func:`layer_events`). Bytes that leave the rank exclude rows[s][s].
* **Even routing**: every rank sends K·n rows, (x−1)/x of them to other ranks.
* **Time**: pairwise-exchange all-to-all (x−1)α + (x−1)/x·Sβ of
  :func:`minipar.cost.network.collectives.collective_time`, with α and the bandwidth fitted in the
  collectives chapter. Uneven rows: the slowest rank sets the time (its larger S).
* **Dispatchers** (Megatron-Core's token dispatchers; DeepSeek-V3 §3.2.2 and DeepEP): the
  all-gather dispatcher's sizes depend only on the token counts (:func:`all_gather_events`);
  the node-deduplicated one sends a token once per destination node over the rail and fans it
  out inside the node (:func:`node_dedup_rows`, :func:`node_dedup_events`,
  :func:`inter_node_rows`, :func:`expected_nodes_per_token`).
* **MoE parallel folding** (Liu et al. 2025; Megatron-Core): the expert layers re-slice the
  ranks of a pipeline stage as ETP × EP × EDP independently of the attention's TP × CP × DP
  (:func:`folded_expert_dp`, :func:`folded_moe_traffic`, :func:`off_node_fraction`).
* **Parameters** (Fedus et al. 2022, §2; Jiang et al. 2024, Table 1): an expert is an MLP of
  ``matrices`` h×f weights (2 for GELU, 3 for SwiGLU); E of them are stored, K are used per
  token: memory ∝ total, FLOPs ∝ active (2 FLOPs per multiply-add, forward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..model import check_counts as _check
from ..network.collectives import collective_time

COUNT_BYTES = 8  # counts travel as int64


def check_shapes(experts: int, top_k: int, ep: int) -> None:
    """The rules a layout must obey, each error naming the rule and the value."""
    _check(experts=experts, top_k=top_k, ep=ep)
    if top_k > experts:
        raise ValueError(f"top_k ({top_k}) must be <= experts ({experts})")
    if experts % ep:
        raise ValueError(f"experts ({experts}) must be divisible by ep ({ep})")


@dataclass(frozen=True)
class MoELayer:
    """One MoE layer on an expert-parallel group, the arguments its traffic and parameter models
    share, checked once (:func:`check_shapes`): n = ``tokens`` per rank at the layer, h =
    ``hidden``, f = ``ffn`` (an expert's width), E = ``experts``, K = ``top_k``, x = ``ep`` ranks,
    ``matrices`` h×f weights per expert (2 for GELU, 3 for SwiGLU), ``bytes_per_elem`` of the
    tokens and weights. The defaults: Mixtral 8×7B's layer (Jiang et al. 2024, Table 1) in bf16
    on 8 ranks. Models of routed counts read their rows, not ``tokens``."""

    tokens: int = 4096
    hidden: int = 4096
    ffn: int = 14336
    experts: int = 8
    top_k: int = 2
    ep: int = 8
    matrices: int = 3
    bytes_per_elem: float = 2

    def __post_init__(self) -> None:
        check_shapes(self.experts, self.top_k, self.ep)
        _check(tokens=self.tokens, hidden=self.hidden, ffn=self.ffn, matrices=self.matrices)

    def check_ranks(self, ranks: int) -> None:
        """The routed rows (or choices) come from ``ranks`` ranks: they must be the layer's x."""
        if ranks != self.ep:
            raise ValueError(f"routed ranks ({ranks}) must equal ep ({self.ep})")


MIXTRAL_LAYER = MoELayer()


def capacity(tokens: int, experts: int, top_k: int, capacity_factor: float | None) -> int | None:
    """C = ⌈c_f·K·n/E⌉ (GShard §2.2, Switch §2.2); None without a capacity factor."""
    if capacity_factor is None:
        return None
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor ({capacity_factor}) must be > 0")
    return math.ceil(capacity_factor * top_k * tokens / experts)


def layer_events(
    rows: list[list[int]],
    rank: int,
    hidden: int,
    experts: int,
    top_k: int,
    bytes_per_elem: float = 4,
    capacity_limited: bool = False,
) -> list[tuple[str, float]]:
    """(op, S bytes) of one MoE layer's forward + backward on ``rank``, in call order."""
    ep = len(rows)
    if ep == 1:
        return []
    sent = sum(rows[rank]) * hidden * bytes_per_elem
    received = sum(r[rank] for r in rows) * hidden * bytes_per_elem
    ev = [("all_gather", ep * top_k * experts * COUNT_BYTES)] if capacity_limited else []
    # the counts; dispatch, combine; backward: combine's adjoint, dispatch's
    return ev + [("all_to_all", x) for x in (experts * COUNT_BYTES, sent, received, sent, received)]


def off_rank_bytes(
    rows: list[list[int]], rank: int, hidden: int, bytes_per_elem: float = 4
) -> float:
    """Bytes of one dispatch that leave ``rank`` (rows to itself stay in memory)."""
    return sum(r for d, r in enumerate(rows[rank]) if d != rank) * hidden * bytes_per_elem


def even_dispatch_bytes(
    tokens: int, top_k: int, hidden: int, ep: int, bytes_per_elem: float = 4
) -> tuple[float, float]:
    """(S, off-rank bytes) of one dispatch with perfectly even routing: K·n·h·bytes and
    (x−1)/x of it."""
    _check(tokens=tokens, top_k=top_k, hidden=hidden, ep=ep)
    S = top_k * tokens * hidden * bytes_per_elem
    return S, S * (ep - 1) / ep


def all_to_all_time(nbytes: float, ep: int, alpha: float, bandwidth: float) -> float:
    """Pairwise-exchange all-to-all, (x−1)α + (x−1)/x·Sβ (Thakur et al. 2005)."""
    return collective_time("all-to-all", "pairwise-exchange", ep, nbytes, alpha, bandwidth)


def layer_comm_time(
    rows: list[list[int]], hidden: int, alpha: float, bandwidth: float, bytes_per_elem: float = 4
) -> float:
    """The four token all-to-alls of a layer (forward + backward): each waits for the rank with
    the largest send or receive buffer."""
    ep = len(rows)
    worst = max(max(sum(rows[s]), sum(r[s] for r in rows)) for s in range(ep))
    return 4 * all_to_all_time(worst * hidden * bytes_per_elem, ep, alpha, bandwidth)


def all_to_all_vs_all_reduce(
    nbytes: float, ranks: int, alpha: float, bandwidth: float
) -> dict[str, float]:
    """One all-to-all and one ring all-reduce of the same S: the all-to-all moves (n−1)/n·S per
    rank, the all-reduce 2(n−1)/n·S (its reduce-scatter and its all-gather)."""
    return {
        "all-to-all": all_to_all_time(nbytes, ranks, alpha, bandwidth),
        "all-reduce": collective_time("all-reduce", "ring", ranks, nbytes, alpha, bandwidth),
    }


def tokens_vs_weights_bytes(layer: MoELayer, micro_batches: int = 1) -> dict:
    """Per rank and layer, bytes that leave the rank: EP's four all-to-alls of K·n rows ((x−1)/x
    off rank), which run for **every micro-batch** of n tokens, against the ring all-reduce of
    the E experts' gradients on x ranks (2(x−1)/x·S) that data parallelism over replicated
    experts would run **once per step**. Both per step: the token bytes scale with the
    ``micro_batches`` of a step, the gradient bytes do not. "Move tokens, not weights."""
    _check(micro_batches=micro_batches)
    L, ep = layer, layer.ep
    _, off = even_dispatch_bytes(L.tokens, L.top_k, L.hidden, ep, L.bytes_per_elem)
    grads = L.experts * L.matrices * L.hidden * L.ffn * L.bytes_per_elem
    return {
        "ep tokens per micro-batch": 4 * off,
        "ep tokens": 4 * off * micro_batches,
        "dp expert grads": 2 * (ep - 1) / ep * grads,
    }


def imbalance(tokens_per_expert: list[int], ep: int) -> dict[str, float]:
    """Rows per rank (experts r·E/x … grouped), and the most loaded rank over the mean: the
    factor by which the expert compute of a step is longer than with even routing."""
    E = len(tokens_per_expert)
    if E % ep:
        raise ValueError(f"experts ({E}) must be divisible by ep ({ep})")
    per = E // ep
    ranks = [sum(tokens_per_expert[r * per : (r + 1) * per]) for r in range(ep)]
    mean, total = sum(ranks) / ep, sum(tokens_per_expert)
    return {
        "per rank": ranks,
        "max/mean rank": max(ranks) / mean if mean else 1.0,
        "max/mean expert": max(tokens_per_expert) / (total / E) if total else 1.0,
    }


def expert_params_per_rank(experts: int, hidden: int, ffn: int, ep: int, matrices: int = 2) -> int:
    """E/x experts of ``matrices``·h·f weights each: ∝ 1/x."""
    check_shapes(experts, 1, ep)
    return experts // ep * matrices * hidden * ffn


def moe_params(
    hidden: int,
    ffn: int,
    experts: int,
    top_k: int,
    layers: int = 1,
    matrices: int = 2,
    dense_per_layer: int = 0,
    shared: int = 0,
) -> dict[str, int]:
    """Total and active (per token) parameters of ``layers`` MoE layers: experts, router (h·E),
    ``dense_per_layer`` (attention, norms) and ``shared`` always-on experts."""
    check_shapes(experts, top_k, 1)
    one = matrices * hidden * ffn
    total = layers * ((experts + shared) * one + hidden * experts + dense_per_layer)
    active = layers * ((top_k + shared) * one + hidden * experts + dense_per_layer)
    return {"total": total, "active": active, "forward flops per token": 2 * active}


def mixtral_8x7b() -> dict[str, int]:
    """Mixtral 8×7B from its shapes (Jiang et al. 2024, Table 1): h 4096, f 14336, 32 layers,
    E 8, K 2, SwiGLU (3 matrices), 32 query / 8 key-value heads of 128, vocabulary 32000,
    untied embeddings. Gives 46.7e9 total and 12.9e9 active (the paper: 47B and 13B)."""
    h, f, L, V = 4096, 14336, 32, 32000
    attn = 2 * h * h + 2 * h * (8 * 128) + 2 * h  # q, o; k, v; two RMSNorm weights
    p = moe_params(h, f, 8, 2, L, matrices=3, dense_per_layer=attn)
    extra = 2 * V * h + h  # embeddings, head, final norm
    return {k: v + extra for k, v in p.items() if k != "forward flops per token"}


def skewed_loads(
    tokens: int,
    experts: int,
    top_k: int,
    ep: int,
    hot: float = 0.0,
    capacity_factor: float | None = None,
) -> dict:
    """Assignments per expert and per rank when a share ``hot`` of the EP group's A = x·n·K
    assignments goes to expert 0 and the rest spread evenly over all E experts (a router that
    over-uses one expert; ``hot`` = 0 is perfect balance). With a capacity factor each expert
    processes min(load, C), C = ⌈c_f·K·x·n/E⌉, and the rest is dropped. ``tokens`` is n, per rank.
    """
    check_shapes(experts, top_k, ep)
    _check(tokens=tokens)
    if not 0.0 <= hot <= 1.0:
        raise ValueError(f"hot share ({hot}) must be between 0 and 1")
    A = ep * tokens * top_k
    routed = [(1 - hot) * A / experts + (hot * A if e == 0 else 0.0) for e in range(experts)]
    C = capacity(ep * tokens, experts, top_k, capacity_factor)
    done = routed if C is None else [min(r, C) for r in routed]
    per = experts // ep
    ranks = [sum(done[r * per : (r + 1) * per]) for r in range(ep)]
    return {
        "routed": routed,
        "processed": done,
        "per rank": ranks,
        "capacity": C,
        "max rank": max(ranks),
        "mean rank": sum(ranks) / ep,
        "dropped fraction": 1 - sum(done) / A,
    }


def ep_layer_model(
    layer: MoELayer = MIXTRAL_LAYER,
    *,
    capacity_factor: float | None = None,
    hot: float = 0.0,
    alpha: float = 2e-6,
    bandwidth: float = 450e9,
    gpus_per_node: int = 8,
) -> dict:
    """One MoE ``layer`` on its x ranks with n tokens per rank (the explorer's model):
    rows the most loaded rank processes and its ratio to the mean, the dispatch buffer S of
    even routing and the bytes leaving a rank, the four all-to-alls' time (set by the largest
    buffer, that of the most loaded rank), expert bytes per rank, total and active parameters
    of the layer, and the dispatch bytes that leave a node of ``gpus_per_node``
    (:func:`off_node_fraction`: set by x, not by E). Defaults: Mixtral 8×7B's layer (bf16),
    NVLink 4, 8 GPUs per node."""
    L, ep, e = layer, layer.ep, layer.bytes_per_elem
    load = skewed_loads(L.tokens, L.experts, L.top_k, ep, hot, capacity_factor)
    S, off = even_dispatch_bytes(L.tokens, L.top_k, L.hidden, ep, e)
    worst = max(load["max rank"], L.top_k * L.tokens) * L.hidden * e
    p = moe_params(L.hidden, L.ffn, L.experts, L.top_k, 1, L.matrices)
    return {
        "max rank rows": load["max rank"],
        "imbalance": load["max rank"] / load["mean rank"] if load["mean rank"] else 1.0,
        "capacity": load["capacity"],
        "dropped fraction": load["dropped fraction"],
        "dispatch bytes": S,
        "off rank bytes": off,
        "off node bytes": S * off_node_fraction(ep, gpus_per_node),
        "layer a2a seconds": 4 * all_to_all_time(worst, ep, alpha, bandwidth),
        "expert bytes per rank": expert_params_per_rank(L.experts, L.hidden, L.ffn, ep, L.matrices)
        * e,
        "total params": p["total"],
        "active params": p["active"],
    }


# ------------------------------------------------------------------ dispatchers (from routing)
def _owner(expert: int, experts: int, ep: int) -> int:
    return expert // (experts // ep)


def dispatch_rows(choices: list[list[list[int]]], experts: int) -> list[list[int]]:
    """rows[s][d] of the all-to-all dispatcher from every rank's kept choices:
    ``choices[s][i]`` the experts token i of rank s is sent to (dropped choices left out)."""
    ep = len(choices)
    rows = [[0] * ep for _ in range(ep)]
    for s, toks in enumerate(choices):
        for es in toks:
            for e in es:
                rows[s][_owner(e, experts, ep)] += 1
    return rows


def all_gather_events(
    tokens: list[int],
    rank: int,
    hidden: int,
    top_k: int,
    bytes_per_elem: float = 4,
    index_bytes: int = COUNT_BYTES,
    capacity_limited: bool = False,
    experts: int = 0,
) -> list[tuple[str, float]]:
    """(op, S bytes) of the all-gather dispatcher's forward + backward on one rank (Megatron-Core
    ``MoEAllGatherTokenDispatcher``): the ranks' token counts (x int64), then tokens, choices
    (int64) and gates, each padded to m = max n and all-gathered (S = x·m·width), and a
    reduce-scatter of the (x·m, h) partial outputs. Backward: the reduce-scatter's adjoint (an
    all-gather) and the adjoints of the tokens' and gates' all-gathers (reduce-scatters).
    Independent of the routing: every rank receives every token. ``tokens`` [n_0, ...]."""
    ep, m = len(tokens), max(tokens)
    if ep == 1:
        return []
    ev = [("all_gather", ep * top_k * experts * COUNT_BYTES)] if capacity_limited else []
    full, route = ep * m * hidden * bytes_per_elem, ep * m * top_k
    ev += [
        ("all_gather", ep * COUNT_BYTES),
        ("all_gather", full),
        ("all_gather", route * index_bytes),
        ("all_gather", route * bytes_per_elem),
        ("reduce_scatter", full),
        ("all_gather", full),
        ("reduce_scatter", route * bytes_per_elem),
        ("reduce_scatter", full),
    ]
    return ev


def node_dedup_rows(choices: list[list[list[int]]], experts: int, node_size: int) -> dict:
    """Rows of the node-deduplicated dispatcher (DeepSeek-AI 2024, "DeepSeek-V3", §3.2.2):
    ranks s = v·g + l (node v, local index l, g = ``node_size``).
    ``rail[s][v]``: tokens of rank s with at least one kept choice on node v (sent once, over the
    rail, to rank v·g + l); ``node[f][d]``: choices rank f forwards to rank d of its own node
    (index d in the node), from every token it received over the rail."""
    ep = len(choices)
    if ep % node_size:
        raise ValueError(f"ep ({ep}) must be divisible by node_size ({node_size})")
    nodes, per_node = ep // node_size, experts // (ep // node_size)
    rail = [[0] * nodes for _ in range(ep)]
    node = [[0] * node_size for _ in range(ep)]
    for s, toks in enumerate(choices):
        for es in toks:
            for v in sorted({e // per_node for e in es}):
                rail[s][v] += 1
                f = v * node_size + s % node_size  # the forwarding rank
                for e in es:
                    if e // per_node == v:
                        node[f][_owner(e, experts, ep) % node_size] += 1
    return {"rail": rail, "node": node}


def node_dedup_events(
    choices: list[list[list[int]]],
    rank: int,
    layer: MoELayer,
    node_size: int,
    *,
    index_bytes: int = COUNT_BYTES,
    capacity_limited: bool = False,
) -> list[tuple[str, float]]:
    """(op, S bytes) of the node-deduplicated dispatcher on ``rank`` of ``layer``'s x ranks
    (``choices`` from each), forward + backward: over
    the rail (one rank per node) the counts (nodes int64), the S1 token rows (h), their K gates
    and K expert indices; inside the node the counts (E/nodes int64), the S2 choice rows there
    and the R2 rows back; over the rail the R1 (token, node) sums back. Backward: the adjoints
    of the five differentiable all-to-alls (S1·h, S2·h, R2·h, R1·K, R1·h). Groups of one rank
    send nothing."""
    layer.check_ranks(len(choices))
    ep, experts, top_k = layer.ep, layer.experts, layer.top_k
    if ep == 1:
        return []
    g, nodes = node_size, ep // node_size
    t = node_dedup_rows(choices, experts, node_size)
    v, l = divmod(rank, g)
    S1 = sum(t["rail"][rank])
    R1 = sum(t["rail"][u * g + l][v] for u in range(nodes))
    S2 = sum(t["node"][rank])
    R2 = sum(t["node"][v * g + j][l] for j in range(g))
    h, b = layer.hidden, layer.bytes_per_elem
    ev = [("all_gather", ep * top_k * experts * COUNT_BYTES)] if capacity_limited else []
    rail, local = nodes > 1, g > 1  # a list times False is empty: a group of one sends nothing
    a2a = [nodes * COUNT_BYTES, S1 * h * b, S1 * top_k * b, S1 * top_k * index_bytes] * rail
    a2a += [experts // nodes * COUNT_BYTES, S2 * h * b, R2 * h * b] * local
    a2a += [R1 * h * b, S1 * h * b] * rail + [S2 * h * b, R2 * h * b] * local  # backward
    a2a += [R1 * top_k * b, R1 * h * b] * rail
    return ev + [("all_to_all", x) for x in a2a]


def inter_node_rows(
    choices: list[list[list[int]]], experts: int, node_size: int, dispatcher: str = "all_to_all"
) -> int:
    """Rows of one dispatch that leave their source's node, summed over ranks: one per (token,
    kept choice on another node) for ``all_to_all``, one per (token, other node) for
    ``node_dedup``. The combine sends the same number back."""
    ep = len(choices)
    nodes = ep // node_size
    per_node = experts // nodes
    total = 0
    for s, toks in enumerate(choices):
        home = s // node_size
        for es in toks:
            where = [e // per_node for e in es]
            if dispatcher == "all_to_all":
                total += sum(v != home for v in where)
            elif dispatcher == "node_dedup":
                total += len(set(where) - {home})
            else:
                raise ValueError(f"dispatcher ({dispatcher!r}) must be all_to_all or node_dedup")
    return total


def expected_nodes_per_token(
    experts: int, top_k: int, nodes: int, max_nodes: int | None = None
) -> float:
    """Expected number of distinct nodes holding a token's K experts when the K are a uniformly
    random K-subset of E spread evenly over ``nodes``: nodes·(1 − C(E − E/nodes, K)/C(E, K))
    (inclusion of each node, linearity of expectation). Node-limited routing caps it at
    ``max_nodes`` (DeepSeek-V3 §2.1.2: M = 4). The all-to-all dispatcher sends K rows per token."""
    _check(experts=experts, top_k=top_k, nodes=nodes)
    if experts % nodes:
        raise ValueError(f"experts ({experts}) must be divisible by nodes ({nodes})")
    miss = math.comb(experts - experts // nodes, top_k) / math.comb(experts, top_k)
    d = nodes * (1 - miss)
    return d if max_nodes is None else min(d, max_nodes)


# ------------------------------------------------------------------ MoE parallel folding
def off_node_fraction(ep: int, gpus_per_node: int) -> float:
    """Share of an even dispatch's rows that leave the node: the EP group's ranks are
    consecutive, so a rank has min(x, g) EP peers (itself included) on its node; rows go to the
    x ranks evenly: (x − min(x, g))/x. It depends on the EP degree x, not on the number of
    experts: DeepSeek-V2's 160 routed experts over 8-way EP (DeepSeek-AI 2024, "DeepSeek-V2",
    the infrastructure paragraph of its training section) stay inside an 8-GPU node."""
    _check(ep=ep, gpus_per_node=gpus_per_node)
    if ep > gpus_per_node and ep % gpus_per_node:
        raise ValueError(
            f"ep ({ep}) larger than a node must be a multiple of gpus_per_node ({gpus_per_node})"
        )
    return (ep - min(ep, gpus_per_node)) / ep


def folded_expert_dp(t: int, cp: int, d: int, ep: int, etp: int = 1) -> int:
    """Expert data-parallel degree of MoE parallel folding (Liu et al. 2025, §3; Megatron-Core):
    the attention uses t·cp·d ranks per pipeline stage, the experts the same ranks as
    ETP × EP × EDP, so EDP = t·cp·d/(etp·ep). EP need not divide d (it may reuse TP and CP
    ranks); it must divide t·cp·d/etp."""
    _check(t=t, cp=cp, d=d, ep=ep, etp=etp)
    stage = t * cp * d
    if stage % (etp * ep):
        raise ValueError(
            f"etp·ep ({etp}·{ep} = {etp * ep}) must divide the ranks of a "
            f"stage, t·cp·d = {stage} (MoE parallel folding)"
        )
    return stage // (etp * ep)


def folded_moe_traffic(
    layer: MoELayer,
    *,
    t: int,
    cp: int,
    d: int,
    etp: int = 1,
    gpus_per_node: int = 8,
    micro_batches: int = 1,
    grad_bytes_per_elem: float = 4,
) -> dict:
    """One MoE ``layer`` under MoE parallel folding, per rank and per step: its ``tokens`` = tokens
    a rank holds at the MoE layer (after sequence/context parallelism: b·s/(t·cp) per
    micro-batch), its ``ep`` = x. Terms, each a separate entry:

    * ``ep a2a bytes``: the four even all-to-alls of K·n rows, (x−1)/x of them off rank, for each
      of ``micro_batches`` micro-batches (as :func:`tokens_vs_weights_bytes`), and the share of
      them that leaves the node (:func:`off_node_fraction`);
    * ``expert grad bytes``: S of the all-reduce of this rank's E/x experts (÷ etp) over the EDP
      group of :func:`folded_expert_dp`, once per step (ring: 2(EDP−1)/EDP·S per rank);
    * ``edp``: that group's size; ``dense grad group``: t·cp·d/t = cp·d, the group of the dense
      weights (attention, router), independent of ep.
    Megatron-Core's folding; torchtitan builds an equivalent separate expert mesh."""
    L, ep = layer, layer.ep
    edp = folded_expert_dp(t, cp, d, ep, etp)
    S, off = even_dispatch_bytes(L.tokens, L.top_k, L.hidden, ep, L.bytes_per_elem)
    grads = L.experts // ep * L.matrices * L.hidden * L.ffn // etp * grad_bytes_per_elem
    return {
        "ep a2a bytes": 4 * off * micro_batches,
        "ep a2a off-node bytes": 4 * micro_batches * S * off_node_fraction(ep, gpus_per_node),
        "expert grad bytes": grads,
        "expert grad ring bytes": 2 * (edp - 1) / edp * grads,
        "edp": edp,
        "dense grad group": cp * d,
    }


def folded_block_events(
    rows: list[list[int]],
    ep_rank: int,
    layer: MoELayer,
    dense_ffn: int,
    t: int,
    dp_cp: int,
    edp: int,
    world: int,
) -> list[tuple[str, float]]:
    """(op, S bytes) of one training step of :mod:`minipar.expert_parallel.folding`'s block on
    one rank, in call order:

    1. the sequence-parallel dense MLP over t ranks: all-gather, then reduce-scatter, of the
       t·n tokens (S = t·n·h·bytes each; Korthikanti et al. 2022, §4.2.2);
    2. the MoE layer over the ep ranks: :func:`layer_events` from the routed ``rows`` (its
       backward included);
    3. the dense part's backward: the reduce-scatter's adjoint (all-gather), the all-gather's
       (reduce-scatter);
    4. gradient all-reduces: the two dense shards (h·f_d/t each) over the dp·cp ranks that
       hold the same shard, the router (h·E) over all ``world`` ranks, the ``matrices`` weights
       of the E/ep local experts (E/ep·h·f each) over EDP.

    A group of one rank sends nothing. The layer's ``tokens`` = n, this rank's slice of the
    sequence; the block's input needs a gradient (an earlier layer's output), so the all-gather
    has an adjoint."""
    layer.check_ranks(len(rows))
    L, b = layer, layer.bytes_per_elem
    seq = t * L.tokens * L.hidden * b
    dense = [("all_gather", seq), ("reduce_scatter", seq)] if t > 1 else []
    moe = layer_events(rows, ep_rank, L.hidden, L.experts, L.top_k, b)
    ev = dense + moe + ([("all_gather", seq), ("reduce_scatter", seq)] if t > 1 else [])
    if dp_cp > 1:
        ev += [("all_reduce", L.hidden * dense_ffn // t * b)] * 2
    if world > 1:
        ev += [("all_reduce", L.hidden * L.experts * b)]
    if edp > 1:
        ev += [("all_reduce", L.experts // L.ep * L.hidden * L.ffn * b)] * L.matrices
    return ev
