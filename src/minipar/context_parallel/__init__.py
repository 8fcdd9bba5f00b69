"""Context parallelism: the sequence sharded over cp ranks, attention exact.

sharding.py            shard_sequence / gather_sequence, contiguous and zigzag layouts, positions
online_softmax.py      block attention with its log-sum-exp, merge_blocks, the block backward
ring_communication.py  RingShift: isend to r+1 / irecv from r−1, posted together
ring.py                ring_attention (Liu et al. 2023) with its own ring backward; GQA,
                       document masks, striped shards, float32 merge and accumulators
allgather.py           allgather_attention (Llama 3): K/V all-gathered, one masked call
ulysses.py             ulysses_attention (Jacobs et al. 2023): packed all-to-all seq → heads and back
block.py               ContextParallelBlock / ContextParallelGPT, allreduce_cp_grads, CP × TP
experiments.py         parity, traffic, load balance, memory and timeline runs for the chapter
practice.py            all-gather, GQA, documents, striped, bf16: parity, controls, traffic
dtensor.py             against torch's context_parallel (GPU only; why, for CPU)
"""

from .allgather import allgather_attention
from .block import (
    ContextParallelBlock,
    ContextParallelGPT,
    ContextTensorParallelBlock,
    allreduce_cp_grads,
    full_gpt_loss,
)
from .online_softmax import block_attention, full_attention, merge_blocks
from .ring import ring_attention
from .sharding import chunk_ids, document_ids, gather_sequence, positions, shard_sequence
from .ulysses import heads_to_seq, seq_to_heads, ulysses_attention

__all__ = [
    "shard_sequence",
    "gather_sequence",
    "positions",
    "chunk_ids",
    "block_attention",
    "merge_blocks",
    "full_attention",
    "ring_attention",
    "allgather_attention",
    "document_ids",
    "ulysses_attention",
    "seq_to_heads",
    "heads_to_seq",
    "ContextParallelBlock",
    "ContextParallelGPT",
    "ContextTensorParallelBlock",
    "allreduce_cp_grads",
    "full_gpt_loss",
]
