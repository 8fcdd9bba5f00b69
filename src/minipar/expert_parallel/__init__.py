"""Expert parallelism from scratch (Shazeer et al. 2017; Lepikhin et al. 2021, GShard; Fedus et
al. 2022, Switch Transformers). Every communication helper takes the process group as an
argument and is the identity for one rank.

routing.py        top-K gates, capacity and dropping order, the balancing loss (pure functions)
moe.py            MoE: the one-process reference layer
communication.py  differentiable uneven all-to-all, the count exchange
layer.py          ExpertParallelMoE: route, exchange counts, dispatch, experts, combine
grid.py           EP × DP groups and gradient reduction
experiments.py    parity, traffic, EP × DP and load-balance runs used by the tests and the notebook
plots.py          figures of the notebook
"""
from .communication import all_to_all, exchange_counts
from .layer import ExpertParallelMoE
from .moe import MoE, expert_mlp
from .routing import (capacity, load_balancing_loss, priority_positions, queue_ahead,
                      slot_counts, top_k_gates)

__all__ = ["MoE", "ExpertParallelMoE", "expert_mlp", "all_to_all", "exchange_counts",
           "top_k_gates", "capacity", "priority_positions", "queue_ahead", "slot_counts",
           "load_balancing_loss"]
