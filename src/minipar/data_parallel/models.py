"""Tiny models and data for the data-parallel chapter (seeded, CPU, fractions of a second)."""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar import model
from minipar.model import GPTConfig


class TiedClassifier(nn.Module):
    """Token classifier with the two things that trip data-parallel code up: a **tied** weight
    (the output layer reuses the embedding matrix) and a **frozen** parameter (``scale``, no
    gradient, never reduced). Ψ (trainable) = V·h + 4h² + 4h + 4h·h + h = with V=32, h=16:
    512 + 1024 + 64 + 1024 + 16."""

    def __init__(self, vocab: int = 32, h: int = 16, tied: bool = True, frozen: bool = True):
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, h), requires_grad=not frozen)
        self.head = nn.Linear(h, vocab, bias=False)
        if tied:
            self.head.weight = self.emb.weight  # (V, h), used by emb and by head

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # tokens (b,)
        x = self.emb(tokens)  # (b, h)
        x = x + self.fc2(torch.tanh(self.fc1(x)))  # (b, h)
        return self.head(x * self.scale)  # (b, V)


def mlp_params(width: int, depth: int) -> int:
    """Ψ of :func:`mlp`: depth·(width² + width) (a weight matrix and a bias per layer)."""
    return depth * (width * width + width)


def mlp(width: int = 256, depth: int = 4, seed: int = 0) -> nn.Sequential:
    """``depth`` Linear(width, width)+Tanh layers; Ψ = :func:`mlp_params` (width, depth)."""
    torch.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers)


def token_batches(steps: int, batch: int, vocab: int = 32, seed: int = 2) -> list:
    """``steps`` global batches [(tokens (batch,), targets (batch,)), ...], the same on every
    rank: :func:`minipar.model.token_batches` with s = 1, flattened (this chapter classifies
    single tokens). Seed 2 leaves no gradient entry near 1e-8 (seed 1 does): Adam divides by
    √v + ε, so such an entry turns float32 rounding, which depends on how the batch is split,
    into a parameter difference of ~1e-5."""
    c = GPTConfig(V=vocab, s=1)
    return [
        (x.view(batch), y.view(batch))  # (batch, 1) -> (batch,)
        for x, y in model.token_batches(steps, batch, c, seed)
    ]


def shard_batch(x: torch.Tensor, rank: int, n: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous 1/n of the global batch (dim 0 must divide by n)."""
    if x.shape[0] % n:
        raise ValueError(f"global batch ({x.shape[0]}) must be divisible by ranks n ({n})")
    return x.chunk(n)[rank]  # (b/n, ...)


class Branchy(nn.Module):
    """A model whose forward may skip parameters, the case DDP's ``find_unused_parameters``
    is for: ``branch`` is used only when ``forward(x, use_branch=True)``, ``spare`` never.
    Returns a dict (a model output that is not one tensor). x (b, h) -> {"logits": (b, V)}."""

    def __init__(self, h: int = 8, vocab: int = 5):
        super().__init__()
        self.body = nn.Linear(h, h)
        self.branch = nn.Linear(h, h)
        self.spare = nn.Linear(h, h)
        self.head = nn.Linear(h, vocab)

    def forward(self, x: torch.Tensor, use_branch: bool = False) -> dict:
        z = torch.tanh(self.body(x))  # (b, h)
        if use_branch:
            z = z + torch.tanh(self.branch(z))  # (b, h)
        return {"logits": self.head(z)}  # (b, V)
