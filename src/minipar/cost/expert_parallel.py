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
  :func:`minipar.cost.collectives.collective_time`, with α and the bandwidth fitted in the
  collectives chapter. Uneven rows: the slowest rank sets the time (its larger S).
* **Parameters** (Fedus et al. 2022, §2; Jiang et al. 2024, Table 1): an expert is an MLP of
  ``matrices`` h×f weights (2 for GELU, 3 for SwiGLU); E of them are stored, K are used per
  token: memory ∝ total, FLOPs ∝ active (2 FLOPs per multiply-add, forward).
"""
from __future__ import annotations

import math

from .collectives import collective_time

COUNT_BYTES = 8   # counts travel as int64


def _check(**kw) -> None:
    for k, v in kw.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{k} ({v}) must be an integer >= 1")


def check_shapes(experts: int, top_k: int, ep: int) -> None:
    """The rules a layout must obey, each error naming the rule and the value."""
    _check(experts=experts, top_k=top_k, ep=ep)
    if top_k > experts:
        raise ValueError(f"top_k ({top_k}) must be <= experts ({experts})")
    if experts % ep:
        raise ValueError(f"experts ({experts}) must be divisible by ep ({ep})")


def capacity(tokens: int, experts: int, top_k: int, capacity_factor: float | None) -> int | None:
    """C = ⌈c_f·K·n/E⌉ (GShard §2.2, Switch §2.2); None without a capacity factor."""
    if capacity_factor is None:
        return None
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor ({capacity_factor}) must be > 0")
    return math.ceil(capacity_factor * top_k * tokens / experts)


def layer_events(rows: list[list[int]], rank: int, hidden: int, experts: int,
                 top_k: int, bytes_per_elem: float = 4,
                 capacity_limited: bool = False) -> list[tuple[str, float]]:
    """(op, S bytes) of one MoE layer's forward + backward on ``rank``, in call order."""
    ep = len(rows)
    if ep == 1:
        return []
    sent = sum(rows[rank]) * hidden * bytes_per_elem
    received = sum(r[rank] for r in rows) * hidden * bytes_per_elem
    ev = [("all_gather", ep * top_k * experts * COUNT_BYTES)] if capacity_limited else []
    ev += [("all_to_all", experts * COUNT_BYTES),       # counts
           ("all_to_all", sent), ("all_to_all", received),        # dispatch, combine
           ("all_to_all", sent), ("all_to_all", received)]        # backward: combine, dispatch
    return ev


def off_rank_bytes(rows: list[list[int]], rank: int, hidden: int,
                   bytes_per_elem: float = 4) -> float:
    """Bytes of one dispatch that leave ``rank`` (rows to itself stay in memory)."""
    return sum(r for d, r in enumerate(rows[rank]) if d != rank) * hidden * bytes_per_elem


def even_dispatch_bytes(tokens: int, top_k: int, hidden: int, ep: int,
                        bytes_per_elem: float = 4) -> tuple[float, float]:
    """(S, off-rank bytes) of one dispatch with perfectly even routing: K·n·h·bytes and
    (x−1)/x of it."""
    _check(tokens=tokens, top_k=top_k, hidden=hidden, ep=ep)
    S = top_k * tokens * hidden * bytes_per_elem
    return S, S * (ep - 1) / ep


def all_to_all_time(nbytes: float, ep: int, alpha: float, bandwidth: float) -> float:
    """Pairwise-exchange all-to-all, (x−1)α + (x−1)/x·Sβ (Thakur et al. 2005)."""
    return collective_time("all-to-all", "pairwise-exchange", ep, nbytes, alpha, bandwidth)


def layer_comm_time(rows: list[list[int]], hidden: int, alpha: float, bandwidth: float,
                    bytes_per_elem: float = 4) -> float:
    """The four token all-to-alls of a layer (forward + backward): each waits for the rank with
    the largest send or receive buffer."""
    ep = len(rows)
    worst = max(max(sum(rows[s]), sum(r[s] for r in rows)) for s in range(ep))
    return 4 * all_to_all_time(worst * hidden * bytes_per_elem, ep, alpha, bandwidth)


def all_to_all_vs_all_reduce(nbytes: float, ranks: int, alpha: float,
                             bandwidth: float) -> dict[str, float]:
    """One all-to-all and one ring all-reduce of the same S: the all-to-all moves (n−1)/n·S per
    rank, the all-reduce 2(n−1)/n·S (its reduce-scatter and its all-gather)."""
    return {"all-to-all": all_to_all_time(nbytes, ranks, alpha, bandwidth),
            "all-reduce": collective_time("all-reduce", "ring", ranks, nbytes, alpha, bandwidth)}


