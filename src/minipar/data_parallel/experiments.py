"""Measurements the chapter plots. Each ``*_on_rank`` function runs on every rank under
``minipar.launch.run``; the plain-named wrappers call ``run`` and reduce the per-rank results.

Timings are never taken inside ``minipar.trace`` (its dispatch mode slows every tensor op);
traced runs only count bytes and calls.
"""
from __future__ import annotations

import functools
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from minipar import launch
from minipar.trace import trace

from .bucketed import BucketedDataParallel
from .models import TiedClassifier, mlp, token_batches
from .naive import all_reduce_gradients
from .train import global_losses, train_rank
from .zero import ZeRO


def run(fn, n: int, *args) -> list:
    """``minipar.launch.run`` on gloo: these experiments keep their tensors on the CPU."""
    return launch.run(fn, n, *args, backend="gloo")


def make_step(variant: str, model, bucket_cap_mb: float = 25.0):
    """(module to call, function to run after backward) for one timing variant:
    "compute" (no communication), "naive", "bucketed", "ddp"."""
    if variant == "compute":
        return model, lambda: None
    if variant == "naive":
        return model, lambda: all_reduce_gradients(model)
    if variant == "bucketed":
        return model, BucketedDataParallel(model, bucket_cap_mb=bucket_cap_mb).finish
    if variant == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, bucket_cap_mb=bucket_cap_mb), lambda: None
    raise ValueError(f"variant ({variant!r}) must be compute, naive, bucketed or ddp")


def time_variants_on_rank(rank, n, variants, width=512, depth=8, batch=32, steps=5, rounds=3,
                          bucket_cap_mb=25.0, slow_rank=None, delay_s=0.0):
    """{variant: [seconds per step, one per round]} on this rank (rounds interleave variants)."""
    x, y = torch.randn(batch, width), torch.randn(batch, width)          # (b, width) per rank
    setups = {}
    for v in variants:
        model = mlp(width, depth)
        fwd, after = make_step(v, model, bucket_cap_mb)
        setups[v] = (fwd, after, torch.optim.SGD(model.parameters(), lr=1e-3))
    out = {v: [] for v in variants}
    for r in range(rounds + 1):                                          # round 0: warm-up
        for v, (fwd, after, opt) in setups.items():
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(steps):
                if rank == slow_rank:
                    time.sleep(delay_s)                                  # a straggler
                opt.zero_grad()
                F.mse_loss(fwd(x), y).backward()
                after()
                opt.step()
            if r:
                out[v].append((time.perf_counter() - t0) / steps)
    return out


def time_variants(n, variants, **kw) -> dict:
    """{variant: seconds per step}: median over rounds of the slowest rank."""
    per_rank = run(functools.partial(time_variants_on_rank, **kw), n, variants)
    return {v: statistics.median(max(r[v][i] for r in per_rank)
                                 for i in range(len(per_rank[0][v]))) for v in variants}


def traffic_on_rank(rank, n, batch_sizes, width=64, depth=3):
    """{batch: bytes of all_reduce per step, traced} for naive DP on an MLP; and Ψ."""
    out = {}
    for b in batch_sizes:
        model = mlp(width, depth)
        x = torch.randn(b, width)                                        # (b, width)
        with trace() as tr:
            F.mse_loss(model(x), x).backward()
            all_reduce_gradients(model)
        out[b] = tr.bytes("all_reduce")
    return out, sum(p.numel() for p in model.parameters())


def timeline_on_rank(rank, n, width=512, depth=8, batch=32, bucket_cap_mb=1.0, overlap=True):
    """Times (s, from the step's start) of forward, backward, each gradient becoming ready,
    each bucket's all-reduce (launch, done) and the end of ``finish()``; one step after warm-up."""
    model = mlp(width, depth)
    dp = BucketedDataParallel(model, bucket_cap_mb=bucket_cap_mb if overlap else 1e9,
                              record=True)
    ready = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: ready.append(time.perf_counter()))
    x = torch.randn(batch, width)                                        # (b, width)
    for _ in range(2):
        ready.clear(), dp.events.clear()
        dist.barrier()
        t0 = time.perf_counter()
        out = model(x)
        t1 = time.perf_counter()
        F.mse_loss(out, x).backward()
        t2 = time.perf_counter()
        dp.finish()
        t3 = time.perf_counter()
    return {"forward": (0.0, t1 - t0), "backward": (t1 - t0, t2 - t0), "finish": t3 - t0,
            "ready": [t - t0 for t in ready],
            "buckets": [(s - t0, (e or t3) - t0) for _, _, s, e in dp.events]}


