"""The capstone's one-process reference: the course GPT (:mod:`minipar.model`) with causal
attention and every layer's MLP replaced by a dropless mixture of experts
(:class:`minipar.expert_parallel.MoE`), built from one seed so that every rank holds the same
weights. :mod:`minipar.three_d.five_d` shards it five ways and compares with it."""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar.context_parallel.online_softmax import full_attention
from minipar.expert_parallel import MoE
from minipar.model import GPT, GPTConfig, Layer

TINY = GPTConfig(L=2, h=8, a=2, s=8, V=16, dropout=0.0)  # a, s/cp divisible by t = 2
EXPERTS, TOP_K, FFN = 4, 2, 16


class MoELayer(nn.Module):
    """:class:`minipar.model.Layer` with causal attention and its MLP replaced by ``moe``."""

    def __init__(self, layer: Layer, moe: MoE):
        super().__init__()
        self.c = layer.c
        self.ln1, self.qkv, self.proj, self.ln2 = layer.ln1, layer.qkv, layer.proj, layer.ln2
        self.moe = moe

    def forward(self, x):  # x (b, s, h)
        c, (b, s, h) = self.c, x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, c.a, h // c.a)  # (b, s, 3, a, h/a)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (b, a, s, h/a)
        ctx = full_attention(q, k, v, causal=True)  # (b, a, s, h/a)
        x = x + self.proj(ctx.transpose(1, 2).reshape(b, s, h))  # (b, s, h)
        return x + self.moe(self.ln2(x))


class MoEGPT(nn.Module):
    """The course GPT with MoE layers: embeddings, L :class:`MoELayer`, LayerNorm, tied head."""

    def __init__(self, gpt: GPT, moes: list[MoE]):
        super().__init__()
        self.c = gpt.c
        self.tok, self.pos, self.ln_f = gpt.tok, gpt.pos, gpt.ln_f
        self.layers = nn.ModuleList(MoELayer(lay, moe) for lay, moe in zip(gpt.layers, moes))

    def forward(self, tokens):  # (b, s) int64
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for layer in self.layers:
            x = layer(x)  # (b, s, h)
        return self.ln_f(x) @ self.tok.weight.T  # (b, s, V)


def moe_gpt(
    config: GPTConfig = TINY,
    experts: int = EXPERTS,
    top_k: int = TOP_K,
    ffn: int = FFN,
    seed: int = 0,
    dtype=torch.float64,
) -> MoEGPT:
    """The same weights on every rank: the GPT from ``seed``, then the experts, layer by layer."""
    torch.manual_seed(seed)
    gpt = GPT(config)
    moes = [MoE.from_config(config, experts, top_k, ffn) for _ in range(config.L)]
    return MoEGPT(gpt, moes).to(dtype)