def tokens_vs_weights_bytes(tokens: int, top_k: int, hidden: int, ffn: int, experts: int,
                            ep: int, bytes_per_elem: float = 4, matrices: int = 2) -> dict:
    """Per rank, per layer, per step: bytes EP sends (four all-to-alls of K·n rows, (x−1)/x off
    rank) vs bytes data parallelism would send to all-reduce the E experts' gradients on x
    ranks (ring, 2(x−1)/x·S). "Move tokens, not weights."""
    check_shapes(experts, top_k, ep)
    _, off = even_dispatch_bytes(tokens, top_k, hidden, ep, bytes_per_elem)
    grads = experts * matrices * hidden * ffn * bytes_per_elem
    return {"ep tokens": 4 * off, "dp expert grads": 2 * (ep - 1) / ep * grads}


def imbalance(tokens_per_expert: list[int], ep: int) -> dict[str, float]:
    """Rows per rank (experts r·E/x … grouped), and the most loaded rank over the mean: the
    factor by which the expert compute of a step is longer than with even routing."""
    E = len(tokens_per_expert)
    if E % ep:
        raise ValueError(f"experts ({E}) must be divisible by ep ({ep})")
    per = E // ep
    ranks = [sum(tokens_per_expert[r * per:(r + 1) * per]) for r in range(ep)]
    mean = sum(ranks) / ep
    return {"per rank": ranks, "max/mean rank": max(ranks) / mean if mean else 1.0,
            "max/mean expert": max(tokens_per_expert) / (sum(tokens_per_expert) / E)
            if sum(tokens_per_expert) else 1.0}


def expert_params_per_rank(experts: int, hidden: int, ffn: int, ep: int,
                           matrices: int = 2) -> int:
    """E/x experts of ``matrices``·h·f weights each: ∝ 1/x."""
    check_shapes(experts, 1, ep)
    return experts // ep * matrices * hidden * ffn


def moe_params(hidden: int, ffn: int, experts: int, top_k: int, layers: int = 1,
               matrices: int = 2, dense_per_layer: int = 0, shared: int = 0) -> dict[str, int]:
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
    attn = 2 * h * h + 2 * h * (8 * 128) + 2 * h            # q, o; k, v; two RMSNorm weights
    p = moe_params(h, f, 8, 2, L, matrices=3, dense_per_layer=attn)
    extra = 2 * V * h + h                                    # embeddings, head, final norm
    return {k: v + extra for k, v in p.items() if k != "forward flops per token"}


def skewed_loads(tokens: int, experts: int, top_k: int, ep: int, hot: float = 0.0,
                 capacity_factor: float | None = None) -> dict:
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
    ranks = [sum(done[r * per:(r + 1) * per]) for r in range(ep)]
    return {"routed": routed, "processed": done, "per rank": ranks, "capacity": C,
            "max rank": max(ranks), "mean rank": sum(ranks) / ep,
            "dropped fraction": 1 - sum(done) / A}


def ep_layer_model(tokens: int = 4096, experts: int = 8, top_k: int = 2, ep: int = 8,
                   hidden: int = 4096, ffn: int = 14336, capacity_factor: float | None = None,
                   hot: float = 0.0, alpha: float = 2e-6, bandwidth: float = 450e9,
                   bytes_per_elem: float = 2, matrices: int = 3) -> dict:
    """One MoE layer on x = ``ep`` ranks with n = ``tokens`` per rank (the explorer's model):
    rows the most loaded rank processes and its ratio to the mean, the dispatch buffer S of
    even routing and the bytes leaving a rank, the four all-to-alls' time (set by the largest
    buffer, that of the most loaded rank), expert bytes per rank, total and active parameters
    of the layer. Defaults: Mixtral 8×7B's layer (bf16), NVLink 4."""
    load = skewed_loads(tokens, experts, top_k, ep, hot, capacity_factor)
    S, off = even_dispatch_bytes(tokens, top_k, hidden, ep, bytes_per_elem)
    worst = max(load["max rank"], top_k * tokens) * hidden * bytes_per_elem
    p = moe_params(hidden, ffn, experts, top_k, 1, matrices)
    return {"max rank rows": load["max rank"],
            "imbalance": load["max rank"] / load["mean rank"] if load["mean rank"] else 1.0,
            "capacity": load["capacity"], "dropped fraction": load["dropped fraction"],
            "dispatch bytes": S, "off rank bytes": off,
            "layer a2a seconds": 4 * all_to_all_time(worst, ep, alpha, bandwidth),
            "expert bytes per rank": expert_params_per_rank(experts, hidden, ffn, ep, matrices)
            * bytes_per_elem,
            "total params": p["total"], "active params": p["active"]}
