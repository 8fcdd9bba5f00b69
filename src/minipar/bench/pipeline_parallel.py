"""``minipar bench pipeline_parallel`` (alias ``pp``): a schedule's bubble measured on ranks.

Each stage waits a fixed time per action (t_F forward, t_B input gradient, t_W weight gradient;
:mod:`minipar.pipeline_parallel.timed`), so ranks do not compete for cores and the step's idle
time is the schedule's bubble plus send/receive overhead. ``measured_bubble``: the median over
steps of the ranks' mean idle fraction; ``model_bubble``: the closed form ((p−1)/(v·m+p−1) for
gpipe, 1f1b, interleaved; ZB-H1's (p−1)(t_F+t_B−t_W) idle for zb-h1); ``hop_latency``: the
median time from a sender's end to a waiting receiver's start, and
``model_bubble_with_latency`` the simulator's bubble when every message takes that long (what
the measurement should approach on a busy machine). ``--layers gpt`` runs real GPT layers
instead (then the ranks share the cores: the number is this machine's, not the schedule's).
A benchmark reports, it never asserts.
"""

from __future__ import annotations

from minipar.errors import InputError
from minipar.pipeline_parallel.measure import StageTimes
from minipar.pipeline_parallel.measure import measure_bubble as bench
from minipar.pipeline_parallel.schedules import NAMES

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


def _show(r: dict) -> None:
    times = (
        f" (t_F, t_B, t_W = {r['t_forward'] * 1e3:g}, {r['t_backward'] * 1e3:g}, "
        f"{r['t_weight'] * 1e3:g} ms)"
        if r["layers"] == "timed"
        else ""
    )
    print(
        f"{r['schedule']} on p = {r['p']} {r['backend']} ranks, m = {r['m']}, v = {r['v']}, "
        f"{r['layers']} stages{times}"
    )
    print(
        f"bubble measured {r['measured_bubble']:.3f}   model {r['model_bubble']:.3f}   "
        f"(fraction of the step, median of {r['steps']} steps)"
    )
    print(
        f"median hop {r['hop_latency'] * 1e3:.2f} ms; model with that latency "
        f"{r['model_bubble_with_latency']:.3f}"
    )


def _check(args) -> None:
    """The arguments' rules (run before torch is imported: a typo costs no import)."""
    check(
        args,
        at_least=dict(
            ranks=1, microbatches=1, chunks=1, steps=1, t_forward=0, t_backward=0, t_weight=0
        ),
        at_most=dict(ranks=MAX_RANKS),
    )


def _main(args) -> int:
    _check(args)
    chosen = backend(args, args.ranks)

    def measure() -> dict:
        try:
            r = bench(
                args.schedule,
                args.ranks,
                args.microbatches,
                args.chunks,
                StageTimes(args.t_forward / 1e3, args.t_backward / 1e3, args.t_weight / 1e3),
                args.steps,
                args.layers,
                chosen,
            )
        except ValueError as e:  # a schedule's rule (m a multiple of p, ...)
            raise InputError(str(e)) from None
        if not args.timeline:
            r.pop("timeline")
        return r

    return emit(args, measure, _show)


def add_bench_parser(bench_sub) -> None:
    p = bench_sub.add_parser(
        "pipeline_parallel", aliases=["pp"], help="measure a pipeline schedule's bubble on ranks"
    )
    p.add_argument("--schedule", choices=NAMES, default="1f1b", help="schedule (default 1f1b)")
    add_common(p, ranks=4, ranks_help="pipeline ranks p", also="--pp")  # --pp: the chapter's
    add_backend(p, "gloo", "stages only wait a fixed time, nothing needs a GPU")
    add_options(
        p,
        ("--microbatches", 8, "micro-batches m (default 8)"),
        ("--chunks", 1, "chunks per rank v (interleaved)"),
        ("--t-forward", 50.0, "ms per forward (default 50)"),
        ("--t-backward", 50.0, "ms per input-gradient backward B (default 50)"),
        ("--t-weight", 50.0, "ms per weight-gradient backward W (default 50)"),
        ("--steps", 5, "timed steps after a warm-up; the median is reported (default 5)"),
    )
    p.add_argument(
        "--layers",
        choices=("timed", "gpt"),
        default="timed",
        help="fixed-duration stages (default) or real GPT layers",
    )
    p.add_argument("--timeline", action="store_true", help="include the timeline in --json")
    p.set_defaults(func=_main, precheck=_check)


GPU_CHECK_MIN_GPUS = 2  # p >= 2, one GPU per NCCL rank


def gpu_check_args(gpus: int) -> list[str] | None:
    """The GPU check's run (:mod:`minipar.bench.cli`): 1F1B on p = 2, 3 or 4 NCCL ranks, the
    most that ``gpus`` GPUs hold, m = 4p micro-batches of 20 ms stages, 3 steps."""
    p = largest_at_most((2, 3, 4), gpus)
    return gpu_check_command(
        __name__,
        "--schedule",
        "1f1b",
        "--ranks",
        str(p),
        "--microbatches",
        str(4 * p),
        "--t-forward",
        "20",
        "--t-backward",
        "20",
        "--t-weight",
        "20",
        "--steps",
        "3",
    )


def gpu_check_figures(result: dict) -> dict:
    """The GPU check's figures (:mod:`minipar.bench.cli`): the backend, p and m, the measured
    bubble against the model's (without and with the hop latency), and that latency."""
    return {
        k: result[k]
        for k in (
            "backend",
            "p",
            "m",
            "measured_bubble",
            "model_bubble",
            "model_bubble_with_latency",
            "hop_latency",
        )
    }
