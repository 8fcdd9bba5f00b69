"""The one-process mixture-of-experts layer: the reference every expert-parallel run must equal.

y_i = Σ_{j<K, kept} g_ij · expert_{e_ij}(x_i),   expert_e(x) = gelu(x W1[e]) W2[e]

(Shazeer et al. 2017, §2; Fedus et al. 2022, "Switch Transformers", §2.1; Jiang et al. 2024,
"Mixtral of Experts", Eq. 1-2 with a GELU MLP instead of SwiGLU). The router is a bias-free
linear map h -> E; gates, capacity and the balancing loss are :mod:`.routing`'s. Expert weights
are stacked: ``w1`` (E, h, f), ``w2`` (E, f, h), used as ``x @ w1[e]`` (no transposes, no biases).
GELU is exact (erf), torch's default.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from minipar.model import GPTConfig

from .balancing import keep_by_probability
from .dispatchers import assignments
from .grouped import grouped_mlp, unpermute
from .routing import capacity, load_balancing_loss, priority_positions, top_k_gates


def expert_mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert: (m, h) @ (h, f) -> gelu -> @ (f, h) = (m, h)."""
    return F.gelu(x @ w1) @ w2


def init_experts(experts: int, hidden: int, ffn: int, dtype=None):
    """w1 (E, h, f) and w2 (E, f, h), each expert initialised like an ``nn.Linear`` (uniform
    ±1/√fan_in), from the global RNG, expert 0 first."""
    w1 = torch.empty(experts, hidden, ffn, dtype=dtype).uniform_(-1, 1) / math.sqrt(hidden)
    w2 = torch.empty(experts, ffn, hidden, dtype=dtype).uniform_(-1, 1) / math.sqrt(ffn)
    return nn.Parameter(w1), nn.Parameter(w2)


def check_top_k(top_k: int, experts: int) -> None:
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k ({top_k}) must be between 1 and experts ({experts})")


class RoutedExperts(nn.Module):
    """What every MoE layer of the chapter holds: its sizes (``hidden`` h, ``ffn`` f, ``experts``
    E, ``top_k`` K), the routing options, a bias-free router h → E, DeepSeek-V3's balancing bias
    ``expert_bias`` (E,) (zeros, not saved), and the experts ``own`` of the stack
    :func:`init_experts` draws for all E after the router (every expert-parallel rank draws it
    under the same seed and keeps its slice): ``w1`` (·, h, f), ``w2`` (·, f, h)."""

    def __init__(
        self,
        hidden: int,
        ffn: int,
        experts: int,
        top_k: int,
        capacity_factor: float | None,
        renormalize: bool,
        own: slice = slice(None),
    ):
        super().__init__()
        self.hidden, self.ffn, self.experts, self.top_k = hidden, ffn, experts, top_k
        self.capacity_factor, self.renormalize = capacity_factor, renormalize
        self.router = nn.Linear(hidden, experts, bias=False)
        w1, w2 = init_experts(experts, hidden, ffn)
        self.w1 = nn.Parameter(w1.data[own].clone())  # (E or E/ep, h, f)
        self.w2 = nn.Parameter(w2.data[own].clone())  # (E or E/ep, f, h)
        self.register_buffer("expert_bias", torch.zeros(experts), persistent=False)


class MoE(RoutedExperts):
    """Mixture of experts on one process: ``forward(x)`` for x of shape (..., h).

    ``capacity_factor=None``: no token is dropped; else each expert takes at most C = ⌈c_f·K·n/E⌉
    of the call's n tokens (:mod:`.routing`), the rest contribute zero. After a forward:
    ``aux_loss`` (Switch's balancing loss of this call's tokens), ``routed_per_expert`` (E,)
    assignments routed to each expert, ``tokens_per_expert`` (E,) those it processed, ``kept``
    (n, K) bool, ``dropped`` (count), and ``logits`` (n, E), ``probs`` (n, E) and ``choices``
    (n, K) for the losses of :mod:`.balancing`.

    ``kernel``: "loop" (the per-expert loop below, the reference) or a kernel of :mod:`.grouped`.
    ``drop_policy``: "position" (the first C of an expert's queue) or "probs" (its C most
    probable, Megatron-Core's ``--moe-token-drop-policy probs``). ``expert_bias`` (E,), zeros, is
    DeepSeek-V3's balancing bias, added to the probabilities only to choose the experts
    (:func:`.balancing.update_bias` moves it).
    """

    def __init__(
        self,
        hidden: int,
        ffn: int,
        experts: int,
        top_k: int,
        capacity_factor: float | None = None,
        renormalize: bool = True,
        drop_policy: str = "position",
        kernel: str = "loop",
    ):
        check_top_k(top_k, experts)
        if drop_policy not in ("position", "probs"):
            raise ValueError(f"drop_policy ({drop_policy!r}) must be 'position' or 'probs'")
        super().__init__(hidden, ffn, experts, top_k, capacity_factor, renormalize)
        self.drop_policy, self.kernel = drop_policy, kernel

    @classmethod
    def from_config(
        cls, c: GPTConfig, experts: int, top_k: int, ffn: int | None = None, **kw
    ) -> "MoE":
        """The MoE that replaces a :class:`minipar.model.Layer`'s MLP (h → 4h → h) in the course
        GPT: E = ``experts`` bias-free expert MLPs of width ``ffn`` (default 4·c.h, the dense
        MLP's) and a router; each token uses ``top_k``."""
        return cls(c.h, 4 * c.h if ffn is None else ffn, experts, top_k, **kw)

    def route(self, x: torch.Tensor):
        """(n, h) -> probs (n, E), gates (n, K), experts (n, K), kept (n, K) bool."""
        self.logits = self.router(x)  # (n, E)
        probs, gates, experts = top_k_gates(
            self.logits, self.top_k, self.renormalize, self.expert_bias
        )
        C = capacity(x.shape[0], self.experts, self.top_k, self.capacity_factor)
        if C is None:
            kept = torch.ones_like(experts, dtype=torch.bool)
        elif self.drop_policy == "probs":
            kept = keep_by_probability(probs.gather(-1, experts), experts, self.experts, C)
        else:
            kept = priority_positions(experts, self.experts) < C
        return probs, gates, experts, kept

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, self.hidden)  # (n, h)
        probs, gates, experts, kept = self.route(x)
        self.probs, self.choices = probs, experts
        self.aux_loss = load_balancing_loss(probs, experts)
        self.routed_per_expert = torch.bincount(experts.flatten(), minlength=self.experts)
        self.tokens_per_expert = torch.bincount(experts[kept], minlength=self.experts)
        self.kept, self.dropped = kept, int((~kept).sum())
        if self.kernel != "loop":  # production form
            token, expert, gate = assignments(experts, gates, kept)  # sorted by expert
            sizes = torch.bincount(expert, minlength=self.experts)
            out = grouped_mlp(x[token], sizes, self.w1, self.w2, self.kernel)
            return unpermute(out, token, gate, x.shape[0]).reshape(shape)
        y = torch.zeros_like(x)
        for e in range(self.experts):
            tok, slot = torch.nonzero((experts == e) & kept, as_tuple=True)  # (m,), (m,)
            if tok.numel():
                out = expert_mlp(x[tok], self.w1[e], self.w2[e])  # (m, h)
                y = y.index_add(0, tok, gates[tok, slot, None] * out)
        return y.reshape(shape)
