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

Contract: :mod:`.bucketed`'s (PyTorch DDP's), on flat buffers of the parameters' one dtype and
device (mixed dtypes are rejected); stage 3 accepts any forward output (tensor, tuple, dict) and
gathers the parameters when backward reaches the first output that needs a gradient. A
parameter no rank used (``find_unused_parameters=True``) keeps its value and optimizer state, as
with a ``None`` gradient, but the shard is one tensor with ONE Adam step count k, which advances
in a step that skipped the parameter; its later bias corrections 1 − β₁ᵏ, 1 − β₂ᵏ therefore use
the larger k (``test_zero_adam_skip_counts_the_step_as_documented``). SGD agrees exactly. FSDP2
(``fully_shard``) keeps per-parameter counts like one process; FSDP1's flat parameter and
DeepSpeed's ZeRO-1/2 fill a missing gradient with zeros, so Adam moves it and counts the step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_leaves

from minipar.cost.chapters.memory_time import check_zero_stage


def _free(t: torch.Tensor) -> None:
    t.untyped_storage().resize_(0)  # views keep their shape; the bytes are released


def _alloc(t: torch.Tensor, numel: int) -> None:
    t.untyped_storage().resize_(numel * t.element_size())


class ZeRO:
    """``zero = ZeRO(model, stage, lambda ps: torch.optim.Adam(ps, lr=1e-3))``; per step:
    ``zero.zero_grad(); loss_fn(model(x), y).backward(); zero.step()``."""

    def __init__(
        self,
        model: torch.nn.Module,
        stage: int,
        make_optimizer,
        group=None,
        find_unused_parameters: bool = False,
    ):
        self.stage, self.group = check_zero_stage(stage), group
        self.n, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.find_unused = find_unused_parameters
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.params = [p for p in model.parameters() if p.requires_grad]  # tied: once
        dtypes = sorted({str(p.dtype) for p in self.params})
        if len(dtypes) != 1:
            raise ValueError(
                f"trainable parameters must share one dtype for one flat buffer "
                f"(got {', '.join(dtypes)})"
            )
        self.dtype, self.device = self.params[0].dtype, self.params[0].device
        numel = sum(p.numel() for p in self.params)
        self.shard_numel = -(-numel // self.n)  # P/n
        self.P = self.shard_numel * self.n
        self.flat = torch.zeros(self.P, dtype=self.dtype, device=self.device)  # (P,)
        self._ranges, offset = [], 0
        for p in self.params:  # parameters become views into self.flat
            self.flat[offset : offset + p.numel()].copy_(p.data.reshape(-1))
            p.data = self.flat[offset : offset + p.numel()].view_as(p)
            self._ranges.append((offset, offset + p.numel()))
            offset += p.numel()
        if self.n > 1:  # replicas start from rank 0's parameters
            root = dist.get_global_rank(group, 0) if group is not None else 0
            dist.broadcast(self.flat, src=root, group=group)  # (P,)
        self._used: set[int] = set()
        for p in self.params:
            p.register_post_accumulate_grad_hook(lambda p: self._used.add(id(p)))
        self.mine = slice(self.rank * self.shard_numel, (self.rank + 1) * self.shard_numel)  # r·P/n
        if stage == 0:
            self.master = torch.nn.Parameter(self.flat)  # (P,) shares storage
        elif stage in (1, 2):
            self.master = torch.nn.Parameter(self.flat[self.mine])  # (P/n,) a view
        else:
            self.master = torch.nn.Parameter(self.flat[self.mine].clone())  # own copy
            _free(self.flat)
            model.register_forward_pre_hook(lambda m, a: self._gather_params())
            model.register_forward_hook(self._after_forward)
        self.optimizer = make_optimizer([self.master])
        self.grad = torch.zeros(self.P, dtype=self.dtype, device=self.device)  # (P,) full grad
        if stage == 3:
            _free(self.grad)  # attached again just before backward
        else:
            self._attach_grads()

    # -- gradients live in one flat buffer so a single collective reduces them ----------------
    def _attach_grads(self) -> None:
        if self.grad.untyped_storage().nbytes() == 0:
            _alloc(self.grad, self.P)
        self.grad.zero_()
        offset = 0
        for p in self.params:
            p.grad = self.grad[offset : offset + p.numel()].view_as(p)  # backward adds in place
            offset += p.numel()

    def zero_grad(self) -> None:
        if self.stage < 3:
            self._attach_grads()  # stage 3 attaches them before its backward

    # -- stage 3: parameters exist in full only around forward and backward ----------------
    def _gather_params(self) -> None:
        if self.n > 1 or self.flat.untyped_storage().nbytes() == 0:
            _alloc(self.flat, self.P)
            dist.all_gather_single(self.flat, self.master.detach(), group=self.group)

    def _after_forward(self, module, args, output):
        if self.n > 1:
            _free(self.flat)
        armed = [True]  # gather once, at the first output reached

        def before_backward(grad):  # runs when backward reaches a model output
            if armed[0]:
                armed[0] = False
                self._gather_params()
                self._attach_grads()
            return grad

        for t in tree_leaves(output):  # a tensor, or any tuple/list/dict of them
            if torch.is_tensor(t) and t.requires_grad:
                t.register_hook(before_backward)
        return output

    # -- reading the state -------------------------------------------------------------------
    def shard(self) -> tuple[int, int, torch.Tensor]:
        """(lo, hi, values): this rank's slice flat[lo:hi] of the flat parameter, the part its
        optimizer updates (a detached view; the last shard may end in zero padding)."""
        return self.mine.start, self.mine.stop, self.master.detach()

    def full_parameters(self) -> list[torch.Tensor]:
        """Every trainable parameter in full (clones, in ``model.parameters()`` order). Stage 3
        all-gathers them first: call it on every rank of the group."""
        if self.stage == 3:
            self._gather_params()
        full = [p.detach().clone() for p in self.params]
        if self.stage == 3 and self.n > 1:
            _free(self.flat)
        return full

    # -- the optimizer step ----------------------------------------------------------------
    def _unused(self) -> set[int]:
        """ids of the parameters no rank used since the last step (an error without
        ``find_unused_parameters`` if this rank left any parameter unused)."""
        mine = [p for p in self.params if id(p) not in self._used]
        if not self.find_unused:
            if mine:
                raise RuntimeError(
                    "every trainable parameter must get a gradient in a step unless "
                    "find_unused_parameters=True; no gradient for: "
                    + ", ".join(self.names.get(id(p), "?") for p in mine)
                )
            return set()
        flags = torch.tensor(
            [float(id(p) in self._used) for p in self.params], device=self.device
        )  # (parameters,)
        if self.n > 1:
            dist.all_reduce(flags, group=self.group)
        return {id(p) for p, f in zip(self.params, flags.tolist()) if f == 0}

    def step(self, max_norm: float | None = None):
        """Reduce the gradients, step this rank's shard, share the result (the module's table).
        ``max_norm``: first clip by the norm of the WHOLE averaged gradient, as
        ``torch.nn.utils.clip_grad_norm_`` in one process (:meth:`_clip`: clipping each shard by
        its own norm would scale the shards differently); returns that norm, else None."""
        keep, saved = self._save_untouched()
        self._reduce_gradients()
        norm = None if max_norm is None else self._clip(max_norm)
        self.optimizer.step()
        if saved is not None:
            with torch.no_grad():
                self.master[keep] = saved[0]
            state = self.optimizer.state.get(self.master, {})
            for k, v in saved[1].items():
                state[k][keep] = v
        if self.stage in (1, 2):  # every rank needs every updated parameter
            dist.all_gather_single(
                self.flat, self.master.detach().clone(), group=self.group
            )  # (P,)
        if self.stage == 3:
            _free(self.flat)  # stage 3 re-gathers before the next forward
        return norm

    def _save_untouched(self):
        """(mask of this rank's master entries no rank used this step, (their values, their
        optimizer state) or None): the step must leave them untouched, like a None grad."""
        nobody = self._unused()
        self._used = set()
        keep = torch.zeros(self.P, dtype=torch.bool, device=self.device)  # (P,)
        for p, (a, b) in zip(self.params, self._ranges):
            if id(p) in nobody:
                keep[a:b] = True
        if self.stage:
            keep = keep[self.mine]  # (P/n,)
        if not keep.any():
            return keep, None
        state = self.optimizer.state.get(self.master, {})
        return keep, (
            self.master.detach()[keep].clone(),
            {
                k: v[keep].clone()
                for k, v in state.items()
                if torch.is_tensor(v) and v.shape == keep.shape
            },
        )

    def _reduce_gradients(self) -> None:
        """The averaged gradient into ``master.grad``: all of it (stage 0, all-reduce) or this
        rank's shard (stages 1-3, reduce-scatter); stages 2 and 3 free the full gradient."""
        n = self.n
        if self.stage == 0:
            if n > 1:
                dist.all_reduce(self.grad, group=self.group)  # (P,)
            self.master.grad = self.grad.div_(n)
            return
        mine = torch.empty(self.shard_numel, dtype=self.dtype, device=self.device)  # (P/n,)
        dist.reduce_scatter_single(mine, self.grad, group=self.group)  # sum of my shard
        mine.div_(n)
        if self.stage == 1:
            self.grad[self.mine].copy_(mine)
            self.master.grad = self.grad[self.mine]
        else:  # stages 2 and 3
            for p in self.params:
                p.grad = None
            _free(self.grad)
            self.master.grad = mine

    def _clip(self, max_norm: float) -> float:
        """Scale ``master.grad`` by max_norm/(norm + 1e-6), at most 1, where norm is the whole
        averaged gradient's (the shards' squared norms all-reduced); returns the norm."""
        sq = self.master.grad.detach().pow(2).sum()  # my shard's (or all, stage 0)
        if self.stage and self.n > 1:
            dist.all_reduce(sq, group=self.group)  # Σ over shards: the whole norm²
        norm = sq.sqrt()
        self.master.grad.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
        return norm.item()

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
        states = [v for st in self.optimizer.state.values() for v in st.values()]
        opt = size([v for v in states if torch.is_tensor(v) and v.dim() > 0])
        return dict(weights=weights, gradients=grads, optimizer=opt, total=weights + grads + opt)
