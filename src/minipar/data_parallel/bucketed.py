"""Bucketed gradient all-reduce overlapped with backward: the design of PyTorch DDP.

Li et al. 2020 ("PyTorch Distributed: Experiences on Accelerating Data Parallel Training",
PVLDB 13(12)), §3.2: (1) one all-reduce per parameter pays the per-call latency α hundreds of
times, so gradients are packed into **buckets** of about ``bucket_cap_mb`` MiB; (2) backward
produces gradients roughly from the last layer to the first, so buckets are filled in **reverse
parameter order**; (3) when every gradient of a bucket is ready, its all-reduce is **launched
asynchronously** and backward continues computing earlier layers' gradients meanwhile;
(4) at the end of backward the outstanding all-reduces are awaited and the averaged gradients
written into ``.grad``.

"Ready" is ``Tensor.register_post_accumulate_grad_hook`` on each **parameter**: it fires once
per backward, after autograd accumulated the full gradient into ``p.grad`` (a tied weight's two
contributions included). Reducing anything but ``p.grad`` (the classic bug: averaging ``p``)
leaves replicas that agree with each other but not with one process.

Semantics of ``torch.nn.parallel.DistributedDataParallel``: construction broadcasts rank 0's
parameters and buffers; **every** backward outside :meth:`no_sync` all-reduces and, when it ends
(a queued autograd callback), leaves the average of the accumulated ``.grad`` (several synced
backwards in a row are correct, only wasteful); under :meth:`no_sync` backward only accumulates.
:meth:`finish` waits if anything is in flight, else does nothing. A trainable parameter without
gradient in a synced backward is an error unless ``find_unused_parameters=True``: then it
contributes zeros, and one extra all-reduce of a used-flag per parameter finds those no rank
used, whose ``.grad`` is left untouched (``None`` stays ``None``). Buckets are launched in bucket
order on every rank (a later bucket that fills first waits), so all ranks issue the same
collectives in the same order; frozen parameters are left out, a tied one is reduced once.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch
import torch.distributed as dist

from .naive import broadcast_parameters


def assign_buckets(sizes: list[int], cap_bytes: float) -> list[list[int]]:
    """Indices of parameters (``model.parameters()`` order, ``sizes`` bytes each) per bucket,
    taken from the **last** to the first (the order backward produces gradients), a bucket
    closed once it holds ``cap_bytes`` or more, as DDP's ``bucket_cap_mb`` (so it can exceed the
    cap by one parameter). Pure: what :class:`BucketedDataParallel` uses and the figure draws."""
    if cap_bytes <= 0:
        raise ValueError(f"bucket cap ({cap_bytes} bytes) must be > 0")
    buckets: list[list[int]] = []
    size = 0
    for i in reversed(range(len(sizes))):  # last layer's gradients come first
        if not buckets or size >= cap_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(i)
        size += sizes[i]
    return buckets


class BucketedDataParallel:
    """Attach to ``model``; ``loss.backward()`` averages the gradients; then ``optimizer.step()``."""

    def __init__(
        self,
        model: torch.nn.Module,
        group=None,
        bucket_cap_mb: float = 25.0,
        record: bool = False,
        find_unused_parameters: bool = False,
        broadcast: bool = True,
    ):
        if bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb ({bucket_cap_mb}) must be > 0")
        self.group, self.n = group, dist.get_world_size(group)
        self.find_unused = find_unused_parameters
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.params = [p for p in model.parameters() if p.requires_grad]  # tied: once
        sizes = [p.numel() * p.element_size() for p in self.params]
        self.buckets: list[list[torch.Tensor]] = [
            [self.params[i] for i in b] for b in assign_buckets(sizes, bucket_cap_mb * 2**20)
        ]
        self._bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self.sync = True
        self.record, self.events = record, []  # (kind, bucket, start, end) if record
        self._used: set[int] = set()  # ids with a gradient since last sync
        self._reset()
        if self.n > 1:
            if broadcast:
                broadcast_parameters(model, group)
            for p in self.params:
                p.register_post_accumulate_grad_hook(self._grad_ready)

    def _reset(self) -> None:
        self._missing = [len(b) for b in self.buckets]  # gradients not yet ready per bucket
        self._ready: set[int] = set()  # ids ready in this backward
        self._next = 0  # next bucket to launch
        self._inflight: list[tuple] = []  # (work, flat, bucket index)
        self._queued = False  # end-of-backward callback queued

    def _grad_ready(self, p: torch.Tensor) -> None:  # p.grad holds the accumulated gradient
        self._used.add(id(p))
        if not self.sync:
            return
        if not self._queued:  # first hook of this backward
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
        if id(p) in self._ready:
            return
        self._ready.add(id(p))
        self._missing[self._bucket_of[id(p)]] -= 1
        while self._next < len(self.buckets) and self._missing[self._next] == 0:
            self._launch(self._next)

    def _launch(self, i: int) -> None:
        bucket = self.buckets[i]
        flat = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in bucket]
        )  # (Σ numel of the bucket,)
        t0 = time.perf_counter()
        work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        if self.record:
            ev = ["all_reduce", i, t0, None]
            self.events.append(ev)
            work.get_future().then(lambda _f, ev=ev: ev.__setitem__(3, time.perf_counter()))
        self._inflight.append((work, flat, i))
        self._next += 1

    def _end_of_backward(self) -> None:
        """Launch what is left, wait for every all-reduce, write the averaged gradients back."""
        unused = [p for p in self.params if id(p) not in self._ready]
        while self._next < len(self.buckets):  # buckets holding unused parameters
            self._launch(self._next)
        nobody = set()
        if self.find_unused:  # which parameters did any rank use?
            flags = torch.tensor(
                [float(id(p) in self._used) for p in self.params], device=self.params[0].device
            )  # (number of parameters,)
            dist.all_reduce(flags, group=self.group)
            nobody = {id(p) for p, f in zip(self.params, flags.tolist()) if f == 0}
        for work, flat, i in self._inflight:
            work.wait()
            flat.div_(self.n)  # sum -> mean
            offset = 0
            for p in self.buckets[i]:
                g = flat[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
                if id(p) in nobody:
                    continue  # DDP: a globally unused grad is kept
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.copy_(g)
        self._reset()
        self._used.clear()
        if unused and not self.find_unused:
            names = ", ".join(self.names.get(id(p), "?") for p in unused)
            raise RuntimeError(
                f"every trainable parameter must get a gradient in a synced "
                f"backward unless find_unused_parameters=True; no gradient for: "
                f"{names}"
            )

    def finish(self) -> None:
        """Wait for a backward's all-reduces if any are still in flight (normally a no-op:
        backward already waited when it ended). Safe to call any number of times."""
        if self.n > 1 and self.sync and self._queued:
            self._end_of_backward()

    @contextmanager
    def no_sync(self):
        """Backward inside this block only accumulates into ``.grad`` (gradient accumulation)."""
        self.sync = False
        try:
            yield
        finally:
            self.sync = True
