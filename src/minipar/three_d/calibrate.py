"""Closing the loop on the reader's machine: measure its compute rate and its α-β per group
size, predict the tiny 3D GPT's step time under every (d, t, p) layout of the ranks
(:mod:`minipar.cost.calibrate`), then run each layout and compare.

Everything runs on gloo ranks of this machine through :func:`minipar.launch.run`; ranks share the
cores, so every measurement is taken with all ranks busy at once, as in a real layout. A
benchmark reports, it never asserts a speed (``minipar bench three_d``).
"""
from __future__ import annotations

import time
from dataclasses import asdict, replace

import torch
import torch.distributed as dist
import torch.nn.functional as F

from minipar.cost import calibrate as model
from minipar.model import GPT, GPTConfig, Layer

TINY = GPTConfig(L=4, h=128, a=4, s=32, V=64, dropout=0.0)   # a, s divisible by t = 1, 2, 4
BATCH, MICRO = 16, 2                                          # B sequences per step, b
SIZES = (2**8, 2**14, 2**17, 2**19)                           # all-reduce sizes, elements
BATCHES = (1, 2, 4, 8)                                        # micro-batches of the layer fit


def _timed(fn, reps: int) -> float:
    """The fastest of ``reps`` calls, all ranks starting together: on a shared machine the
    floor is what the operation costs; the rest is other processes' noise."""
    dist.barrier()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def measure_on_rank(rank: int, world_size: int, config: GPTConfig = TINY,
                    batches=(1, 2, 4, 8), reps: int = 5) -> dict:
    """Per rank, all ranks at once: forward + backward seconds of one layer for each micro-batch
    size, all-reduce seconds per group size n (every group of n consecutive ranks busy) and
    size, and the one-way time of a send/recv between rank pairs."""
    torch.manual_seed(0)
    layer = Layer(replace(config, dropout=0.0))
    out = {"layer": {}, "allreduce": {}, "p2p": {}}
    for b in batches:
        x = torch.randn(b, config.s, config.h, requires_grad=True)          # (b, s, h)

        def step():
            layer(x).sum().backward()
        step()
        out["layer"][b] = _timed(step, reps)
    for n in [k for k in range(2, world_size + 1) if world_size % k == 0]:
        groups = [dist.new_group(list(range(g, g + n))) for g in range(0, world_size, n)]
        mine = groups[rank // n]
        out["allreduce"][n] = {}
        for size in SIZES:
            buf = torch.ones(size)
            for _ in range(2):                                             # warm up this size
                dist.all_reduce(buf, group=mine)
            out["allreduce"][n][size] = _timed(lambda: dist.all_reduce(buf, group=mine), reps)
    peer = rank ^ 1 if (rank ^ 1) < world_size else rank
    for size in SIZES:
        buf = torch.ones(size)

        def ping():
            if rank < peer:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            elif rank > peer:
                dist.recv(buf, peer)
                dist.send(buf, peer)
        ping()
        out["p2p"][size] = _timed(ping, reps) / 2                          # one way
    return out


def calibrate(ranks: int = 4, config: GPTConfig = TINY, reps: int = 5) -> model.Machine:
    """Measure on ``ranks`` gloo ranks and fit :class:`minipar.cost.calibrate.Machine`."""
    from minipar.launch import run

    return fit_machine(run(measure_on_rank, ranks, config, BATCHES, reps, backend="gloo"),
                       ranks, config)


def fit_machine(per: list[dict], ranks: int, config: GPTConfig = TINY) -> model.Machine:
    """:class:`minipar.cost.calibrate.Machine` from every rank's :func:`measure_on_rank`
    (the slowest rank per point: a layout waits for it)."""
    bs = sorted(per[0]["layer"])
    secs = [max(r["layer"][b] for r in per) for b in bs]                # slowest rank
    c0, rate = model.fit_compute([model.layer_flops(b, config.s, config.h) for b in bs], secs)
    links = {}
    for n in per[0]["allreduce"]:
        sizes = sorted(per[0]["allreduce"][n])
        ts = [max(r["allreduce"][n][s] for r in per) for s in sizes]
        links[n] = model.fit_link([4 * s for s in sizes], ts, n)
    sizes = sorted(per[0]["p2p"])
    a, c = model.fit_line([4 * s for s in sizes], [max(r["p2p"][s] for r in per) for s in sizes])
    return model.Machine(ranks, c0, rate, links, (max(a, 0.0), 1.0 / c), 4)


def time_layout_on_rank(rank: int, world_size: int, d: int, t: int, p: int,
                        config: GPTConfig = TINY, batch: int = BATCH, b: int = MICRO,
                        steps: int = 3) -> float:
    """The fastest step's seconds (as :func:`_timed`) of the 3D GPT (:mod:`minipar.three_d.train`'s
    composition: SP inside TP, 1F1B, ZeRO-1) on this rank, after one warm-up step."""
    from minipar.data_parallel.zero import ZeRO
    from minipar.pipeline_parallel.executor import PipelineExecutor
    from minipar.pipeline_parallel.schedules import schedule
    from minipar.model import token_batches
    from minipar.tensor_parallel.block import allreduce_sequence_parallel_grads

    from .grid import RankGrid, new_groups
    from .train import stage_3d

    grid = RankGrid(d, t, p)
    groups = new_groups(grid)
    c = grid.coord(rank)
    m = batch // (d * b)
    rows = slice(c.dp * m * b, (c.dp + 1) * m * b)
    torch.manual_seed(0)
    stage = stage_3d(GPT(config), c.pp, p, groups.tp)             # SP inside TP
    zero = ZeRO(stage, 1, lambda ps: torch.optim.Adam(ps, lr=1e-3), group=groups.dp)
    ex = PipelineExecutor({c.pp: stage}, p, c.pp, p, m, group=groups.pp,
                          embedding_group=groups.embedding)
    actions = schedule("1f1b", p, m)[c.pp]
    msg = (b, config.s // t, config.h)                              # (b, s/t, h)
    times = []
    for x, y in token_batches(steps + 1, batch, config):
        dist.barrier()
        t0 = time.perf_counter()
        zero.zero_grad()
        ex.run(actions, list(x[rows].chunk(m)), list(y[rows].chunk(m)), msg, torch.float32)
        allreduce_sequence_parallel_grads(stage, groups.tp)
        zero.step()
        times.append(time.perf_counter() - t0)
    return min(times[1:])


def _bench_on_rank(rank: int, world_size: int, config: GPTConfig, batch: int, b: int,
                   steps: int, reps: int, layouts: list[tuple[int, int, int]]) -> dict:
    """One launch does it all (each launch of fresh ranks costs more CPU than the measurements
    it would hold): the calibration, then every layout's fastest step."""
    return {"machine": measure_on_rank(rank, world_size, config, BATCHES, reps),
            "steps": [time_layout_on_rank(rank, world_size, d, t, p, config, batch, b, steps)
                      for d, t, p in layouts]}


def bench(ranks: int = 4, config: GPTConfig = TINY, batch: int = BATCH, b: int = MICRO,
          steps: int = 3, reps: int = 5) -> dict:
    """Calibrate, predict every (d, t, p) of ``ranks``, run each, compare (Spearman of the step
    times, error per layout), all in one launch of ``ranks`` gloo ranks."""
    from minipar.launch import run

    def predict(mach, d, t, p):
        return model.predict_tiny_step(mach, config.L, config.h, config.a, config.s, config.V,
                                       batch, d=d, t=t, p=p, b=b)
    rough = model.Machine(ranks, 0.0, 1.0, {n: (0.0, 1.0) for n in range(2, ranks + 1)},
                          (0.0, 1.0), 4)                          # only the rules matter here
    valid = []
    for d, t, p in model.layouts(ranks):
        try:
            predict(rough, d, t, p)
        except ValueError:
            continue                                              # breaks a divisibility rule
        valid.append((d, t, p))
    per = run(_bench_on_rank, ranks, config, batch, b, steps, reps, valid, backend="gloo")
    mach = fit_machine([r["machine"] for r in per], ranks, config)
    rows = []
    for i, (d, t, p) in enumerate(valid):
        pred = predict(mach, d, t, p)
        got = max(r["steps"][i] for r in per)
        rows.append({"d": d, "t": t, "p": p, "predicted_s": pred.step_s, "measured_s": got,
                     "error": 100 * (pred.step_s / got - 1), "prediction": asdict(pred)})
    rho = model.spearman([r["predicted_s"] for r in rows], [r["measured_s"] for r in rows])
    return {"ranks": ranks, "config": asdict(config), "batch": batch, "micro_batch": b,
            "machine": {"layer_overhead_s": mach.layer_overhead, "flop_rate": mach.flop_rate,
                        "links": {str(n): {"alpha": a, "bandwidth": bw}
                                  for n, (a, bw) in mach.links.items()},
                        "p2p": {"alpha": mach.p2p[0], "bandwidth": mach.p2p[1]}},
            "layouts": rows, "spearman": rho,
            "max_abs_error": max(abs(r["error"]) for r in rows)}
