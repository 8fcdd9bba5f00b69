"""Bucketed gradient all-reduce overlapped with backward: the design of PyTorch DDP.

Li et al. 2020 ("PyTorch Distributed: Experiences on Accelerating Data Parallel Training",
VLDB 13(12)), §3.2: (1) one all-reduce per parameter pays the per-call latency α hundreds of
times, so gradients are packed into **buckets** of about ``bucket_cap_mb`` MiB; (2) backward
produces gradients roughly from the last layer to the first, so buckets are filled in **reverse
parameter order**; (3) when every gradient of a bucket is ready, its all-reduce is **launched
asynchronously** and backward continues computing earlier layers' gradients meanwhile;
(4) :meth:`finish` waits for the outstanding all-reduces before the optimizer step.

"Ready" comes from ``Tensor.register_post_accumulate_grad_hook`` on each **parameter**: it fires
once autograd has accumulated the parameter's full gradient into ``p.grad`` for this backward,
once per backward even for a tied weight used twice in the forward (its two contributions are
summed before the accumulation). Reducing anything other than ``p.grad`` here (the classic bug is
averaging ``p`` itself) leaves replicas that agree with each other but not with a single process.

Buckets are launched in bucket order on every rank (a later bucket that fills first waits for
the earlier ones), so all ranks issue the same collectives in the same order. Frozen parameters
are left out; a parameter that got no gradient this step is reduced as zeros in :meth:`finish`.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

import torch
import torch.distributed as dist


class BucketedDataParallel:
    """Attach to ``model``; call :meth:`finish` after ``loss.backward()``, then ``optimizer.step()``."""

    def __init__(self, model: torch.nn.Module, group=None, bucket_cap_mb: float = 25.0,
                 record: bool = False):
        if bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb ({bucket_cap_mb}) must be > 0")
        self.group, self.n = group, dist.get_world_size(group)
        self.params = [p for p in model.parameters() if p.requires_grad]   # tied: once
        self.buckets: list[list[torch.Tensor]] = []
        cap, size = bucket_cap_mb * 2**20, 0
        for p in reversed(self.params):                   # last layer's gradients come first
            if not self.buckets or size >= cap:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self._bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self.sync = True
        self.record, self.events = record, []             # (kind, bucket, start, end) if record
        self._reset()
        if self.n > 1:
            for p in self.params:
                p.register_post_accumulate_grad_hook(self._grad_ready)

    def _reset(self) -> None:
        self._missing = [len(b) for b in self.buckets]    # gradients not yet ready per bucket
        self._next = 0                                    # next bucket to launch
        self._inflight: list[tuple] = []                  # (work, flat, bucket index)

    def _grad_ready(self, p: torch.Tensor) -> None:       # p.grad holds the accumulated gradient
        if not self.sync:
            return
        self._missing[self._bucket_of[id(p)]] -= 1
        while self._next < len(self.buckets) and self._missing[self._next] == 0:
            self._launch(self._next)

    def _launch(self, i: int) -> None:
        bucket = self.buckets[i]
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in bucket])           # (Σ numel of the bucket,)
        t0 = time.perf_counter()
        work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        if self.record:
            ev = ["all_reduce", i, t0, None]
            self.events.append(ev)
            work.get_future().then(lambda _f, ev=ev: ev.__setitem__(3, time.perf_counter()))
        self._inflight.append((work, flat, i))
        self._next += 1

    def finish(self) -> None:
        """Launch what is left, wait for every all-reduce, write the averaged gradients back."""
        if self.n == 1 or not self.sync or self._missing == [len(b) for b in self.buckets]:
            return                                        # no backward since the last finish
        while self._next < len(self.buckets):             # parameters unused in this forward
            self._launch(self._next)
        for work, flat, i in self._inflight:
            work.wait()
            flat.div_(self.n)                             # sum -> mean
            offset = 0
            for p in self.buckets[i]:
                g = flat[offset:offset + p.numel()].view_as(p)
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.copy_(g)
                offset += p.numel()
        self._reset()

    @contextmanager
    def no_sync(self):
        """Backward inside this block only accumulates into ``.grad`` (gradient accumulation)."""
        self.sync = False
        try:
            yield
        finally:
            self.sync = True
            self._reset()
