"""Bytes of weights, gradients and Adam state after one real training step.

Two recipes, each measured by summing ``nbytes`` of the tensors it keeps (exact):

* **fp32 Adam**: fp32 weights (4Ψ), fp32 gradients (4Ψ), ``exp_avg`` and ``exp_avg_sq``
  (4Ψ + 4Ψ): 16Ψ bytes.
* **mixed-precision Adam** (Micikevicius et al. 2018; ZeRO §3.1): bf16 weights (2Ψ) and
  gradients (2Ψ) for the forward and backward; the optimizer keeps fp32 master weights,
  ``exp_avg`` and ``exp_avg_sq`` (12Ψ): 16Ψ bytes again.

Adam also keeps one ``step`` counter per parameter tensor (a 4-byte scalar tensor on the CPU),
reported apart: it grows with the number of tensors, not with Ψ.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class StateBytes:
    psi: int  # parameters (tied weights counted once)
    weights: int
    gradients: int
    optimizer: int  # master weights (mixed precision) + exp_avg + exp_avg_sq
    step_counters: int  # Adam's per-tensor step counts

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _loss(model, tokens):  # next-token cross-entropy
    logits = model(tokens[:, :-1])  # (b, s-1, V)
    return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())


def _tokens(model, b: int):
    c, dev = model.c, next(model.parameters()).device
    g = torch.Generator().manual_seed(2)
    return torch.randint(c.V, (b, c.s + 1), generator=g).to(dev)[:, : c.s]


def _state_bytes(params, opt, masters=()) -> StateBytes:
    """What ``params`` and Adam ``opt`` (with fp32 ``masters``, if any) keep between steps."""
    moments = [v for st in opt.state.values() for k, v in st.items() if k != "step"]
    steps = [v for st in opt.state.values() for k, v in st.items() if k == "step"]
    return StateBytes(
        sum(p.numel() for p in params),
        _nbytes(params),
        _nbytes(p.grad for p in params),
        _nbytes(masters) + _nbytes(moments),
        _nbytes(steps),
    )


def fp32_adam_step(model, b: int = 2) -> StateBytes:
    """One Adam step on an fp32 model; bytes of what stays allocated between steps."""
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    _loss(model, _tokens(model, b)).backward()
    opt.step()
    return _state_bytes(params, opt)


def mixed_precision_adam_step(model, b: int = 2) -> StateBytes:
    """One step of mixed-precision Adam on a bf16 ``model``: fp32 master copies take the
    update, then are rounded back into the bf16 weights."""
    params = list(model.parameters())
    masters = [p.detach().float() for p in params]  # fp32 master weights
    opt = torch.optim.Adam(masters, lr=1e-3)
    _loss(model, _tokens(model, b)).backward()  # bf16 gradients
    for p, w in zip(params, masters):
        w.grad = p.grad.float()  # upcast for the update...
    opt.step()
    with torch.no_grad():
        for p, w in zip(params, masters):
            w.grad = None  # ...then dropped: transient
            p.copy_(w)  # round the master back to bf16
    return _state_bytes(params, opt, masters)
