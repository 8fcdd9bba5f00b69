"""``minipar bench tensor_parallel`` (alias ``tp``): our tensor-parallel MLP block against
DTensor's (``parallelize_module`` with ColwiseParallel / RowwiseParallel) on the same shapes,
forward + backward, interleaved round by round on ``--ranks`` ranks; a round's time is a
rank's median over ``--steps``, a variant's the median over rounds of the slowest rank.
``ours_to_dtensor``: our throughput over DTensor's (1.0 = as fast; the course's target is >=
0.9); also the largest differences of loss and gradients between the two (float64, same
weights). A benchmark reports, it never asserts: ranks share this machine's cores, so numbers
are noisy.
"""

from __future__ import annotations

from minipar.errors import InputError
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
    largest_at_most,
)


def bench(
    ranks: int, h: int, b: int, s: int, steps: int, rounds: int, backend: str = "gloo"
) -> dict:
    from minipar.runtime.launch import run  # noqa: PLC0415 (lazy: launcher)
    from minipar.tensor_parallel.dtensor import compare_on_rank, time_on_rank  # noqa: PLC0415 (lazy: torch)

    per_rank = run(time_on_rank, ranks, h, b, s, steps, rounds, backend=backend, timeout=600)
    t = {k: slowest(per_rank, k) for k in per_rank[0]}
    diffs = run(compare_on_rank, ranks, backend=backend, timeout=300)
    return {
        "ranks": ranks,
        "backend": backend,
        "h": h,
        "b": b,
        "s": s,
        "dtype": "float32",
        "step_seconds": t,
        "tokens_per_second": {k: b * s / v for k, v in t.items()},
        "ours_to_dtensor": t["dtensor"] / t["ours"],
        "max_difference_float64": {k: max(d[k] for d in diffs) for k in diffs[0]},
    }


def _show(r: dict) -> None:
    print(
        f"tensor-parallel MLP block on {r['ranks']} {r['backend']} ranks: h = {r['h']}, b = {r['b']}, "
        f"s = {r['s']}, float32, forward + backward"
    )
    for k, v in r["step_seconds"].items():
        print(f"{k:<9}{v * 1e3:>9.2f} ms{r['tokens_per_second'][k]:>12.0f} tokens/s")
    print(f"ours_to_dtensor = {r['ours_to_dtensor']:.2f} (our throughput / DTensor's)")
    worst = max(r["max_difference_float64"].values())
    print(
        f"largest difference of loss and gradients, ours vs DTensor and vs one process "
        f"(float64): {worst:.1e}"
    )


def _check(args) -> None:
    """The arguments' rules (run before torch is imported: a typo costs no import)."""
    check(
        args,
        at_least=dict(ranks=2, hidden=1, batch=1, seq=1, steps=1, rounds=1),
        at_most=dict(ranks=MAX_RANKS),
    )
    if (4 * args.hidden) % args.ranks:
        raise InputError(f"4·hidden ({4 * args.hidden}) must be divisible by t ({args.ranks})")


def _main(args) -> int:
    _check(args)
    chosen = backend(args, args.ranks)
    return emit(
        args,
        lambda: bench(
            args.ranks, args.hidden, args.batch, args.seq, args.steps, args.rounds, chosen
        ),
        _show,
    )


def add_bench_parser(bench_sub) -> None:
    p = bench_sub.add_parser(
        "tensor_parallel",
        aliases=["tp"],
        help="time our tensor-parallel MLP block against DTensor's",
    )
    add_common(p, ranks=2, ranks_help="ranks = t")
    add_backend(p, "gloo", "the chapter compares float64 results with a CPU reference")
    add_options(
        p,
        ("--hidden", 512, "hidden size h (default 512)"),
        ("--batch", 4, "micro-batch b (default 4)"),
        ("--seq", 128, "sequence length s (default 128)"),
        ("--steps", 5, "timed steps per round (default 5)"),
        ("--rounds", 3, "interleaved rounds (default 3)"),
    )
    p.set_defaults(func=_main, precheck=_check)


GPU_CHECK_MIN_GPUS = 2  # t >= 2, one GPU per NCCL rank


def gpu_check_args(gpus: int) -> list[str] | None:
    """The GPU check's run (:mod:`minipar.bench.cli`): h = 512 on t = 2, 4 or 8 NCCL ranks, the
    most that ``gpus`` GPUs hold (each divides 4·h = 2048)."""
    t = largest_at_most((2, 4, 8), gpus)
    return gpu_check_command(__name__, "--ranks", str(t), "--hidden", "512")


def gpu_check_figures(result: dict) -> dict:
    """The GPU check's figures (:mod:`minipar.bench.cli`): the backend, the ranks, DTensor's
    step time over ours, and the largest float64 difference from one process."""
    return {
        "backend": result["backend"],
        "ranks": result["ranks"],
        "ours_to_dtensor": result["ours_to_dtensor"],
        "max_difference_float64": max(result["max_difference_float64"].values()),
    }
