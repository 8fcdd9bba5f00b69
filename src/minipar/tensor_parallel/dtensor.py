"""Our tensor parallelism against PyTorch's: the same MLP block through DTensor's
``parallelize_module`` with ``ColwiseParallel`` / ``RowwiseParallel`` (torchtitan's plan for
w1 / w2), on the same weights and inputs.

:func:`compare_on_rank` returns the largest differences between ours, DTensor's and the
unsharded block (loss, input gradient, weight gradients). :func:`time_on_rank` times forward +
backward of both, interleaved round by round (used by ``minipar bench tensor_parallel``).
"""
from __future__ import annotations

import copy
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from .layers import ColumnParallelLinear, RowParallelLinear, shard
from .mappings import group_rank, group_size


class MLPBlock(nn.Module):
    """x + fc2(GeLU(fc1(LN(x)))): the MLP half of a transformer layer, unsharded."""

    def __init__(self, h: int):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(h), nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):                                  # x (b, s, h)
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))  # (b, s, 4h) inside


def ours(block: MLPBlock, group=None, **kw) -> MLPBlock:
    """The block with fc1 column-parallel and fc2 row-parallel (our layers)."""
    m = copy.deepcopy(block)
    m.fc1 = ColumnParallelLinear.from_full(block.fc1, group, **kw)
    m.fc2 = RowParallelLinear.from_full(block.fc2, group)
    return m


def dtensor(block: MLPBlock, t: int) -> MLPBlock:
    """The block through ``parallelize_module`` on a 1-D CPU mesh of t ranks (gloo)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    mesh = init_device_mesh("cpu", (t,))
    return parallelize_module(copy.deepcopy(block), mesh,
                              {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})


def _local(x):
    return x.to_local() if hasattr(x, "to_local") else x


def _step(m, x):
    x = x.detach().clone().requires_grad_()
    loss = m(x).square().mean()
    loss.backward()
    return loss.detach(), x.grad, {n: _local(p.grad) for n, p in m.named_parameters()}


def compare_on_rank(rank: int, t: int, h: int = 48, b: int = 2, s: int = 12,
                    dtype=torch.float64) -> dict[str, float]:
    """Largest |difference| of loss, input gradient and weight gradients: ours vs DTensor,
    and ours vs the unsharded block (weight gradients as slices)."""
    torch.manual_seed(0)
    full = MLPBlock(h).to(dtype)
    x = torch.randn(b, s, h, generator=torch.Generator().manual_seed(1), dtype=dtype)
    ref = _step(full, x)
    a, d = _step(ours(full), x), _step(dtensor(full, t), x)
    r, diff = group_rank(), lambda u, v: (u - v).abs().max().item()
    out = {"loss ours-dtensor": diff(a[0], d[0]), "dX ours-dtensor": diff(a[1], d[1]),
           "loss ours-full": diff(a[0], ref[0]), "dX ours-full": diff(a[1], ref[1])}
    out["dW ours-dtensor"] = max(diff(a[2][n], d[2][n]) for n in a[2])
    want = {"ln.weight": ref[2]["ln.weight"], "ln.bias": ref[2]["ln.bias"],
            "fc1.weight": shard(ref[2]["fc1.weight"], 0, r, t),
            "fc1.bias": shard(ref[2]["fc1.bias"], 0, r, t),
            "fc2.weight": shard(ref[2]["fc2.weight"], 1, r, t), "fc2.bias": ref[2]["fc2.bias"]}
    out["dW ours-full"] = max(diff(a[2][n], want[n]) for n in want)
    return out


def time_on_rank(rank: int, t: int, h: int, b: int, s: int, steps: int, rounds: int,
                 dtype=torch.float32) -> dict[str, list[float]]:
    """Seconds per forward + backward of ours and DTensor's block, per round (median of
    ``steps``), the two interleaved so that machine noise hits both alike."""
    import torch.distributed as dist

    torch.manual_seed(0)
    full = MLPBlock(h).to(dtype)
    models = {"ours": ours(full), "dtensor": dtensor(full, t)}
    x = torch.randn(b, s, h, generator=torch.Generator().manual_seed(1), dtype=dtype)
    out = {k: [] for k in models}
    for _ in range(rounds):
        for name, m in models.items():
            _step(m, x)                                    # warm-up
            times = []
            for _ in range(steps):
                dist.barrier()
                t0 = time.perf_counter()
                _step(m, x)
                times.append(time.perf_counter() - t0)
            out[name].append(sorted(times)[len(times) // 2])
    return out
