"""ZeRO stages 0–3 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", SC'20) on one flat parameter, for teaching, not for speed.

All trainable parameters become views into one flat fp32 vector of P = Ψ rounded up to a multiple
of n (zero padding), cut into n equal shards; rank r owns shard r = flat[r·P/n : (r+1)·P/n].

    stage 0  plain DP       all-reduce(grad)                      every rank updates everything
    stage 1  P_os           reduce-scatter(grad) → my grad shard   optimizer state for my shard
                            step my shard → all-gather(params)    only (full grads kept)
    stage 2  P_os+g         same collectives                      + the full gradient is freed
                                                                    after the reduce-scatter
    stage 3  P_os+g+p       all-gather(params) before forward,    + full parameters exist only
                            again before backward; reduce-scatter   during forward and backward
                            (grad) → step my shard (no gather)

Bytes on the wire per rank per step (ring): stages 0–2 2(n−1)/n·4P — a reduce-scatter plus an
all-gather is exactly what a ring all-reduce does; stage 3 3(n−1)/n·4P, 1.5× (ZeRO §7).

Corners cut, said plainly: the whole model is ONE unit, so stage 3 holds all full parameters
during forward and backward (FSDP gathers one layer at a time), and stage 2 holds the full
gradient until backward ends (ZeRO-2 reduce-scatters bucket by bucket during backward). What
each stage keeps *between* steps — what :func:`state_bytes` measures — is exactly ZeRO's.
Frozen parameters stay ordinary replicated tensors.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def _free(t: torch.Tensor) -> None:
    t.untyped_storage().resize_(0)            # views keep their shape; the bytes are released


def _alloc(t: torch.Tensor, numel: int) -> None:
    t.untyped_storage().resize_(numel * t.element_size())


class ZeRO:
    """``zero = ZeRO(model, stage, lambda ps: torch.optim.Adam(ps, lr=1e-3))``; per step:
    ``zero.zero_grad(); loss_fn(model(x), y).backward(); zero.step()``."""

    def __init__(self, model: torch.nn.Module, stage: int, make_optimizer, group=None):
        if stage not in (0, 1, 2, 3):
            raise ValueError(f"ZeRO stage ({stage}) must be 0, 1, 2 or 3")
        self.stage, self.group = stage, group
        self.n, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.params = [p for p in model.parameters() if p.requires_grad]    # tied: once
        numel = sum(p.numel() for p in self.params)
        self.shard = -(-numel // self.n)                                     # P/n
        self.P = self.shard * self.n
        self.flat = torch.zeros(self.P)                                      # (P,)
        offset = 0
        for p in self.params:                     # parameters become views into self.flat
            self.flat[offset:offset + p.numel()].copy_(p.data.reshape(-1))
            p.data = self.flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        lo = self.rank * self.shard
        if stage == 0:
            self.master = torch.nn.Parameter(self.flat)                      # (P,) shares storage
        elif stage in (1, 2):
            self.master = torch.nn.Parameter(self.flat[lo:lo + self.shard])  # (P/n,) a view
        else:
            self.master = torch.nn.Parameter(self.flat[lo:lo + self.shard].clone())  # own copy
            _free(self.flat)
            model.register_forward_pre_hook(lambda m, a: self._gather_params())
            model.register_forward_hook(self._after_forward)
        self.optimizer = make_optimizer([self.master])
        self.grad = torch.zeros(self.P)                                      # (P,) full grad
        if stage == 3:
            _free(self.grad)                      # attached again just before backward
        else:
            self._attach_grads()

    # -- gradients live in one flat buffer so a single collective reduces them ----------------
    def _attach_grads(self) -> None:
        if self.grad.untyped_storage().nbytes() == 0:
            _alloc(self.grad, self.P)
        self.grad.zero_()
        offset = 0
        for p in self.params:
            p.grad = self.grad[offset:offset + p.numel()].view_as(p)  # backward adds in place
            offset += p.numel()

    def zero_grad(self) -> None:
        if self.stage < 3:
            self._attach_grads()                  # stage 3 attaches them before its backward

    # -- stage 3: parameters exist in full only around forward and backward ----------------
    def _gather_params(self) -> None:
        if self.n > 1 or self.flat.untyped_storage().nbytes() == 0:
            _alloc(self.flat, self.P)
            dist.all_gather_single(self.flat, self.master.detach(), group=self.group)

    def _after_forward(self, module, args, output):
        if self.n > 1:
            _free(self.flat)

        def before_backward(grad):                # runs when backward reaches the model output
            self._gather_params()
            self._attach_grads()
            return grad
        if output.requires_grad:
            output.register_hook(before_backward)
        return output

    # -- the optimizer step ----------------------------------------------------------------
    def step(self) -> None:
        n, lo = self.n, self.rank * self.shard
        if self.stage == 0:
            if n > 1:
                dist.all_reduce(self.grad, group=self.group)                 # (P,)
            self.master.grad = self.grad.div_(n)
        else:
            mine = torch.empty(self.shard)                                   # (P/n,)
            dist.reduce_scatter_single(mine, self.grad, group=self.group)    # sum of my shard
            mine.div_(n)
            if self.stage == 1:
                self.grad[lo:lo + self.shard].copy_(mine)
                self.master.grad = self.grad[lo:lo + self.shard]
            else:                                                            # stages 2 and 3
                for p in self.params:
                    p.grad = None
                _free(self.grad)
                self.master.grad = mine
        self.optimizer.step()
        if self.stage in (1, 2):                 # every rank needs every updated parameter
            dist.all_gather_single(self.flat, self.master.detach().clone(),
                                        group=self.group)                   # (P,)
        if self.stage == 3:
            _free(self.flat)                     # stage 3 re-gathers before the next forward

    def state_bytes(self) -> dict:
        """Bytes this rank holds between steps: weights, gradients, optimizer state (each
        storage once; Adam's scalar ``step`` counter is not model state and is left out)."""
        seen: set = set()

        def size(tensors) -> int:
            total = 0
            for t in tensors:
                s = t.untyped_storage()
                if s.nbytes() and s.data_ptr() not in seen:
                    seen.add(s.data_ptr())
                    total += s.nbytes()
            return total
        weights = size([p.data for p in self.params] + [self.master.data])
        grads = size([p.grad for p in self.params + [self.master] if p.grad is not None])
        opt = size([v for st in self.optimizer.state.values() for v in st.values()
                    if torch.is_tensor(v) and v.dim() > 0])
        return {"weights": weights, "gradients": grads, "optimizer": opt,
                "total": weights + grads + opt}
