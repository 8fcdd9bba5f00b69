"""Three ways to bring a token to its experts and back (Megatron-Core's token dispatchers;
DeepSeek-AI's DeepEP). Each takes the routed tokens of this rank and returns their MoE output;
all three give the same numbers, they differ in what crosses the network.

* ``all_to_all`` (GShard, Lepikhin et al. 2021, §3.2; Megatron ``--moe-token-dispatcher-type
  alltoall``): one row per (token, kept choice) to the expert's owner, an uneven all-to-all
  there and back (:mod:`.layer`'s default).
* ``all_gather`` (Megatron ``allgather``): every rank all-gathers every rank's tokens, choices
  and gates (padded to the largest rank's count), computes its own experts' share of every
  token, and a reduce-scatter sums the shares and hands each rank its tokens' outputs: x·n_max·h
  per call whatever the routing, cheap only when x is small or tokens are few.
* ``node_dedup`` (DeepSeek-V3, DeepSeek-AI 2024, §3.2.2; DeepEP's "normal" kernels): nodes of
  ``node_size`` consecutive EP ranks. A token goes **once per destination node** (over the
  "rail" group of same-index ranks) with its K choices and gates; that rank forwards one row per
  choice to the owners inside the node (the node group: NVLink in a real machine), sums their
  outputs with the gates and sends back **one** row per (token, node): inter-node rows are
  distinct (token, node) pairs instead of (token, choice) pairs.

Dropped assignments (a capacity) are removed at the source in all three; backward runs each
collective's adjoint (all-to-all with splits swapped; all-gather ↔ reduce-scatter).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.dist import all_gather_dim0, group_rank

from .communication import (
    a2a_index,
    all_gather_rows,
    all_to_all,
    exchange_counts,
    reduce_scatter_rows,
)
from .grouped import unpermute

DISPATCHERS = ("all_to_all", "all_gather", "node_dedup")


def assignments(experts: torch.Tensor, gates: torch.Tensor, kept: torch.Tensor):
    """Kept (token, expert, gate) triples, slot-major (a = j·n + i), stably sorted by expert."""
    n, K = experts.shape
    keep = kept.T.reshape(-1)  # (K·n,)
    token = torch.arange(n).repeat(K)[keep]  # (a,)
    expert = experts.T.reshape(-1)[keep]
    gate = gates.T.reshape(-1)[keep]
    order = torch.argsort(expert, stable=True)
    return token[order], expert[order], gate[order]


def all_to_all_dispatch(layer, x, experts, gates, kept):
    """Route rows to the experts' owners and back: counts, dispatch, experts, combine."""
    token, expert, gate = assignments(experts, gates, kept)
    send = torch.bincount(expert, minlength=layer.experts).view(layer.ep, layer.local)
    recv = exchange_counts(send, layer.group)  # (ep, E/ep)
    layer.send_counts, layer.recv_counts = send, recv
    layer.tokens_per_expert = recv.sum(0)  # (E/ep,)
    in_splits, out_splits = send.sum(1).tolist(), recv.sum(1).tolist()
    rows = all_to_all(x[token], out_splits, in_splits, layer.group)  # dispatch (m, h)
    out = layer.run_experts(rows, recv)  # (m, h)
    back = all_to_all(out, in_splits, out_splits, layer.group)  # combine (a, h)
    return layer.combine(back, token, gate, x.shape[0])


def _pad(t: torch.Tensor, rows: int, value=0) -> torch.Tensor:
    return torch.cat([t, t.new_full((rows - t.shape[0], *t.shape[1:]), value)])


def all_gather_dispatch(layer, x, experts, gates, kept):
    """All-gather tokens, choices (dropped and padding: -1) and gates; every rank computes its
    experts on all of them; a reduce-scatter returns each rank's outputs."""
    n, ep, g = x.shape[0], layer.ep, layer.group
    counts = all_gather_dim0(torch.tensor([n]), g)  # every rank's n (ep int64)
    m = int(counts.max())
    layer.gathered_rows = ep * m
    xs = all_gather_rows(_pad(x, m), g)  # (ep·m, h)
    chosen = torch.where(kept, experts, -1)
    es = all_gather_rows(_pad(chosen, m, -1), g) if ep > 1 else _pad(chosen, m, -1)  # (ep·m, K)
    gs = all_gather_rows(_pad(gates, m), g)  # (ep·m, K)
    mine = (es >= layer.first) & (es < layer.first + layer.local)  # (ep·m, K)
    local = torch.where(mine, es - layer.first, -1)
    token, expert, gate = assignments(local, gs, mine)  # by local expert
    sizes = torch.bincount(expert, minlength=layer.local)  # (E/ep,)
    layer.tokens_per_expert = sizes
    out = layer.grouped(xs[token], sizes)  # (a, h)
    return reduce_scatter_rows(unpermute(out, token, gate, ep * m), g)[:n]  # (n, h)


