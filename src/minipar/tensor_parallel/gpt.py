"""A small tensor-parallel GPT: :class:`minipar.model.GPT` sharded over a TP group.

Token embedding vocabulary-parallel and tied to the output layer (so the output GEMM produces
(b, s, v/t) logits and :func:`vocab_parallel_cross_entropy` never gathers them), position
embedding and final layer norm replicated, layers :class:`ParallelBlock`. Under sequence
parallelism the embedding reduce-scatters along s, every rank adds its slice of the position
embeddings, and the final layer norm's output is all-gathered before the output GEMM.
Call :func:`allreduce_sequence_parallel_grads` after backward when sequence parallel.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from minipar.model import GPT, GPTConfig

from .block import ParallelBlock, _mark_sp, allreduce_sequence_parallel_grads
from .cross_entropy import vocab_parallel_cross_entropy
from .layers import VocabParallelEmbedding
from .mappings import copy_to_tp_region, divide, gather_from_sp_region, group_rank, group_size


class ParallelGPT(nn.Module):
    def __init__(self, c: GPTConfig, group=None, *, sequence_parallel: bool = False, tracker=None):
        super().__init__()
        self.c, self.group, self.sequence_parallel = c, group, sequence_parallel
        self.t, self.rank = group_size(group), group_rank(group)
        if sequence_parallel:
            divide(c.s, self.t, "sequence length")
        self.tok = VocabParallelEmbedding(c.V, c.h, group, sequence_parallel=sequence_parallel)
        self.pos = nn.Embedding(c.s, c.h)
        self.layers = nn.ModuleList(
            ParallelBlock(c, group, sequence_parallel=sequence_parallel, tracker=tracker)
            for _ in range(c.L)
        )
        self.ln_f = nn.LayerNorm(c.h)
        if sequence_parallel:
            _mark_sp(self.pos), _mark_sp(self.ln_f)

    @classmethod
    def from_full(cls, model: GPT, group=None, **kw) -> "ParallelGPT":
        m = cls(model.c, group, **kw).to(next(model.parameters()).dtype)
        sp = m.sequence_parallel
        m.tok = VocabParallelEmbedding.from_full(model.tok, group, sequence_parallel=sp)
        m.pos.load_state_dict(model.pos.state_dict())
        m.ln_f.load_state_dict(model.ln_f.state_dict())
        m.layers = nn.ModuleList(
            ParallelBlock.from_full(layer, group, sequence_parallel=sp, tracker=kw.get("tracker"))
            for layer in model.layers
        )
        if sp:
            _mark_sp(m.pos), _mark_sp(m.ln_f)
        return m

    def forward(self, tokens):  # tokens (b, s) -> local logits (b, s, v/t)
        s = tokens.shape[1]
        x = self.tok(tokens)  # (b, s, h), or (b, s/t, h) with SP
        pos = self.pos(torch.arange(s, device=tokens.device))  # (s, h)
        if self.sequence_parallel:
            per = s // self.t
            pos = pos[self.rank * per : (self.rank + 1) * per]  # (s/t, h)
        x = x + pos
        for layer in self.layers:
            x = layer(x)
        x = self.ln_f(x)
        x = (
            gather_from_sp_region(x, self.group)
            if self.sequence_parallel
            else copy_to_tp_region(x, self.group)
        )  # (b, s, h)
        return F.linear(x, self.tok.weight)  # (b, s, v/t), tied output layer

    def loss(self, tokens, targets):
        return vocab_parallel_cross_entropy(self(tokens), targets, self.group)

    def finish_grads(self) -> None:
        """After backward: sum the sequence-parallel gradients over the group (no-op otherwise)."""
        if self.sequence_parallel:
            allreduce_sequence_parallel_grads(self, self.group)