def accumulation_traffic_on_rank(rank, n, ks, batch=4):
    """{k: (all_reduce calls, bytes) per optimizer step} with k micro-batches, traced."""
    from .accumulation import accumulation_step
    out = {}
    for k in ks:
        model = TiedClassifier()
        dp = BucketedDataParallel(model, bucket_cap_mb=25.0)
        (x, y), = token_batches(1, batch * k)
        with trace() as tr:
            accumulation_step(model, dp, list(zip(x.chunk(k), y.chunk(k))), F.cross_entropy)
        out[k] = (tr.count("all_reduce"), tr.bytes("all_reduce"))
    return out


def zero_on_rank(rank, n, stages=(0, 1, 2, 3), steps=2):
    """{stage: (state_bytes dict, {op: traced bytes per step})} for ZeRO with Adam, and Ψ."""
    out = {}
    for stage in stages:
        torch.manual_seed(0)
        model = TiedClassifier()
        zero = ZeRO(model, stage, lambda ps: torch.optim.Adam(ps, lr=1e-2))
        with trace() as tr:
            for x, y in token_batches(steps, 4 * n):
                zero.zero_grad()
                F.cross_entropy(model(x.chunk(n)[rank]), y.chunk(n)[rank]).backward()
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
    per_rank = run(pytorch_comparison_on_rank, n, steps, optimizer)
    return {v: global_losses([r[v] for r in per_rank]) for v in per_rank[0]}


def compression_on_rank(rank, n, hooks=("none", "fp16", "powersgd"), steps=30, width=64):
    """{hook: (all_reduce bytes per step after warm-up, losses)} for DDP comm hooks on an MLP
    regression (PowerSGD rank 2, compressing from step 10; the first 10 steps are plain)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    g = torch.Generator().manual_seed(rank)
    xs = [torch.randn(16, width, generator=g) for _ in range(steps)]      # (b, width) per rank
    target = mlp(width, 2, seed=123)
    out = {}
    for hook in hooks:
        model = DDP(mlp(width, 3))
        if hook == "fp16":
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif hook == "powersgd":
            state = powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=2,
                                                start_powerSGD_iter=10, min_compression_rate=1)
            model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses, last = [], None
        for i, x in enumerate(xs):
            with trace() if i == steps - 1 else _null() as tr:
                opt.zero_grad()
                loss = F.mse_loss(model(x), target(x).detach())
                loss.backward()
                opt.step()
            losses.append(loss.item())
            last = tr.bytes("all_reduce") if i == steps - 1 else last
        out[hook] = (last, losses)
    return out, sum(p.numel() for p in model.parameters())


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def stale_sgd(staleness=(0, 1, 4, 16), steps=200, lr=8.0, seed=0) -> dict:
    """{τ: losses} of SGD on a random least-squares problem where each update uses the gradient
    computed τ steps earlier (what an asynchronous worker whose gradient arrives late applies)."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(64, 16, generator=g) / 8                             # (samples, features)
    b = torch.randn(64, generator=g)
    out = {}
    for tau in staleness:
        w, history, losses = torch.zeros(16), [], []
        for _ in range(steps):
            history.append(w.clone())
            old = history[max(0, len(history) - 1 - tau)]                # parameters τ steps ago
            grad = A.T @ (A @ old - b) / len(b)
            w = w - lr * grad
            losses.append(0.5 * ((A @ w - b) ** 2).mean().item())
        out[tau] = losses
    return out


_COST_OP = {"all_reduce": "all-reduce", "all_gather": "all-gather",
            "reduce_scatter": "reduce-scatter"}


def ring_bytes(op_bytes: dict, n: int) -> float:
    """Bytes one rank sends in a ring for traced nccl-tests sizes {op: bytes} (the cost model's
    :func:`minipar.cost.collectives.ring_bytes_per_rank`, applied op by op)."""
    from minipar.cost.collectives import ring_bytes_per_rank
    return sum(ring_bytes_per_rank(_COST_OP[op], n, b) for op, b in op_bytes.items()
               if op in _COST_OP)


