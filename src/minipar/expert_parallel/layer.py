"""Expert parallelism: each rank of the EP group owns E/ep experts and the tokens travel.

Rank r owns experts [r·E/ep, (r+1)·E/ep) as its own ``w1`` (E/ep, h, f) and ``w2`` (E/ep, f, h)
and a replicated router. ``forward(x)`` takes this rank's own tokens (n, h) and (GShard, Lepikhin
et al. 2021, §3.2; Fedus et al. 2022, §2.2 and Figure 3):

1. **routes** them locally (same gates, same capacity decisions as :class:`~.moe.MoE` on all
   ranks' tokens concatenated in rank order: with a capacity, every rank's (K, E) slot counts
   are all-gathered so a rank knows how many assignments queue before its own);
2. sorts the kept assignments by expert (so by destination rank), **exchanges counts** (one
   all-to-all of E integers: how many rows each rank will receive for each local expert);
3. **dispatch**: an all-to-all with uneven splits sends each row to its expert's owner;
4. runs each local expert on the rows it received (from all sources);
5. **combine**: the inverse all-to-all brings the results back in dispatch order; each row is
   scaled by its gate and added into its token's output row, restoring the original order.

Backward runs the same two all-to-alls in reverse (:mod:`.communication`). The router's gradient
on a rank is its own tokens' contribution; summing it over the ranks that hold different tokens
(the data-parallel group of dense parameters, which contains the EP group) gives the full one.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from minipar.dist import group_rank, group_size

from .communication import all_gather_counts, all_to_all, exchange_counts
from .moe import MoE, expert_mlp, init_experts
from .routing import (capacity, load_balancing_loss, priority_positions, queue_ahead,
                      slot_counts, top_k_gates)


class ExpertParallelMoE(nn.Module):
    """The MoE layer with its experts split over ``group`` (ep ranks); see the module docstring.

    After a forward: ``aux_loss`` (balancing loss of this rank's tokens), ``tokens_per_expert``
    (E/ep,) rows each local expert processed, ``send_counts`` / ``recv_counts`` (ep, E/ep), and
    ``kept`` (n, K) and ``dropped`` (this rank's dropped assignments).
    """

    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int,
                 capacity_factor: float | None = None, renormalize: bool = True, group=None):
        super().__init__()
        ep = group_size(group)
        if experts % ep:
            raise ValueError(f"experts ({experts}) must be divisible by ep ({ep})")
        if not 1 <= top_k <= experts:
            raise ValueError(f"top_k ({top_k}) must be between 1 and experts ({experts})")
        self.hidden, self.ffn, self.experts, self.top_k = hidden, ffn, experts, top_k
        self.capacity_factor, self.renormalize, self.group = capacity_factor, renormalize, group
        self.ep, self.rank, self.local = ep, group_rank(group), experts // ep
        self.first = self.rank * self.local                       # first expert this rank owns
        self.router = nn.Linear(hidden, experts, bias=False)
        # every rank draws the whole stack under the same seed and keeps its slice (course sizes)
        w1, w2 = init_experts(experts, hidden, ffn)
        own = slice(self.first, self.first + self.local)
        self.w1 = nn.Parameter(w1.data[own].clone())              # (E/ep, h, f)
        self.w2 = nn.Parameter(w2.data[own].clone())              # (E/ep, f, h)

    @classmethod
    def from_full(cls, moe: MoE, group=None) -> "ExpertParallelMoE":
        """This rank's part of ``moe``: the router copied, its experts' weights copied (not views)."""
        m = cls(moe.hidden, moe.ffn, moe.experts, moe.top_k, moe.capacity_factor,
                moe.renormalize, group).to(moe.w1.dtype)
        own = slice(m.first, m.first + m.local)
        with torch.no_grad():
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
        tokens = int(all_counts[:, 0].sum())                      # every token has one 1st choice
        C = capacity(tokens, self.experts, self.top_k, self.capacity_factor)
        ahead = queue_ahead(all_counts, self.rank)                # (K, E)
        return priority_positions(experts, self.experts, ahead) < C

    def run_experts(self, rows: torch.Tensor, recv_counts: torch.Tensor) -> torch.Tensor:
        """Rows grouped by source rank, then local expert -> each through its expert, same order."""
        local_e = torch.arange(self.local).repeat(self.ep)        # (ep·E/ep,) expert of each chunk
        row_e = local_e.repeat_interleave(recv_counts.flatten())  # (m,) local expert of each row
        order = torch.argsort(row_e, stable=True)                 # expert-major, sources in order
        grouped = rows[order]                                     # (m, h)
        outs = [expert_mlp(chunk, self.w1[e], self.w2[e])
                for e, chunk in enumerate(grouped.split(recv_counts.sum(0).tolist()))]
        out = torch.cat(outs) if outs else grouped                # (m, h) expert-major
        return out[torch.argsort(order)]                          # back to source-major

    def combine(self, back: torch.Tensor, token: torch.Tensor, gate: torch.Tensor,
                n: int) -> torch.Tensor:
        """Rows in dispatch order -> (n, h): y[token[a]] += gate[a] · back[a]."""
        return back.new_zeros(n, self.hidden).index_add(0, token, gate[:, None] * back)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, self.hidden)                            # (n, h)
        n, K = x.shape[0], self.top_k
        probs, gates, experts = top_k_gates(self.router(x), K, self.renormalize)
        self.aux_loss = load_balancing_loss(probs, experts)
        kept = self.keep(experts)                                 # (n, K)
        self.kept, self.dropped = kept, int((~kept).sum())
        # assignments in priority order (slot-major), the dropped ones removed
        token = torch.arange(n).repeat(K)[kept.T.reshape(-1)]     # (a,)
        expert = experts.T.reshape(-1)[kept.T.reshape(-1)]        # (a,)
        gate = gates.T.reshape(-1)[kept.T.reshape(-1)]            # (a,)
        order = torch.argsort(expert, stable=True)                # dispatch order: by expert
        token, expert, gate = token[order], expert[order], gate[order]
        send = torch.bincount(expert, minlength=self.experts).view(self.ep, self.local)
        recv = exchange_counts(send, self.group)                  # (ep, E/ep)
        self.send_counts, self.recv_counts = send, recv
        self.tokens_per_expert = recv.sum(0)                      # (E/ep,)
        in_splits, out_splits = send.sum(1).tolist(), recv.sum(1).tolist()
        rows = all_to_all(x[token], out_splits, in_splits, self.group)       # dispatch (m, h)
        out = self.run_experts(rows, recv)                                   # (m, h)
        back = all_to_all(out, in_splits, out_splits, self.group)            # combine (a, h)
        return self.combine(back, token, gate, n).reshape(shape)
