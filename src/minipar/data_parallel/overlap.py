"""ZeRO-1's parameter all-gather overlapped with the next forward pass.

DDP's all-reduce cannot hide behind the *next* forward: the optimizer step needs the whole
averaged gradient first. ZeRO-1/2 split it into a reduce-scatter (before the step) and an
all-gather of the updated parameters (after it), whose consumer arrives gradually: the next
forward uses layer 0's parameters first. So one asynchronous all-gather per layer is launched,
in forward order, right after the step, and each layer waits only for its own (a forward
pre-hook). DeepSpeed's ZeRO-3 and FSDP prefetch the same way; priority schedulers (P3,
Jayarajan et al. 2019; ByteScheduler, Peng et al. 2019) send the first layers' traffic first.

Per layer ℓ, flattened to P_ℓ (padded to a multiple of n), rank r owns shard r of P_ℓ/n
elements and its optimizer state. Bytes per rank per step are ZeRO-1's (2(n−1)/n·4Ψ); only
*when* the all-gather must be finished changes.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from minipar.runtime.device import get_device, synchronize

from .models import mlp


class PrefetchingZeRO1:
    """ZeRO-1 over the ``nn.Linear`` layers of ``model`` with per-layer async all-gathers that
    the next forward waits for layer by layer. ``events`` logs ("launch"|"wait"|"forward"|"done",
    layer, time, all-gathers not yet waited for) in order ("done": the all-gather finished, from
    the communication thread)."""

    def __init__(self, model: torch.nn.Module, make_optimizer, group=None):
        self.group, self.n, self.rank = group, dist.get_world_size(group), dist.get_rank(group)
        self.layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        self.flats, self.shards, self.pending = [], [], {}
        self.events: list[tuple[str, int, float]] = []
        for i, layer in enumerate(self.layers):
            ps = list(layer.parameters())
            numel = sum(p.numel() for p in ps)
            shard = -(-numel // self.n)  # P_ℓ/n
            flat = torch.zeros(shard * self.n, dtype=ps[0].dtype, device=ps[0].device)  # (P_ℓ,)
            offset = 0
            for p in ps:  # parameters become views into flat
                flat[offset : offset + p.numel()].copy_(p.data.reshape(-1))
                p.data = flat[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
            self.flats.append(flat)
            self.shards.append(
                torch.nn.Parameter(flat[self.rank * shard : (self.rank + 1) * shard].clone())
            )  # (P_ℓ/n,) mine
            layer.register_forward_pre_hook(lambda m, a, i=i: self._before_layer(i))
        self.optimizer = make_optimizer(self.shards)

    def _before_layer(self, i: int) -> None:
        work = self.pending.pop(i, None)
        if work is not None:
            self.events.append(("wait", i, time.perf_counter(), len(self.pending) + 1))
            work.wait()  # only this layer's parameters
        self.events.append(("forward", i, time.perf_counter(), len(self.pending)))

    def step(self) -> None:
        """Reduce-scatter gradients, step my shards, launch the all-gathers (not waited)."""
        for layer, flat, shard in zip(self.layers, self.flats, self.shards):
            grad = torch.zeros_like(flat)  # (P_ℓ,)
            offset = 0
            for p in layer.parameters():
                if p.grad is not None:
                    grad[offset : offset + p.numel()] = p.grad.reshape(-1)
                offset += p.numel()
            mine = torch.empty_like(shard)  # (P_ℓ/n,)
            dist.reduce_scatter_single(mine, grad, group=self.group)
            shard.grad = mine.div_(self.n)
        self.optimizer.step()
        for i, (flat, shard) in enumerate(zip(self.flats, self.shards)):  # forward order
            self.events.append(("launch", i, time.perf_counter(), len(self.pending)))
            work = dist.all_gather_single(
                flat, shard.detach().clone(), group=self.group, async_op=True
            )
            work.get_future().then(
                lambda _f, i=i: self.events.append(("done", i, time.perf_counter(), None))
            )
            self.pending[i] = work

    def wait_all(self) -> None:
        """Finish every outstanding all-gather (before reading the parameters outside forward)."""
        for i in sorted(self.pending):
            self.pending.pop(i).wait()


def zero1_prefetch_on_rank(rank, n, width=256, depth=6, batch=32, steps=3, dtype=None):
    """Train an MLP with :class:`PrefetchingZeRO1`; returns the event log of the last forward
    (times in s from the end of the previous step), the losses and the final parameters."""
    dev = get_device()
    model = mlp(width, depth).to(dev, dtype or torch.float32)
    zero = PrefetchingZeRO1(model, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch * n, width, generator=g).to(dev, model[0].weight.dtype)  # (n·b, w)
    mine = x.chunk(n)[rank]  # (b, w)
    losses = []
    for _ in range(steps):
        for p in model.parameters():
            p.grad = None
        loss = F.mse_loss(model(mine), mine.flip(1))
        loss.backward()
        losses.append(loss.item())
        synchronize()
        zero.events.clear()
        zero.step()  # launches; the next forward waits
    loss = F.mse_loss(model(mine), mine.flip(1))  # one more forward: waits layer by layer
    zero.wait_all()
    events = sorted(zero.events, key=lambda e: e[2])
    t0 = events[0][2]
    return {
        "events": [(k, i, t - t0, p) for k, i, t, p in events],
        "losses": losses,
        "params": [p.detach().clone() for p in model.parameters()],
        "next_loss": loss.item(),
    }


def zero1_prefetch_reference(n, width=256, depth=6, batch=32, steps=3, dtype=None, lr=0.1) -> list:
    """The same training in one process on the whole batch: the parameters to compare.
    (With SGD + momentum, gradients summed over n ranks instead of averaged equal ``lr·n``.)"""
    model = mlp(width, depth).to(dtype=dtype or torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch * n, width, generator=g).to(model[0].weight.dtype)  # (n·b, w)
    for _ in range(steps):
        opt.zero_grad()
        sum(F.mse_loss(model(c), c.flip(1)) for c in x.chunk(n)).div(n).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def prefetch_report(result: dict) -> str:
    """The event log of :func:`zero1_prefetch_on_rank` as lines for a notebook, and a last line
    stating what it shows (computed from the log, so a run that did not overlap says so)."""
    lines = []
    for kind, layer, t, pending in result["events"]:
        extra = "" if pending is None else f"   ({pending} all-gathers not yet waited for)"
        lines.append(f"{t * 1e3:8.3f} ms  {kind:<8} layer {layer}{extra}")
    first = next((p for k, i, _, p in result["events"] if (k, i) == ("forward", 0)), None)
    if first:
        lines.append(
            f"layer 0's forward started with {first} later layers' all-gathers still "
            "outstanding: communication overlapped the next forward"
        )
    else:
        lines.append("layer 0's forward started after every all-gather: no overlap")
    return "\n".join(lines)
