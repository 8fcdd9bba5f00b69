"""Counted (not timed) data-parallel experiments, on the rank's device under
:func:`.timing.run_on_ranks`: traced bytes and calls, ZeRO's memory, the comparison with
PyTorch's DDP and FSDP2, DDP's compression hooks.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from minipar.cost.network.collectives import ring_bytes_per_rank
from minipar.runtime.device import get_device
from minipar.runtime.tracer import trace

from .accumulation import accumulation_step
from .bucketed import BucketedDataParallel
from .models import TiedClassifier, mlp, token_batches
from .naive import all_reduce_gradients
from .timing import run_on_ranks
from .train import global_losses, train_rank
from .zero import ZeRO


def traffic_on_rank(rank, n, batch_sizes, width=64, depth=3):
    """{batch: bytes of all_reduce per step, traced} for naive DP on an MLP; and Ψ."""
    dev, out = get_device(), {}
    for b in batch_sizes:
        model = mlp(width, depth).to(dev)
        x = torch.randn(b, width, device=dev)  # (b, width)
        with trace() as tr:
            F.mse_loss(model(x), x).backward()
            all_reduce_gradients(model)
        out[b] = tr.bytes("all_reduce")
    return out, sum(p.numel() for p in model.parameters())


def accumulation_traffic_on_rank(rank, n, ks, batch=4):
    """{k: (all_reduce calls, bytes) per optimizer step} with k micro-batches, traced."""
    dev, out = get_device(), {}
    for k in ks:
        model = TiedClassifier().to(dev)
        dp = BucketedDataParallel(model, bucket_cap_mb=25.0)
        ((x, y),) = token_batches(1, batch * k)
        x, y = x.to(dev), y.to(dev)  # (k·b,)
        with trace() as tr:
            accumulation_step(model, dp, list(zip(x.chunk(k), y.chunk(k))), F.cross_entropy)
        out[k] = (tr.count("all_reduce"), tr.bytes("all_reduce"))
    return out


def zero_on_rank(rank, n, stages=(0, 1, 2, 3), steps=2):
    """{stage: (state_bytes dict, {op: traced bytes per step})} for ZeRO with Adam, and Ψ."""
    dev, out = get_device(), {}
    for stage in stages:
        torch.manual_seed(0)
        model = TiedClassifier().to(dev)
        zero = ZeRO(model, stage, lambda ps: torch.optim.Adam(ps, lr=1e-2))
        with trace() as tr:
            for x, y in token_batches(steps, 4 * n):
                zero.zero_grad()
                F.cross_entropy(
                    model(x.chunk(n)[rank].to(dev)), y.chunk(n)[rank].to(dev)
                ).backward()
                zero.step()
        ops = {op: s.bytes // steps for op, s in tr.summary().items()}
        out[stage] = (zero.state_bytes(), ops)
    psi = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return out, psi


def pytorch_comparison_on_rank(rank, n, steps=5, optimizer="adam"):
    """Local losses of ours (bucketed, ZeRO-3) and PyTorch's (DDP, FSDP2) on one run."""
    out = {}
    for v in ("bucketed", "zero3", "ddp", "fsdp2"):
        torch.manual_seed(0)
        out[v] = train_rank(rank, n, v, TiedClassifier(), optimizer, token_batches(steps, 8))[0]
    return out


def pytorch_comparison(n=2, steps=5, optimizer="adam") -> dict:
    per_rank = run_on_ranks(pytorch_comparison_on_rank, n, steps, optimizer, backend="gloo")
    return {v: global_losses([r[v] for r in per_rank]) for v in per_rank[0]}


def compression_on_rank(rank, n, hooks=("none", "fp16", "powersgd"), steps=30, width=64):
    """{hook: (all_reduce bytes per step after warm-up, losses)} for DDP comm hooks on an MLP
    regression (PowerSGD rank 2, compressing from step 10; the first 10 steps are plain)."""
    dev = get_device()
    g = torch.Generator().manual_seed(rank)
    xs = [torch.randn(16, width, generator=g).to(dev) for _ in range(steps)]  # (b, width)
    target = mlp(width, 2, seed=123).to(dev)
    out = {}
    for hook in hooks:
        model = DDP(mlp(width, 3).to(dev))
        if hook == "fp16":
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif hook == "powersgd":
            state = powerSGD_hook.PowerSGDState(
                None, matrix_approximation_rank=2, start_powerSGD_iter=10, min_compression_rate=1
            )
            model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses, last = [], None
        for i, x in enumerate(xs):
            traced = i == steps - 1
            with trace() if traced else contextlib.nullcontext() as tr:
                opt.zero_grad()
                loss = F.mse_loss(model(x), target(x).detach())
                loss.backward()
                opt.step()
            losses.append(loss.item())
            last = tr.bytes("all_reduce") if traced else last
        out[hook] = (last, losses)
    return out, sum(p.numel() for p in model.parameters())


_COST_OP = {op: op.replace("_", "-") for op in ("all_reduce", "all_gather", "reduce_scatter")}


def ring_bytes(op_bytes: dict, n: int) -> float:
    """Bytes one rank sends in a ring for traced nccl-tests sizes {op: bytes} (the cost model's
    :func:`minipar.cost.network.collectives.ring_bytes_per_rank`, applied op by op)."""
    return sum(
        ring_bytes_per_rank(_COST_OP[op], n, b) for op, b in op_bytes.items() if op in _COST_OP
    )