def bucket_sweep_on_rank(rank, n, caps_mb, width=512, depth=8, batch=32, steps=3, rounds=2):
    """Step times for each bucket cap (bucketed), naive and compute-only; plus this machine's
    forward/backward split and all-reduce times of two sizes (to fit α and β)."""
    t = time_variants_on_rank(rank, n, ["compute", "naive"], width, depth, batch, steps, rounds)
    for cap in caps_mb:
        t[cap] = time_variants_on_rank(rank, n, ["bucketed"], width, depth, batch, steps, rounds,
                                       bucket_cap_mb=cap)["bucketed"]
    model, x = mlp(width, depth), torch.randn(batch, width)
    t0 = time.perf_counter()
    out = model(x)
    t1 = time.perf_counter()
    F.mse_loss(out, x).backward()
    t["fwd_bwd"] = (t1 - t0, time.perf_counter() - t1)
    t["allreduce"] = {}
    for numel in (2**8, 2**12, 2**16, 2**20):
        buf, times = torch.ones(numel), []
        for _ in range(5):
            dist.barrier()
            s = time.perf_counter()
            dist.all_reduce(buf)
            times.append(time.perf_counter() - s)
        t["allreduce"][numel * 4] = min(times)          # least disturbed by the other ranks
    return t


def bucket_sweep(n, caps_mb, **kw) -> dict:
    """Measured (slowest rank, median) and modelled step time per bucket cap."""
    from minipar.cost.collectives import collective_time, fit_alpha_beta
    from minipar.cost.data_parallel import dp_step_time

    per_rank = run(functools.partial(bucket_sweep_on_rank, **kw), n, list(caps_mb))
    med = {k: statistics.median(max(r[k][i] for r in per_rank) for i in range(len(per_rank[0][k])))
           for k in ["compute", "naive", *caps_mb]}
    sizes = sorted(per_rank[0]["allreduce"])
    alpha, bw = fit_alpha_beta(sizes, [max(r["allreduce"][s] for r in per_rank) for s in sizes],
                               "all-reduce", n)
    f, b = per_rank[0]["fwd_bwd"]
    scale = med["compute"] / (f + b)          # the timed steps include the optimizer step etc.
    width, depth = kw.get("width", 512), kw.get("depth", 8)
    grad = 4 * depth * (width * width + width)
    model = {cap: dp_step_time(f * scale, b * scale, grad, cap * 2**20,
                               lambda s: collective_time("all-reduce", "ring", n, s, alpha,
                                                         bw)).step_s for cap in caps_mb}
    return dict(measured=med, model=model, alpha=alpha, bandwidth=bw, forward=f, backward=b)


def straggler(n, delay_s=0.05, **kw) -> dict:
    """{"even"|"rank 0 slowed": [step seconds per rank]}: bucketed DP, rank 0 sleeps delay_s."""
    out = {}
    for label, slow in (("even", None), (f"rank 0 sleeps {delay_s * 1e3:.0f} ms", 0)):
        per_rank = run(functools.partial(time_variants_on_rank, slow_rank=slow, delay_s=delay_s,
                                         **kw), n, ["bucketed"])
        out[label] = [statistics.median(r["bucketed"]) for r in per_rank]
    return out


def scaling_curves(ns=(8, 64, 512), scenarios=None) -> dict:
    """Modelled efficiency (compute / step time) per scenario at each GPU count (weak scaling:
    a fixed batch per GPU). Scenario: (Ψ, grad bytes/param, compute s, inter link, bucket MiB,
    overlap)."""
    from minipar.cost.data_parallel import allreduce_seconds, dp_step_time
    scenarios = scenarios or DEFAULT_SCENARIOS
    out = {}
    for name, (psi, gb, c, inter, bucket, overlap) in scenarios.items():
        out[name] = [dp_step_time(c / 3, 2 * c / 3, psi * gb, bucket * 2**20,
                                  allreduce_seconds(n, inter=inter), overlap).efficiency
                     for n in ns]
    return out


# 1.3B parameters, bf16 gradients. Compute per step: 6·Ψ·tokens FLOPs at 400 TFLOP/s
# (about 40% of an H100's dense bf16 peak): 16 384 tokens per GPU -> 0.32 s; 2 048 -> 0.04 s.
DEFAULT_SCENARIOS = {
    "16k tokens/GPU, IB NDR, overlap": (1.3e9, 2, 6 * 1.3e9 * 16384 / 400e12, "ib-ndr400", 25, True),
    "2k tokens/GPU, IB NDR, overlap": (1.3e9, 2, 6 * 1.3e9 * 2048 / 400e12, "ib-ndr400", 25, True),
    "2k tokens/GPU, IB NDR, no overlap": (1.3e9, 2, 6 * 1.3e9 * 2048 / 400e12, "ib-ndr400", 25,
                                          False),
    "2k tokens/GPU, 100 GbE, overlap": (1.3e9, 2, 6 * 1.3e9 * 2048 / 400e12, "eth-100g", 25, True),
}
