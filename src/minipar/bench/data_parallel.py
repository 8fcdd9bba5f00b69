"""``minipar bench data_parallel`` (alias ``dp``): naive, bucketed-with-overlap and PyTorch DDP
data parallelism on the same MLP (``--depth`` Linear(width, width)+Tanh layers), per-rank batch
and bucket cap, interleaved round by round on ``--ranks`` ranks (``--backend``). A variant's
step time is the median over rounds of the slowest rank; "compute" is the same step with no
communication (the ideal). Throughput is samples per second over all ranks; ``*_to_ddp`` is our
throughput over DDP's (1.0 = as fast). A benchmark reports, it never asserts: ranks share this
machine's cores, so numbers are noisy.
"""

from __future__ import annotations

import functools

from minipar.runtime.timing import slowest

from .common import (
    MAX_RANKS,
    add_backend,
    add_common,
    add_options,
    backend,
    check,
    emit,
    gpu_check_command,
)

VARIANTS = ("compute", "naive", "bucketed", "ddp")


def bench(
    ranks: int,
    steps: int,
    rounds: int,
    width: int,
    depth: int,
    batch: int,
    bucket_mb: float,
    backend: str = "auto",
) -> dict:
    from minipar.data_parallel import timing  # noqa: PLC0415 (lazy: torch)
    from minipar.data_parallel.models import mlp_params  # noqa: PLC0415 (lazy: torch)

    load = timing.Workload(width, depth, batch, steps, rounds)
    per_rank = timing.run_on_ranks(
        functools.partial(timing.time_variants_on_rank, load=load, bucket_cap_mb=bucket_mb),
        ranks,
        list(VARIANTS),
        backend=backend,
    )
    t = {v: slowest(per_rank, v) for v in VARIANTS}  # slowest rank, median round
    out = {
        "ranks": ranks,
        "backend": backend,
        "params": mlp_params(width, depth),
        "batch_per_rank": batch,
        "bucket_cap_mb": bucket_mb,
        "step_seconds": t,
        "samples_per_second": {v: ranks * batch / s for v, s in t.items()},
    }
    out["naive_to_ddp"] = t["ddp"] / t["naive"]
    out["bucketed_to_ddp"] = t["ddp"] / t["bucketed"]
    out["ddp_to_compute"] = t["compute"] / t["ddp"]
    return out


def _show(r: dict) -> None:
    print(
        f"data parallel on {r['ranks']} {r['backend']} ranks: MLP Ψ = {r['params']:,} "
        f"({r['params'] * 4 / 2**20:.1f} MiB of fp32 gradients), batch {r['batch_per_rank']} "
        f"per rank, buckets {r['bucket_cap_mb']:g} MiB"
    )
    print(f"{'variant':<10}{'step (ms)':>11}{'samples/s':>11}{'vs DDP':>8}")
    for v in VARIANTS:
        s = r["step_seconds"][v]
        print(
            f"{v:<10}{s * 1e3:>11.1f}{r['samples_per_second'][v]:>11.0f}"
            f"{r['step_seconds']['ddp'] / s:>8.2f}"
        )
    print("'compute' communicates nothing: the ceiling. Ratios > 1 are faster than DDP.")


def _check(args) -> None:
    """The arguments' rules (run before torch is imported: a typo costs no import)."""
    check(
        args,
        at_least=dict(ranks=2, steps=1, rounds=1, width=1, depth=1, batch=1),
        at_most=dict(ranks=MAX_RANKS),
        positive=("bucket_mb",),
    )


def _main(args) -> int:
    _check(args)
    chosen = backend(args, args.ranks)
    opts = {
        k: getattr(args, k) for k in ("steps", "rounds", "width", "depth", "batch", "bucket_mb")
    }
    return emit(args, lambda: bench(args.ranks, **opts, backend=chosen), _show)


def add_bench_parser(bench_sub) -> None:
    p = bench_sub.add_parser(
        "data_parallel", aliases=["dp"], help="time naive, bucketed and DDP data parallelism"
    )
    add_common(p, ranks=4, ranks_help="ranks")
    add_backend(p, "auto", "the timings are the chapter's NCCL measurement on GPUs")
    add_options(
        p,
        ("--steps", 5, "timed steps per round (default 5)"),
        ("--rounds", 3, "interleaved rounds (default 3)"),
        ("--width", 512, "MLP width (default 512)"),
        ("--depth", 8, "MLP layers (default 8)"),
        ("--batch", 32, "samples per rank (default 32)"),
        ("--bucket-mb", 1.0, "bucket cap in MiB, ours and DDP's (default 1)"),
    )
    p.set_defaults(func=_main, precheck=_check)


GPU_CHECK_MIN_GPUS = 2  # data parallelism needs two ranks, one GPU per NCCL rank


def gpu_check_args(gpus: int) -> list[str] | None:
    """The GPU check's run (:mod:`minipar.bench.cli`): one NCCL rank per GPU (at least 2)."""
    return gpu_check_command(__name__, "--ranks", str(max(gpus, 2)))


def gpu_check_figures(result: dict) -> dict:
    """The GPU check's figures (:mod:`minipar.bench.cli`): the backend, the ranks and the
    step-time ratios (naive and bucketed against DDP, DDP against compute alone)."""
    return {
        k: result[k]
        for k in ("backend", "ranks", "naive_to_ddp", "bucketed_to_ddp", "ddp_to_compute")
    }
