"""A small GPT cut into pipeline stages by layers.

Stage 0 holds the token and position embeddings, the last stage the final LayerNorm and the
output layer (tied to the token embedding: a copy of the same (V, h) matrix, whose gradients
the two stages all-reduce in an *embedding group*, as Megatron-LM does). The L layers are split
as evenly as possible over v·p stages. That unbalances the pipeline: the first stage stores the
embedding tables (V·h + s·h parameters), the last stage the output layer's weight and its
(b, s, V) logits and loss, so with V ≫ h those two stages are the heaviest in memory and time.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar.model import GPT, GPTConfig, gpt


def partition_layers(L: int, num_stages: int) -> list[range]:
    """Layer indices of each stage: L split into ``num_stages`` contiguous runs, the first
    L mod num_stages stages one layer longer. ``partition_layers(5, 3)`` = [0..1], [2..3], [4]."""
    if L < num_stages:
        raise ValueError(f"layers L ({L}) must be >= stages v·p ({num_stages})")
    q, rem = divmod(L, num_stages)
    out, start = [], 0
    for k in range(num_stages):
        n = q + (k < rem)
        out.append(range(start, start + n))
        start += n
    return out


class GPTStage(nn.Module):
    """Stage ``stage`` of ``num_stages`` of ``full`` (every rank builds the full model from one
    seed and keeps its part): tokens (b, s) into stage 0, else the activation (b, s, h); logits
    (b, s, V) out of the last stage, else the activation."""

    def __init__(self, full: GPT, stage: int, num_stages: int):
        super().__init__()
        self.stage, self.num_stages = stage, num_stages
        self.first, self.last = stage == 0, stage == num_stages - 1
        self.layer_ids = partition_layers(full.c.L, num_stages)[stage]
        self.layers = nn.ModuleList(full.layers[i] for i in self.layer_ids)
        if self.first:
            self.tok, self.pos = full.tok, full.pos
        if self.last:
            self.ln_f = full.ln_f
            # the output layer's copy of the tied embedding (shared when one rank holds both)
            self.head = (
                full.tok.weight if self.first else nn.Parameter(full.tok.weight.detach().clone())
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:  # x: tokens (b, s)
            x = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))  # (b, s, h)
        for layer in self.layers:
            x = layer(x)  # (b, s, h)
        if self.last:
            return self.ln_f(x) @ self.head.T  # (b, s, V)
        return x

    def tied_weight(self) -> torch.Tensor | None:
        """The stage's copy of the tied embedding (first: tok.weight, last: head), else None."""
        return self.tok.weight if self.first else (self.head if self.last else None)

    def reference_names(self) -> dict[str, nn.Parameter]:
        """This stage's parameters under their names in the unsplit GPT (the head copy is
        ``tok.weight`` too: after every step it must equal the reference's tied weight)."""
        out = {}
        if self.first:
            out["tok.weight"], out["pos.weight"] = self.tok.weight, self.pos.weight
        for i, layer in zip(self.layer_ids, self.layers):
            for n, prm in layer.named_parameters():
                out[f"layers.{i}.{n}"] = prm
        if self.last:
            out.update({f"ln_f.{n}": prm for n, prm in self.ln_f.named_parameters()})
            out["tok.weight"] = self.head
        return out


def build_stages(
    config: GPTConfig, rank: int, p: int, v: int = 1, seed: int = 0, dtype=torch.float64
) -> dict[int, GPTStage]:
    """Rank ``rank``'s stages {r: ..., r+p: ..., ...} of a v·p-stage pipeline."""
    full = gpt(config, seed, dtype)
    stages = {s: GPTStage(full, s, v * p) for s in range(rank, v * p, p)}
    last = v * p - 1
    if 0 in stages and last in stages and last:  # p = 1, v > 1: one weight, not two
        stages[last].head = stages[0].tok.weight
    return stages


def reference_model(config: GPTConfig, seed: int = 0, dtype=torch.float64) -> GPT:
    """The unsplit GPT whose weights :func:`build_stages` splits (same ``seed``)."""
    return gpt(config, seed, dtype)
