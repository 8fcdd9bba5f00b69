"""Closing the loop on the reader's machine: measure what the tiny 3D GPT is made of (one
layer, its sequence-parallel block per TP degree, the embedding and head, Adam, the collectives
per group size, a send/recv) and the cores the ranks get, predict its step time under every
(d, t, p) layout of the ranks (:mod:`minipar.cost.validation.calibrate`), then run each layout and
compare.

Everything runs on gloo ranks of this machine through :func:`minipar.runtime.launch.run`; ranks share the
cores, so every measurement is taken with all ranks busy at once, as in a real layout. A
benchmark reports, it never asserts a speed (``minipar bench three_d``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace

import torch
import torch.distributed as dist

from minipar.cost.validation import calibrate as model
from minipar.data_parallel.zero import ZeRO
from minipar.model import GPT, GPTConfig, Layer, token_batches
from minipar.pipeline_parallel.executor import PipelineExecutor
from minipar.pipeline_parallel.schedules import schedule
from minipar.runtime.launch import run
from minipar.runtime.pool import usable_cpus
from minipar.tensor_parallel.block import ParallelBlock, allreduce_sequence_parallel_grads

from .grid import RankGrid, new_groups

TINY = GPTConfig(L=4, h=128, a=4, s=32, V=64, dropout=0.0)  # a, s divisible by t = 1, 2, 4
BATCH, MICRO = 16, 2  # B sequences per step, b
SIZES = (2**11, 2**13, 2**16, 2**20)  # collective sizes, elements (whole)
BATCHES = (1, 2, 4, 8)  # micro-batches of the layer fit
OPT_SIZES = (2**14, 2**20)  # Adam step sizes, elements


def _burst(fn, reps: int, k: int | None = None, min_s: float | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds per call of ``fn``, the median of ``reps`` bursts that all ranks start
    together: ``k`` calls (``fn`` communicates: every rank must make as many), or as many as fill
    ``min_s`` seconds (compute only; default 8 ms per rank). A burst, because a layout pays the
    mean of hundreds of calls in a row, which the luckiest call on a shared machine
    underestimates several times over (4 ranks on 2 cores, 32 KiB all-gathers: fastest 0.37 ms,
    mean 2.7 ms); long, because a burst shorter than the scheduler's time slice runs alone on a
    core (a 5 ms burst of 1.2 ms layers: wall = CPU with 4 ranks on 2 cores); the median, because
    the fastest burst finds quieter moments than a whole step of :func:`time_layout_on_rank`
    does. CPU is this process's, every thread (gloo's included). One untimed call first warms
    up (every rank makes it: it may communicate)."""
    fn()
    got = []
    min_s = 0.008 * dist.get_world_size() if min_s is None else min_s
    for _ in range(reps):
        dist.barrier()
        w0, c0, calls = time.perf_counter(), time.process_time(), 0
        # at least one call: a rank descheduled past min_s before its first check made none
        while calls < k if k else (calls == 0 or time.perf_counter() - w0 < min_s):
            fn()
            calls += 1
        got.append(((time.perf_counter() - w0) / calls, (time.process_time() - c0) / calls))
    got.sort()
    mid = got[(len(got) - 1) // 2 : len(got) // 2 + 1]  # the median burst
    return tuple(sum(v[i] for v in mid) / len(mid) for i in (0, 1))


def _layer_and_stage(out: dict, cfg: GPTConfig, layer, batches, reps: int) -> None:
    """One layer's forward + backward, and one micro-batch through a one-stage executor, per b."""
    from .train import Stage3D  # noqa: PLC0415 (lazy: dtensor)

    world_size, rank = dist.get_world_size(), dist.get_rank()
    solo = [dist.new_group([r]) for r in range(world_size)][rank]  # every rank alone
    stage = Stage3D(GPT(replace(cfg, L=1)), 0, 1, solo)
    ex, acts = PipelineExecutor({0: stage}, 1, 0, 1, 1, group=solo), schedule("1f1b", 1, 1)[0]
    for b in batches:
        x = torch.randn(b, cfg.s, cfg.h, requires_grad=True)  # (b, s, h)
        tokens = torch.randint(0, cfg.V, (b, cfg.s + 1))  # (b, s + 1)
        micro = ([tokens[:, :-1]], [tokens[:, 1:]], (b, cfg.s, cfg.h), torch.float32)
        out["layer"][b] = _burst(lambda: layer(x).sum().backward(), reps)
        out["stage"][b] = _burst(lambda: ex.run(acts, *micro), reps)  # one micro-batch


def _blocks(out: dict, cfg: GPTConfig, layer, batches, reps: int) -> None:
    """The sequence-parallel block per TP degree t (every group of t consecutive ranks) and b."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    degrees = [k for k in range(1, world_size + 1) if world_size % k == cfg.a % k == cfg.s % k == 0]
    for t in degrees:
        groups = [dist.new_group(list(range(g, g + t))) for g in range(0, world_size, t)]
        block = ParallelBlock.from_full(layer, groups[rank // t], sequence_parallel=True)
        for b in batches[:3]:  # a line in b: 3 points do
            x = torch.randn(b, cfg.s // t, cfg.h, requires_grad=True)  # (b, s/t, h)
            fwd_bwd = lambda: block(x).sum().backward()
            out["block"].setdefault(t, {})[b] = _burst(fwd_bwd, reps, None if t == 1 else 3)


def _adam(out: dict, reps: int) -> None:
    """An Adam step per number of elements."""
    for numel in OPT_SIZES:
        w = torch.nn.Parameter(torch.zeros(numel))
        w.grad = torch.ones(numel)
        opt = torch.optim.Adam([w], lr=1e-3)
        out["adam"][numel] = _burst(opt.step, reps, 3)


def _collectives(out: dict, reps: int) -> None:
    """All-gather and reduce-scatter per group size n (every group of n consecutive ranks busy
    at once) and size."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    for n in [k for k in range(2, world_size + 1) if world_size % k == 0]:
        groups = [dist.new_group(list(range(g, g + n))) for g in range(0, world_size, n)]
        mine = groups[rank // n]
        for size in SIZES:
            whole, shard = torch.ones(size), torch.ones(size // n)  # (N,), (N/n,)
            calls = {
                "all-gather": lambda: dist.all_gather_single(whole, shard, group=mine),
                "reduce-scatter": lambda: dist.reduce_scatter_single(shard, whole, group=mine),
            }
            for op, fn in calls.items():
                out[op].setdefault(n, {})[size] = _burst(fn, reps, 8 if size < 2**18 else 2)


def _p2p(out: dict, reps: int) -> None:
    """A one-way send/recv between rank pairs (2i, 2i + 1), per size."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
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

        w, c = _burst(ping, reps, 8 if size < 2**18 else 2)
        out["p2p"][size] = (w / 2, c / 2)  # one way


def measure_on_rank(
    rank: int, world_size: int, config: GPTConfig = TINY, batches=BATCHES, reps: int = 3
) -> dict:
    """Per rank, all ranks at once, (wall, CPU) seconds per call (:func:`_burst`) of each part:
    the layer and one micro-batch through a one-stage executor (``"stage"``: embedding, layer,
    final layer norm, tied head, cross-entropy and the executor's own work) per b, the
    sequence-parallel block per t and b, Adam, the collectives per group size and size (the
    ``all_gather_single`` and ``reduce_scatter_single`` of sequence parallelism and ZeRO), a
    send/recv."""
    torch.manual_seed(0)
    cfg = replace(config, dropout=0.0)
    layer = Layer(cfg)
    keys = ("layer", "stage", "block", "adam", "all-gather", "reduce-scatter", "p2p")
    out = {k: {} for k in keys}
    _layer_and_stage(out, cfg, layer, batches, reps)
    _blocks(out, cfg, layer, batches, reps)
    _adam(out, reps)
    _collectives(out, reps)
    _p2p(out, reps)
    return out


def _slowest(per: list[dict], key: str, *path, i: int = 0) -> tuple[list, list]:
    """(sizes, seconds) of one measurement, the slowest rank per size (a layout waits for it);
    ``i`` 0 for wall, 1 for CPU seconds."""
    tables = [r[key] for r in per]
    for k in path:
        tables = [t[k] for t in tables]
    sizes = sorted(tables[0])
    return sizes, [max(t[x][i] for t in tables) for x in sizes]


def fit_machine(
    per: list[dict], ranks: int, config: GPTConfig = TINY, cores: float | None = None
) -> model.Machine:
    """:class:`minipar.cost.validation.calibrate.Machine` from every rank's :func:`measure_on_rank`:
    compute terms from CPU seconds (the cores they share are the model's business,
    ``cores``: default what the ranks got while all of them computed (every burst without
    communication: layer, stage, t = 1 block),
    :func:`~minipar.cost.validation.calibrate.effective_cores`), communication terms from wall seconds
    with every group busy at once (the slowest rank per point)."""
    bs, secs = _slowest(per, "layer", i=1)
    c0, rate = model.fit_compute([model.layer_flops(b, config.s, config.h) for b in bs], secs)
    bs1, stage1 = _slowest(per, "stage", i=1)
    block1 = dict(zip(*_slowest(per, "block", 1, i=1)))
    ends = model.fit_line(
        [b for b in bs1 if b in block1],  # the stage less its one layer
        [max(s1 - block1[b], 1e-9) for b, s1 in zip(bs1, stage1) if b in block1],
    )
    adam = model.fit_line(*_slowest(per, "adam", i=1))
    layers = {t: model.fit_line(*_slowest(per, "block", t)) for t in per[0]["block"]}
    ops = {
        (op, n): model.fit_op([4 * x for x in _slowest(per, op, n)[0]], _slowest(per, op, n)[1])
        for op in ("all-gather", "reduce-scatter")
        for n in per[0][op]
    }
    sizes, ts = _slowest(per, "p2p")
    p2p = model.fit_op([4 * x for x in sizes], ts)
    if cores is None:  # what the ranks got while every one computed
        busy = [
            [*r["layer"].values(), *r["stage"].values(), *r["block"][1].values()] for r in per
        ]  # every burst with no communication in it
        cores = model.effective_cores(
            ranks,
            [[v[1] for v in r] for r in busy],
            [[v[0] for v in r] for r in busy],
            usable_cpus(),
        )
    return model.Machine(
        ranks, c0, rate, {}, p2p, 4, cores=cores, ends=ends, optimizer=adam, ops=ops, layers=layers
    )


def time_layout_on_rank(
    rank: int,
    world_size: int,
    grid: RankGrid,
    config: GPTConfig = TINY,
    batch: int = BATCH,
    b: int = MICRO,
    steps: int = 3,
) -> float:
    """The fastest of ``steps`` steps' seconds of the 3D GPT (:mod:`minipar.three_d.train`'s
    composition: SP inside TP, 1F1B, ZeRO-1) on this rank, after one warm-up step."""
    from .train import Stage3D  # noqa: PLC0415 (lazy: dtensor)

    groups = new_groups(grid)
    c = grid.coord(rank)
    d, t, p = grid.d, grid.t, grid.p
    m = batch // (d * b)
    rows = slice(c.dp * m * b, (c.dp + 1) * m * b)
    torch.manual_seed(0)
    stage = Stage3D(GPT(config), c.pp, p, groups.tp)  # SP inside TP
    zero = ZeRO(stage, 1, lambda ps: torch.optim.Adam(ps, lr=1e-3), group=groups.dp)
    ex = PipelineExecutor(
        {c.pp: stage}, p, c.pp, p, m, group=groups.pp, embedding_group=groups.embedding
    )
    actions = schedule("1f1b", p, m)[c.pp]
    msg = (b, config.s // t, config.h)  # (b, s/t, h)
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


def _bench_on_rank(
    rank: int,
    world_size: int,
    config: GPTConfig,
    batch: int,
    b: int,
    steps: int,
    reps: int,
    layouts: list[tuple[int, int, int]],
) -> dict:
    """One launch (fresh ranks cost more CPU than the measurements): every layout's fastest step,
    in two passes when ``steps`` > 1 (the first half of the steps in order, the rest in reverse)
    with the calibration between them, so on a shared machine whose load drifts no layout is
    timed at one moment only and the calibration sits amid the runs it predicts."""

    def timed(order, k):
        return {
            i: time_layout_on_rank(rank, world_size, RankGrid(*layouts[i]), config, batch, b, k)
            for i in order
        }

    first = (steps + 1) // 2
    got = timed(range(len(layouts)), first)
    machine = measure_on_rank(rank, world_size, config, BATCHES, reps)
    if steps > first:
        again = timed(reversed(range(len(layouts))), steps - first)
        got = {i: min(got[i], again[i]) for i in got}
    return {"machine": machine, "steps": [got[i] for i in range(len(layouts))]}


def bench(
    ranks: int = 4,
    config: GPTConfig = TINY,
    batch: int = BATCH,
    b: int = MICRO,
    steps: int = 3,
    reps: int = 5,
) -> dict:
    """Calibrate, predict every (d, t, p) of ``ranks``, run each, compare (Spearman of the step
    times, error per layout), all in one launch of ``ranks`` gloo ranks."""

    shape = model.TinyShape(config.L, config.h, config.a, config.s, config.V, batch)

    def predict(mach, d, t, p):
        return model.predict_tiny_step(mach, shape, d=d, t=t, p=p, b=b)

    rough = model.Machine(
        ranks, 0.0, 1.0, {n: (0.0, 1.0) for n in range(2, ranks + 1)}, (0.0, 1.0), 4
    )  # only the rules matter here
    valid = []
    for d, t, p in model.layouts(ranks):
        try:
            predict(rough, d, t, p)
        except ValueError:
            continue  # breaks a divisibility rule
        valid.append((d, t, p))
    per = run(_bench_on_rank, ranks, config, batch, b, steps, reps, valid, backend="gloo")
    mach = fit_machine([r["machine"] for r in per], ranks, config)
    rows = []
    for i, (d, t, p) in enumerate(valid):
        pred = predict(mach, d, t, p)
        got = max(r["steps"][i] for r in per)
        rows.append(
            {
                "d": d,
                "t": t,
                "p": p,
                "predicted_s": pred.step_s,
                "measured_s": got,
                "error": 100 * (pred.step_s / got - 1),
                "prediction": asdict(pred),
            }
        )
    rho = model.spearman([r["predicted_s"] for r in rows], [r["measured_s"] for r in rows])
    return {
        "ranks": ranks,
        "config": asdict(config),
        "batch": batch,
        "micro_batch": b,
        "machine": {
            "layer_overhead_s": mach.layer_overhead,
            "flop_rate": mach.flop_rate,
            "cores": mach.cores,
            "share": mach.share,
            "usable_cpus": usable_cpus(),
            "ends": {"s": mach.ends[0], "s_per_sequence": mach.ends[1]},
            "optimizer": {"s": mach.optimizer[0], "s_per_element": mach.optimizer[1]},
            "links": {
                f"{op} n={n}": {"alpha": a, "bandwidth": bw}
                for (op, n), (a, bw) in mach.ops.items()
            },
            "p2p": {"alpha": mach.p2p[0], "bandwidth": mach.p2p[1]},
        },
        "layouts": rows,
        "spearman": rho,
        "calibration": [r["machine"] for r in per],
        "max_abs_error": max(abs(r["error"]) for r in rows),
    }
