"""Expert parallelism: each rank of the EP group owns E/ep experts and the tokens travel.

Rank r owns experts [r·E/ep, (r+1)·E/ep) as its own ``w1`` (E/ep, h, f) and ``w2`` (E/ep, f, h)
and a replicated router. ``forward(x)`` takes this rank's tokens (n, h) and (GShard, Lepikhin
et al. 2021, §3.2; Fedus et al. 2022, §2.2 and Figure 3):

1. **routes** them locally, with the decisions :class:`~.moe.MoE` makes on all ranks' tokens
   concatenated in rank order (with a capacity, the ranks' (K, E) slot counts are all-gathered
   so a rank knows how many assignments queue before its own);
2. sorts the kept assignments by expert (so by owner) and **exchanges counts** (one all-to-all
   of E integers);
3. **dispatch**: an uneven all-to-all sends each row to its expert's owner;
4. runs each local expert on the rows it received, permuted expert-major through one grouped
   GEMM per weight (:mod:`.grouped`);
5. **combine**: the inverse all-to-all brings the results back; each row, scaled by its gate,
   is added into its token's output row.

Steps 2-5 are the ``all_to_all`` dispatcher; ``"all_gather"`` and ``"node_dedup"`` move the same
rows differently (:mod:`.dispatchers`). Backward runs the collectives' adjoints. A rank's router
gradient is its own tokens' contribution: summed over every rank holding different tokens it is
the full one (that need not be the dense weights' data-parallel group: :mod:`.folding`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minipar.dist import group_rank, group_size

from .communication import all_gather_counts
from .dispatchers import DISPATCHERS, FORWARD
from .grouped import KERNELS, grouped_mlp, unpermute
from .moe import MoE, RoutedExperts, check_top_k
from .routing import (
    capacity,
    load_balancing_loss,
    priority_positions,
    queue_ahead,
    slot_counts,
    top_k_gates,
)


@dataclass(frozen=True)
class Dispatch:
    """How an :class:`ExpertParallelMoE` moves and runs its rows: ``dispatcher`` "all_to_all",
    "all_gather" or "node_dedup" (then ``node_group`` and ``rail_group`` from
    :func:`.dispatchers.node_groups`); ``kernel`` "padded" (one batched matmul per weight over
    groups padded to the largest), "grouped_mm" (``torch._grouped_mm``, float32/bfloat16) or
    "loop" (per expert, for comparison)."""

    dispatcher: str = "all_to_all"
    kernel: str = "padded"
    node_group: object = None
    rail_group: object = None


class ExpertParallelMoE(RoutedExperts):
    """The MoE layer with its experts split over ``group`` (ep ranks); see the module docstring
    and :class:`Dispatch`. ``expert_bias`` (E,), a non-persistent buffer of zeros, is
    DeepSeek-V3's balancing bias (choice only).

    After a forward: ``aux_loss`` (balancing loss of this rank's tokens), ``tokens_per_expert``
    (E/ep,) rows each local expert processed, ``send_counts`` / ``recv_counts`` ((ep, E/ep) for
    all_to_all; (node_size, E/ep) inside the node for node_dedup), and ``kept`` (n, K) and
    ``dropped`` (this rank's dropped assignments).
    """

    def __init__(
        self,
        hidden: int,
        ffn: int,
        experts: int,
        top_k: int,
        capacity_factor: float | None = None,
        renormalize: bool = True,
        group=None,
        dispatch: Dispatch = Dispatch(),
    ):
        ep = group_size(group)
        kernel, dispatcher = dispatch.kernel, dispatch.dispatcher
        node_group, rail_group = dispatch.node_group, dispatch.rail_group
        if kernel not in KERNELS:
            raise ValueError(f"kernel ({kernel!r}) must be one of {KERNELS}")
        if dispatcher not in DISPATCHERS:
            raise ValueError(f"dispatcher ({dispatcher!r}) must be one of {DISPATCHERS}")
        node_size = group_size(node_group) if dispatcher == "node_dedup" else 1
        if dispatcher == "node_dedup" and ep != node_size * group_size(rail_group):
            raise ValueError(
                f"ep ({ep}) must equal node_size ({node_size}) × nodes "
                f"({group_size(rail_group)}): build the groups with node_groups()"
            )
        if experts % ep:
            raise ValueError(f"experts ({experts}) must be divisible by ep ({ep})")
        check_top_k(top_k, experts)
        rank, local = group_rank(group), experts // ep
        own = slice(rank * local, (rank + 1) * local)  # the experts this rank owns
        super().__init__(hidden, ffn, experts, top_k, capacity_factor, renormalize, own)
        self.kernel, self.dispatcher, self.group = kernel, dispatcher, group
        self.node_group, self.rail_group, self.node_size = node_group, rail_group, node_size
        self.ep, self.rank, self.local = ep, rank, local
        self.first = own.start  # first expert this rank owns

    @classmethod
    def from_full(cls, moe: MoE, group=None, **kw) -> "ExpertParallelMoE":
        """This rank's part of ``moe``: the router and its experts' weights copied (not views).
        ``kw``: the :class:`Dispatch` fields."""
        m = cls(
            moe.hidden,
            moe.ffn,
            moe.experts,
            moe.top_k,
            moe.capacity_factor,
            moe.renormalize,
            group,
            Dispatch(**kw),
        ).to(moe.w1.dtype)
        if getattr(moe, "drop_policy", "position") != "position":
            raise ValueError(
                f"drop_policy ({moe.drop_policy!r}) must be 'position' for the "
                "expert-parallel layer (dropping by probability is one-process here)"
            )
        own = slice(m.first, m.first + m.local)
        with torch.no_grad():
            m.expert_bias.copy_(moe.expert_bias)
            m.router.weight.copy_(moe.router.weight)
            m.w1.copy_(moe.w1[own])
            m.w2.copy_(moe.w2[own])
        return m

    # ------------------------------------------------------------------ the five steps
    def keep(self, experts: torch.Tensor) -> torch.Tensor:
        """(n, K) choices -> (n, K) bool: kept under the capacity of all EP ranks' tokens."""
        if self.capacity_factor is None:
            return torch.ones_like(experts, dtype=torch.bool)
        all_counts = all_gather_counts(slot_counts(experts, self.experts), self.group)  # (ep, K, E)
        tokens = int(all_counts[:, 0].sum())  # every token has one 1st choice
        C = capacity(tokens, self.experts, self.top_k, self.capacity_factor)
        ahead = queue_ahead(all_counts, self.rank)  # (K, E)
        return priority_positions(experts, self.experts, ahead) < C

    def grouped(self, rows: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """Rows grouped by local expert (``sizes`` (E/ep,)) -> each through its expert: one
        grouped GEMM per weight (:mod:`.grouped`), or the per-expert loop (``kernel="loop"``)."""
        return grouped_mlp(rows, sizes, self.w1, self.w2, self.kernel)

    def run_experts(self, rows: torch.Tensor, recv_counts: torch.Tensor) -> torch.Tensor:
        """Rows grouped by source rank, then local expert (``recv_counts`` (sources, E/ep)) ->
        each through its expert, same order: permute to expert-major, grouped MLP, unpermute."""
        sources = recv_counts.shape[0]
        local_e = torch.arange(self.local).repeat(sources)  # (sources·E/ep,) chunk's expert
        row_e = local_e.repeat_interleave(recv_counts.flatten())  # (m,) local expert of each row
        order = torch.argsort(row_e, stable=True)  # expert-major, sources in order
        out = self.grouped(rows[order], recv_counts.sum(0))  # (m, h) expert-major
        return out[torch.argsort(order)]  # back to source-major

    def combine(self, back, token, gate, n: int) -> torch.Tensor:
        """Rows in dispatch order -> (n, h): y[token[a]] += gate[a] · back[a]."""
        return unpermute(back, token, gate, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, self.hidden)  # (n, h)
        probs, gates, experts = top_k_gates(
            self.router(x), self.top_k, self.renormalize, self.expert_bias
        )
        self.aux_loss = load_balancing_loss(probs, experts)
        kept = self.keep(experts)  # (n, K)
        self.kept, self.dropped = kept, int((~kept).sum())
        y = FORWARD[self.dispatcher](self, x, experts, gates, kept)
        return y.reshape(shape)
