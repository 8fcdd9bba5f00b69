"""A transformer layer and the course's tiny GPT with the sequence sharded over a CP group.

Every rank holds all the weights and s/cp tokens of every activation. Everything but attention
acts token by token and runs on the shard as it is; attention is replaced by ring, all-gather or
Ulysses attention (Megatron-LM's context parallelism: "only attention communicates"). Each weight
gradient is then a partial sum: :func:`allreduce_cp_grads` sums it over the CP group (Megatron
folds this into the data-parallel all-reduce over dp × cp). Rank r adds the position
embeddings of the global positions it holds (:func:`positions`).

The layer is :class:`minipar.model.Layer` with an optional causal mask and without attention
dropout (the ring draws no dropout masks; the chapter's configurations train without dropout).
CP × TP: :class:`ContextTensorParallelBlock` is :class:`minipar.tensor_parallel.ParallelBlock`
(heads split over the TP group) whose attention is ring attention over the CP group.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from minipar.dist import allreduce_flat, group_rank, group_size
from minipar.model import GPT, Layer
from minipar.tensor_parallel import ParallelAttention, ParallelBlock

from .allgather import allgather_attention
from .online_softmax import full_attention
from .ring import RingOptions, ring_attention
from .sharding import positions
from .ulysses import ulysses_attention

ATTENTIONS = ("ring", "allgather", "ulysses")


def cp_attention(
    q, k, v, *, causal: bool, group, attention: str, layout: str, documents=None, **kw
):
    """Dispatch to ring, all-gather or Ulysses attention (Ulysses takes contiguous shards and no
    document mask). ``kw``: ``merge_dtype`` (ring only) and ``accum_dtype``."""
    if attention == "ring":
        opts = RingOptions(**kw)
        return ring_attention(q, k, v, causal, group, layout, documents=documents, options=opts)
    if attention == "allgather":
        return allgather_attention(q, k, v, causal, group, layout, documents=documents, **kw)
    if attention == "ulysses":
        if documents is not None or layout != "contiguous":
            raise ValueError(
                f"ulysses attention takes layout 'contiguous' and no document mask, got {layout!r}"
            )
        return ulysses_attention(q, k, v, causal, group)
    raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")


def _check_dropout(c) -> None:
    if c.dropout:
        raise ValueError(f"dropout ({c.dropout}) must be 0 under context parallelism here")


class ContextParallelBlock(nn.Module):
    """:class:`Layer` on a sequence shard: x (b, s/cp, h) → (b, s/cp, h)."""

    def __init__(
        self,
        layer: Layer,
        group=None,
        *,
        attention: str = "ring",
        layout: str = "contiguous",
        causal: bool = True,
    ):
        super().__init__()
        _check_dropout(layer.c)
        self.c, self.group, self.layout = layer.c, group, layout
        self.attention, self.causal = attention, causal
        for name in ("ln1", "qkv", "proj", "ln2", "fc1", "fc2"):
            setattr(self, name, copy.deepcopy(getattr(layer, name)))

    def forward(self, x):  # x (b, s/cp, h)
        kw = dict(causal=self.causal, group=self.group, attention=self.attention)
        return _layer_forward(self, x, lambda *qkv: cp_attention(*qkv, **kw, layout=self.layout))


class ContextParallelGPT(nn.Module):
    """:class:`minipar.model.GPT` on sequence shards: tokens (b, s/cp) → logits
    (b, s/cp, V). Call :meth:`finish_grads` after backward."""

    def __init__(
        self,
        model: GPT,
        group=None,
        *,
        attention: str = "ring",
        layout: str = "contiguous",
        causal: bool = True,
    ):
        super().__init__()
        _check_dropout(model.c)
        self.c, self.group, self.layout = model.c, group, layout
        self.tok, self.pos = copy.deepcopy(model.tok), copy.deepcopy(model.pos)
        self.ln_f = copy.deepcopy(model.ln_f)
        self.layers = nn.ModuleList(
            ContextParallelBlock(layer, group, attention=attention, layout=layout, causal=causal)
            for layer in model.layers
        )

    def forward(self, tokens):  # tokens (b, s/cp): this rank's shard
        cp, r = group_size(self.group), group_rank(self.group)
        pos = positions(tokens.shape[1] * cp, cp, r, self.layout).to(tokens.device)  # (s/cp,)
        x = self.tok(tokens) + self.pos(pos)  # (b, s/cp, h)
        for layer in self.layers:
            x = layer(x)
        return self.ln_f(x) @ self.tok.weight.T  # (b, s/cp, V)

    def loss(self, tokens, targets):
        """This rank's share of the mean cross-entropy over all b·s tokens (shares sum to it)."""
        logits = self(tokens)  # (b, s/cp, V)
        total = targets.numel() * group_size(self.group)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum") / total

    def finish_grads(self) -> None:
        allreduce_cp_grads(self, self.group)


