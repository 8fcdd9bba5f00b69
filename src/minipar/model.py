"""The course's one GPT: a config dataclass with tiny defaults, the single-process reference
model every chapter shards (copying the weights of a :class:`GPT` built from one
:class:`GPTConfig`), and the token batches every chapter trains it on.

Each layer is the one Korthikanti et al. 2022 (§4.1, Figure 2) count activations for:
LayerNorm → QKV linear → softmax(QKᵀ/√(h/a)) → dropout → ·V → output linear → dropout →
residual; LayerNorm → h→4h linear → GeLU → 4h→h linear → dropout → residual. Attention is
written out (no fused kernel) so that what autograd saves is exactly what the paper counts.
Embeddings are tied to the output layer, as Narayanan et al. 2021 Eq. 2 assumes.

``recompute``: "none"; "selective" re-runs softmax(QKᵀ)·V in the backward (Korthikanti §5);
"full" keeps only each layer's input (Chen et al. 2016). Both use reentrant
``torch.utils.checkpoint``, whose saved inputs go through ``saved_tensors_hooks`` and so are
measured like any other saved tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class GPTConfig:
    L: int = 2  # layers
    h: int = 64  # hidden size
    a: int = 4  # heads
    s: int = 32  # sequence length (also the number of position embeddings)
    V: int = 100  # vocabulary
    dropout: float = 0.1
    recompute: str = "none"


def attention_core(q, k, v, dropout: float, training: bool):
    """softmax(QKᵀ/√d)·V with dropout on the probabilities; q, k, v (b, a, s, h/a)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (b, a, s, s)
    probs = F.dropout(torch.softmax(scores, dim=-1), dropout, training)  # (b, a, s, s)
    return torch.matmul(probs, v)  # (b, a, s, h/a)


class Layer(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        if c.h % c.a:
            raise ValueError(f"hidden size ({c.h}) must be divisible by heads ({c.a})")
        self.c = c
        self.ln1, self.ln2 = nn.LayerNorm(c.h), nn.LayerNorm(c.h)
        self.qkv, self.proj = nn.Linear(c.h, 3 * c.h), nn.Linear(c.h, c.h)
        self.fc1, self.fc2 = nn.Linear(c.h, 4 * c.h), nn.Linear(4 * c.h, c.h)

    def _block(self, x):  # x (b, s, h)
        c, (b, s, h) = self.c, x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, c.a, h // c.a)  # (b, s, 3h) -> (b, s, 3, a, h/a)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (b, a, s, h/a)
        ctx = self._attend(q, k, v).transpose(1, 2).reshape(b, s, h)  # (b, a, s, h/a) -> (b, s, h)
        x = x + F.dropout(self.proj(ctx), c.dropout, self.training)
        y = self.fc2(F.gelu(self.fc1(self.ln2(x))))  # (b, s, 4h) inside
        return x + F.dropout(y, c.dropout, self.training)

    def _attend(self, q, k, v):  # q, k, v (b, a, s, h/a)
        if self.c.recompute == "selective" and self.training:
            return checkpoint(attention_core, q, k, v, self.c.dropout, True, use_reentrant=True)
        return attention_core(q, k, v, self.c.dropout, self.training)

    def forward(self, x):
        if self.c.recompute == "full" and self.training:
            return checkpoint(self._block, x, use_reentrant=True)
        return self._block(x)


class GPT(nn.Module):
    """Token + position embeddings, L layers, final LayerNorm, tied output layer."""

    def __init__(self, c: GPTConfig):
        super().__init__()
        if c.recompute not in ("none", "selective", "full"):
            raise ValueError(f"recompute ({c.recompute!r}) must be none, selective or full")
        self.c = c
        self.tok, self.pos = nn.Embedding(c.V, c.h), nn.Embedding(c.s, c.h)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.L))
        self.ln_f = nn.LayerNorm(c.h)

    def forward(self, tokens):  # tokens (b, s) int64
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for layer in self.layers:
            x = layer(x)  # (b, s, h)
        return self.ln_f(x) @ self.tok.weight.T  # (b, s, V) logits


def gpt(c: GPTConfig | None = None, seed: int = 0, dtype=torch.float32, device="cpu") -> GPT:
    """A :class:`GPT` with weights drawn from ``seed`` (the same on every rank)."""
    torch.manual_seed(seed)
    return GPT(c or GPTConfig()).to(device=device, dtype=dtype)


def token_batches(steps: int, batch: int, c: GPTConfig, seed: int = 3) -> list:
    """``steps`` batches [(tokens (batch, s), targets (batch, s)), ...] of ids < c.V, the same
    on every rank (one generator seeded ``seed``)."""
    g = torch.Generator().manual_seed(seed)
    draw = lambda: torch.randint(c.V, (batch, c.s), generator=g)  # (batch, s): tokens, targets
    return [(draw(), draw()) for _ in range(steps)]