def node_groups(node_size: int, ep_groups: list[list[int]] | None = None):
    """(node_group, rail_group) of this rank: every EP group (default: the whole world) cut into
    nodes of ``node_size`` consecutive members; a rail joins the members with the same index in
    their node. Collective (every rank creates every group in the same order)."""
    world, me = dist.get_world_size(), dist.get_rank()
    ep_groups = ep_groups or [list(range(world))]
    node = rail = None
    for ranks in ep_groups:
        if len(ranks) % node_size:
            raise ValueError(
                f"EP group size ({len(ranks)}) must be divisible by node_size ({node_size})"
            )
        for i in range(0, len(ranks), node_size):
            members = ranks[i : i + node_size]
            grp = dist.new_group(members)
            node = grp if me in members else node
        for j in range(node_size):
            members = ranks[j::node_size]
            grp = dist.new_group(members)
            rail = grp if me in members else rail
    return node, rail


def node_dedup_dispatch(layer, x, experts, gates, kept):
    """Once per (token, destination node) over the rail, then per choice inside the node."""
    n, K = experts.shape
    per_node = layer.local * layer.node_size  # experts per node
    nodes = layer.ep // layer.node_size
    rail, node_g = layer.rail_group, layer.node_group
    node_of = torch.where(kept, experts // per_node, -1)  # (n, K)
    # stage 1, over the rail: token i to node v when one of its kept choices lives there
    need = torch.stack([(node_of == v).any(1) for v in range(nodes)], 1)  # (n, nodes)
    dest, token1 = need.T.nonzero(as_tuple=True)  # node-major, token order
    send1 = torch.bincount(dest, minlength=nodes)  # (nodes,)
    recv1 = exchange_counts(send1, rail)
    on_dest = node_of[token1] == dest[:, None]  # (m1, K) choices there
    in1, out1 = send1.tolist(), recv1.tolist()
    x1 = all_to_all(x[token1], out1, in1, rail)  # (r1, h)
    g1 = all_to_all(gates[token1] * on_dest, out1, in1, rail)  # (r1, K) gates, 0 elsewhere
    e1 = a2a_index(torch.where(on_dest, experts[token1], -1), out1, in1, rail)  # (r1, K)
    layer.rail_rows = (in1, out1)
    # stage 2, inside the node: one row per choice to its owner
    first = group_rank(rail) * per_node  # this node's first expert
    local = torch.where(e1 >= 0, e1 - first, -1)  # (r1, K) expert in node
    row, slot_e, gate = assignments(local, g1, e1 >= 0)  # sorted by expert in node
    send2 = torch.bincount(slot_e, minlength=per_node).view(layer.node_size, layer.local)
    recv2 = exchange_counts(send2, node_g)  # (node_size, E/ep)
    layer.send_counts, layer.recv_counts = send2, recv2
    layer.tokens_per_expert = recv2.sum(0)
    in2, out2 = send2.sum(1).tolist(), recv2.sum(1).tolist()
    rows = all_to_all(x1[row], out2, in2, node_g)  # (m2, h)
    out = layer.run_experts(rows, recv2)
    back = all_to_all(out, in2, out2, node_g)  # (a2, h)
    y1 = unpermute(back, row, gate, x1.shape[0])  # (r1, h)
    yb = all_to_all(y1, in1, out1, rail)  # (m1, h) one per pair
    return yb.new_zeros(n, x.shape[1]).index_add(0, token1, yb)


FORWARD = {
    "all_to_all": all_to_all_dispatch,
    "all_gather": all_gather_dispatch,
    "node_dedup": node_dedup_dispatch,
}
