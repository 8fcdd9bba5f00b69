"""Tensor parallelism from scratch, in Megatron-LM's names (Shoeybi et al. 2019; Korthikanti et
al. 2022 for sequence parallelism). Every communication helper takes the process group as an
argument and is the identity for one rank.

mappings.py       f, g and the sequence-parallel pair as autograd functions
layers.py         ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, shard
cross_entropy.py  vocab_parallel_cross_entropy
random.py         RNGStatesTracker, model_parallel_seed
block.py          ParallelBlock (heads split, MLP column → row), allreduce_sequence_parallel_grads
gpt.py            ParallelGPT
"""

from .block import ParallelAttention, ParallelBlock, allreduce_sequence_parallel_grads
from .cross_entropy import vocab_parallel_cross_entropy
from .gpt import ParallelGPT
from .layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, shard
from .mappings import (
    copy_to_tp_region,
    gather_from_sp_region,
    gather_from_tp_region,
    reduce_from_tp_region,
    reduce_scatter_to_sp_region,
    scatter_to_sp_region,
)
from .random import RNGStatesTracker, model_parallel_seed

__all__ = [
    "copy_to_tp_region",
    "reduce_from_tp_region",
    "gather_from_sp_region",
    "reduce_scatter_to_sp_region",
    "scatter_to_sp_region",
    "gather_from_tp_region",
    "ColumnParallelLinear",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "shard",
    "vocab_parallel_cross_entropy",
    "RNGStatesTracker",
    "model_parallel_seed",
    "ParallelAttention",
    "ParallelBlock",
    "allreduce_sequence_parallel_grads",
    "ParallelGPT",
]
