"""Timed data-parallel experiments: step time per variant, the overlap timeline, the bucket
sweep, a straggler (``*_on_rank`` under :func:`run_on_ranks`; the plain-named wrappers launch
it and reduce the per-rank results). Tensors live on the rank's device, every clock read waits
for it first, and no timing is taken inside ``minipar.runtime.tracer`` (it slows every op).
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from minipar.cost.chapters.data_parallel import dp_step_time
from minipar.cost.network.collectives import collective_time, fit_alpha_beta
from minipar.runtime import launch
from minipar.runtime.device import get_device, resolve_backend, synchronize
from minipar.runtime.timing import interleaved, slowest, timed

from .bucketed import BucketedDataParallel
from .models import mlp, mlp_params
from .naive import all_reduce_gradients


def run_on_ranks(fn, n: int, *args, backend: str = "auto") -> list:
    """:func:`minipar.runtime.launch.run` with ``backend="auto"``: NCCL with a GPU per rank where there
    are enough GPUs, gloo on the CPU otherwise (the experiments put tensors on the rank's
    device). The choice is resolved here and passed on by name, so the launcher does not print
    its choice into the notebook's output."""
    return launch.run(fn, n, *args, backend=resolve_backend(backend, n))


def _clock() -> float:
    synchronize()  # queued GPU work counts in the interval
    return time.perf_counter()


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
        return DDP(model, bucket_cap_mb=bucket_cap_mb), lambda: None
    raise ValueError(f"variant ({variant!r}) must be compute, naive, bucketed or ddp")


@dataclass(frozen=True)
class Workload:
    """What each rank times: an MLP of ``depth`` layers of ``width`` (:func:`.models.mlp`) on
    ``batch`` rows per rank, ``steps`` steps a round, ``rounds`` rounds after a warm-up one."""

    width: int = 512
    depth: int = 8
    batch: int = 32
    steps: int = 5
    rounds: int = 3


def time_variants_on_rank(
    rank, n, variants, load: Workload = Workload(), bucket_cap_mb=25.0, slow_rank=None, delay_s=0.0
):
    """{variant: [seconds per step, one per round]} on this rank (rounds interleave variants);
    rank ``slow_rank`` sleeps ``delay_s`` before every step (a straggler)."""
    dev = get_device()
    x = torch.randn(load.batch, load.width, device=dev)  # (b, width) per rank
    y = torch.randn(load.batch, load.width, device=dev)  # (b, width)

    def step(fwd, after, opt):
        if rank == slow_rank:
            time.sleep(delay_s)  # a straggler
        opt.zero_grad()
        F.mse_loss(fwd(x), y).backward()
        after()
        opt.step()

    steps = {}
    for v in variants:
        model = mlp(load.width, load.depth).to(dev)
        fwd, after = make_step(v, model, bucket_cap_mb)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        steps[v] = functools.partial(step, fwd, after, opt)
    return interleaved(steps, load.rounds, inner=load.steps)


def timeline_on_rank(rank, n, width=512, depth=8, batch=32, bucket_cap_mb=1.0, overlap=True):
    """Times (s, from the step's start) of forward, backward, each gradient becoming ready,
    each bucket's all-reduce (launch, done) and the end of ``finish()``; one step after warm-up.
    Backward ends when its last all-reduce is done (DDP waits at the end of backward)."""
    dev = get_device()
    model = mlp(width, depth).to(dev)
    dp = BucketedDataParallel(model, bucket_cap_mb=bucket_cap_mb if overlap else 1e9, record=True)
    ready = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: ready.append(time.perf_counter()))
    x = torch.randn(batch, width, device=dev)  # (b, width)
    for _ in range(2):
        ready.clear(), dp.events.clear()
        dist.barrier()
        t0 = _clock()
        out = model(x)
        t1 = _clock()
        F.mse_loss(out, x).backward()
        t2 = _clock()
        dp.finish()
        t3 = _clock()
    return {
        "forward": (0.0, t1 - t0),
        "backward": (t1 - t0, t2 - t0),
        "finish": t3 - t0,
        "ready": [t - t0 for t in ready],
        "buckets": [(s - t0, (e or t3) - t0) for _, _, s, e in dp.events],
    }


def bucket_sweep_on_rank(rank, n, caps_mb, width=512, depth=8, batch=32, steps=3, rounds=2):
    """Step times for each bucket cap (bucketed), naive and compute-only; plus this machine's
    forward/backward split and all-reduce times of two sizes (to fit α and β)."""
    load = Workload(width, depth, batch, steps, rounds)
    t = time_variants_on_rank(rank, n, ["compute", "naive"], load)
    for cap in caps_mb:
        t[cap] = time_variants_on_rank(rank, n, ["bucketed"], load, cap)["bucketed"]
    dev = get_device()
    model, x = mlp(width, depth).to(dev), torch.randn(batch, width, device=dev)
    t0 = _clock()
    out = model(x)
    t1 = _clock()
    F.mse_loss(out, x).backward()
    t["fwd_bwd"] = (t1 - t0, _clock() - t1)
    t["allreduce"] = {}
    for numel in (2**8, 2**12, 2**16, 2**20):
        buf = torch.ones(numel, device=dev)
        times = timed(lambda buf=buf: dist.all_reduce(buf), 5)
        t["allreduce"][numel * 4] = min(times)  # least disturbed by the other ranks
    return t


def bucket_sweep(n, caps_mb, **kw) -> dict:
    """Measured (slowest rank, median) and modelled step time per bucket cap."""
    per_rank = run_on_ranks(functools.partial(bucket_sweep_on_rank, **kw), n, list(caps_mb))
    med = {k: slowest(per_rank, k) for k in ["compute", "naive", *caps_mb]}
    sizes = sorted(per_rank[0]["allreduce"])
    alpha, bw = fit_alpha_beta(
        sizes, [max(r["allreduce"][s] for r in per_rank) for s in sizes], "all-reduce", n
    )
    f, b = per_rank[0]["fwd_bwd"]
    scale = med["compute"] / (f + b)  # the timed steps include the optimizer step etc.
    width, depth = kw.get("width", 512), kw.get("depth", 8)
    grad = 4 * mlp_params(width, depth)  # fp32 bytes
    ring = lambda s: collective_time("all-reduce", "ring", n, s, alpha, bw)
    model = {c: dp_step_time(f * scale, b * scale, grad, c * 2**20, ring).step_s for c in caps_mb}
    return dict(measured=med, model=model, alpha=alpha, bandwidth=bw, forward=f, backward=b)


def straggler(n, delay_s=0.05, **kw) -> dict:
    """{"even"|"rank 0 slowed": [step seconds per rank]}: bucketed DP, rank 0 sleeps delay_s;
    ``kw``: the :class:`Workload`'s fields."""
    out, load = {}, Workload(**kw)
    for label, slow in (("even", None), (f"rank 0 sleeps {delay_s * 1e3:.0f} ms", 0)):
        fn = functools.partial(time_variants_on_rank, load=load, slow_rank=slow, delay_s=delay_s)
        per_rank = run_on_ranks(fn, n, ["bucketed"])
        out[label] = [statistics.median(r["bucketed"]) for r in per_rank]
    return out