def allreduce_cp_grads(module: nn.Module, group=None) -> int:
    """Sum every parameter gradient over the CP group (each rank saw s/cp tokens), one flat
    all-reduce. Returns the elements reduced; a no-op for one rank."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return allreduce_flat(grads, group)


def _layer_forward(layer, x, attend):
    """:class:`Layer`'s forward on x (b, n, h) with ``attend(q, k, v)`` as its attention."""
    c, (b, n, h) = layer.c, x.shape
    qkv = layer.qkv(layer.ln1(x)).view(b, n, 3, c.a, h // c.a)  # (b, n, 3, a, h/a)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (b, a, n, h/a)
    x = x + layer.proj(attend(q, k, v).transpose(1, 2).reshape(b, n, h))  # (b, n, h)
    return x + layer.fc2(F.gelu(layer.fc1(layer.ln2(x))))


def full_layer_forward(layer: Layer, x, causal: bool = True):
    """Single-process reference of one layer: ``layer``'s weights, (optionally causal) attention
    over the whole sequence, no dropout; x (b, s, h) → (b, s, h)."""
    return _layer_forward(layer, x, lambda q, k, v: full_attention(q, k, v, causal))


def full_gpt_loss(model: GPT, tokens, targets, causal: bool = True):
    """Single-process reference: ``model``'s forward with (optionally causal) attention, no
    dropout, mean cross-entropy; tokens, targets (b, s) → scalar."""
    x = model.tok(tokens) + model.pos(torch.arange(tokens.shape[1], device=tokens.device))
    for layer in model.layers:
        x = full_layer_forward(layer, x, causal)  # (b, s, h)
    logits = model.ln_f(x) @ model.tok.weight.T  # (b, s, V)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class RingParallelAttention(ParallelAttention):
    """Tensor-parallel attention (a/t heads per TP rank) whose core is ring attention over a
    CP group: the QKV column GEMM and the output row GEMM communicate over TP, the ring over CP."""

    def __init__(self, base: ParallelAttention, cp_group, layout: str, causal: bool):
        super().__init__(base.qkv, base.proj, base.c)
        self.cp_group, self.layout, self.causal = cp_group, layout, causal

    def core(self, q, k, v):  # (b, a/t, s/cp, h/a), x replicated over TP
        return ring_attention(q, k, v, self.causal, self.cp_group, self.layout)


class ContextTensorParallelBlock(ParallelBlock):
    """CP × TP: weights sharded over ``tp_group`` (Megatron), tokens over ``cp_group``."""

    @classmethod
    def from_layers(
        cls, layer: Layer, tp_group, cp_group, *, layout: str = "contiguous", causal: bool = True
    ) -> "ContextTensorParallelBlock":
        _check_dropout(layer.c)
        m = cls.from_full(layer, tp_group)
        m.attn = RingParallelAttention(m.attn, cp_group, layout, causal)
        m.cp_group = cp_group
        return m
