"""Expert parallelism from scratch (Shazeer et al. 2017; Lepikhin et al. 2021, GShard; Fedus et
al. 2022, Switch Transformers). Every communication helper takes the process group as an
argument and is the identity for one rank.

routing.py        top-K gates, capacity and dropping order, the balancing loss (pure functions)
moe.py            MoE: the one-process reference layer
communication.py  differentiable uneven all-to-all, all-gather, reduce-scatter, count exchange
grouped.py        dropless permute -> grouped GEMM -> unpermute (MegaBlocks, Megatron-Core)
dispatchers.py    all-to-all, all-gather and node-deduplicated token dispatch (DeepEP)
layer.py          ExpertParallelMoE: route, exchange counts, dispatch, experts, combine
balancing.py      sequence/global aux losses, z-loss, aux-free bias, drop by probability,
                  device- and node-limited routing
grid.py           EP × EDP groups from minipar.grid and gradient reduction
folding.py        MoE parallel folding: experts laid out independently of the dense part
experiments.py    parity, traffic, EP × DP and load-balance runs used by the tests and the notebook
"""

from .communication import all_gather_rows, all_to_all, exchange_counts, reduce_scatter_rows
from .dispatchers import DISPATCHERS, node_groups
from .grouped import dropless_forward, grouped_mlp, grouped_mm, permute, unpermute
from .layer import ExpertParallelMoE
from .moe import MoE, expert_mlp
from .routing import (
    capacity,
    load_balancing_loss,
    priority_positions,
    queue_ahead,
    slot_counts,
    top_k_gates,
)

__all__ = [
    "MoE",
    "ExpertParallelMoE",
    "expert_mlp",
    "all_to_all",
    "exchange_counts",
    "top_k_gates",
    "capacity",
    "priority_positions",
    "queue_ahead",
    "slot_counts",
    "load_balancing_loss",
    "all_gather_rows",
    "reduce_scatter_rows",
    "DISPATCHERS",
    "node_groups",
    "dropless_forward",
    "grouped_mlp",
    "grouped_mm",
    "permute",
    "unpermute",
]
