"""Our tensor parallelism against PyTorch's: the same MLP block through DTensor's
``parallelize_module`` with ``ColwiseParallel`` / ``RowwiseParallel`` (torchtitan's plan for
w1 / w2), on the same weights and inputs: :func:`compare_on_rank` (loss, input and weight
gradients against ours and the unsharded block) and :func:`time_on_rank` (forward + backward of
both, interleaved round by round, for ``minipar bench tensor_parallel``).

Everything, the device mesh included, lives on the rank's device (an NCCL group cannot run a
collective on CPU tensors); weights and inputs are drawn on the CPU with fixed seeds and then
moved, so every backend starts from the same numbers.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import device_mesh

from minipar.runtime.device import get_device
from minipar.runtime.timing import timed

from .cross_entropy import vocab_parallel_cross_entropy
from .layers import ColumnParallelLinear, RowParallelLinear, shard
from .mappings import group_rank


class MLPBlock(nn.Module):
    """x + fc2(GeLU(fc1(LN(x)))): the MLP half of a transformer layer, unsharded."""

    def __init__(self, h: int):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(h), nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):  # x (b, s, h)
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))  # (b, s, 4h) inside


def ours(block: MLPBlock, group=None, **kw) -> MLPBlock:
    """The block with fc1 column-parallel and fc2 row-parallel (our layers)."""
    m = copy.deepcopy(block)
    m.fc1 = ColumnParallelLinear.from_full(block.fc1, group, **kw)
    m.fc2 = RowParallelLinear.from_full(block.fc2, group)
    return m


def dtensor(block: MLPBlock, t: int) -> MLPBlock:
    """The block through ``parallelize_module`` on a 1-D mesh of t ranks on this rank's device
    type (``"cpu"`` under gloo, ``"cuda"`` under NCCL)."""
    from torch.distributed.tensor.parallel import (  # noqa: PLC0415 (lazy: dtensor)
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = device_mesh.init_device_mesh(get_device().type, (t,))
    return parallelize_module(
        copy.deepcopy(block), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    )


def shard_of(name: str, full: torch.Tensor, rank: int, t: int) -> torch.Tensor:
    """Rank ``rank``'s part of the :class:`MLPBlock` tensor ``name`` under :func:`ours`: fc1 by
    rows, fc2's weight by columns, the rest replicated."""
    if ".fc1." in f".{name}":
        return shard(full, 0, rank, t)
    return shard(full, 1, rank, t) if name.endswith("fc2.weight") else full


def _local(x):
    return x.to_local() if hasattr(x, "to_local") else x


def _step(m, x):
    x = x.detach().clone().requires_grad_()
    loss = m(x).square().mean()
    loss.backward()
    return loss.detach(), x.grad, {n: _local(p.grad) for n, p in m.named_parameters()}


def compare_on_rank(
    rank: int, t: int, h: int = 48, b: int = 2, s: int = 12, dtype=torch.float64
) -> dict[str, float]:
    """Largest |difference| of loss, input gradient and weight gradients: ours vs DTensor,
    and ours vs the unsharded block (weight gradients as slices)."""
    dev = get_device()
    torch.manual_seed(0)
    full = MLPBlock(h).to(dtype=dtype, device=dev)  # seeded on the CPU, then moved
    x = torch.randn(b, s, h, generator=torch.Generator().manual_seed(1), dtype=dtype).to(dev)
    ref = _step(full, x)
    a, d = _step(ours(full), x), _step(dtensor(full, t), x)
    r, diff = group_rank(), lambda u, v: (u - v).abs().max().item()
    out = {
        "loss ours-dtensor": diff(a[0], d[0]),
        "dX ours-dtensor": diff(a[1], d[1]),
        "loss ours-full": diff(a[0], ref[0]),
        "dX ours-full": diff(a[1], ref[1]),
    }
    out["dW ours-dtensor"] = max(diff(a[2][n], d[2][n]) for n in a[2])
    out["dW ours-full"] = max(diff(a[2][n], shard_of(n, g, r, t)) for n, g in ref[2].items())
    return out


def time_on_rank(
    rank: int, t: int, h: int, b: int, s: int, steps: int, rounds: int, dtype=torch.float32
) -> dict[str, list[float]]:
    """Seconds per forward + backward of ours and DTensor's block, per round (median of
    ``steps``), the two interleaved so that machine noise hits both alike."""
    dev = get_device()
    torch.manual_seed(0)
    full = MLPBlock(h).to(dtype=dtype, device=dev)
    models = {"ours": ours(full), "dtensor": dtensor(full, t)}
    x = torch.randn(b, s, h, generator=torch.Generator().manual_seed(1), dtype=dtype).to(dev)
    out = {k: [] for k in models}
    for _ in range(rounds):
        for name, m in models.items():
            times = sorted(timed(lambda m=m: _step(m, x), steps, 1))  # after a warm-up call
            out[name].append(times[len(times) // 2])
    return out


def compare_loss_parallel_on_rank(
    rank: int, t: int, h: int = 24, v: int = 60, b: int = 2, s: int = 6, dtype=torch.float64
) -> dict[str, float]:
    """Vocab-parallel cross-entropy: our column-parallel head + ``vocab_parallel_cross_entropy``
    against DTensor's ``ColwiseParallel(output_layouts=Shard(-1))`` head under ``loss_parallel``.
    Largest |difference| of loss, input gradient and the local head-weight gradient; the
    ``control`` entry is a plain cross-entropy on the local vocab slice (the classic bug: no
    all-reduce of max / sum; targets taken modulo v/t), which must differ."""
    from torch.distributed.tensor import Shard  # noqa: PLC0415 (lazy: dtensor)
    from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel, parallelize_module  # noqa: PLC0415 (lazy: dtensor)

    dev = get_device()
    torch.manual_seed(0)
    head = nn.Linear(h, v, bias=False).to(dtype=dtype, device=dev)  # weight (v, h)
    x = torch.randn(b, s, h, generator=torch.Generator().manual_seed(1), dtype=dtype).to(dev)
    y = torch.randint(0, v, (b, s), generator=torch.Generator().manual_seed(2)).to(dev)

    def run_ours(plain: bool):
        m = ColumnParallelLinear.from_full(head)
        xi = x.detach().clone().requires_grad_()
        logits = m(xi)  # (b, s, v/t)
        loss = (
            F.cross_entropy(logits.flatten(0, 1), y.flatten() % (v // t))
            if plain
            else vocab_parallel_cross_entropy(logits, y)
        )
        loss.backward()
        return loss.detach(), xi.grad, m.weight.grad

    mesh = device_mesh.init_device_mesh(dev.type, (t,))
    d = parallelize_module(
        copy.deepcopy(head), mesh, ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
    )
    xi = x.detach().clone().requires_grad_()
    with loss_parallel():
        logits = d(xi)  # DTensor (b, s, v), Shard(-1)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
    dt = (_local(loss.detach()), xi.grad, _local(d.weight.grad))
    a, c = run_ours(False), run_ours(True)
    diff = lambda u, w: (u - w).abs().max().item()
    full = nn.functional.cross_entropy(F.linear(x, head.weight).flatten(0, 1), y.flatten())
    return {
        "loss ours-dtensor": diff(a[0], dt[0]),
        "dX ours-dtensor": diff(a[1], dt[1]),
        "dW ours-dtensor": diff(a[2], dt[2]),
        "loss ours-full": diff(a[0], full.detach()),
        "loss control-dtensor": diff(c[0], dt[0]),
    }
