"""``minipar bench pipeline_parallel`` (alias ``pp``): a schedule's bubble measured on ranks.

Each stage waits a fixed time per action (t_F forward, t_B input gradient, t_W weight
gradient; see :mod:`minipar.pipeline_parallel.timed`), so ranks do not compete for this
machine's cores and the step's idle time is the schedule's bubble plus send/receive overhead.
``measured_bubble`` is the median over steps of the mean over ranks of the idle fraction of the
step; ``model_bubble`` the closed form ((p−1)/(v·m+p−1) for gpipe, 1f1b, interleaved; ZB-H1's
(p−1)(t_F+t_B−t_W) idle for zb-h1); ``hop_latency`` the median time from a sender's end to a
waiting receiver's start, and ``model_bubble_with_latency`` the simulator's bubble when every
message takes that long (what the measurement should approach on a busy machine). ``--layers gpt`` runs real GPT layers instead (then the
ranks share the cores and the number is this machine's, not the schedule's).

A benchmark reports, it never asserts.
"""
from __future__ import annotations

import json


def bench(schedule: str, p: int, m: int, v: int = 1, t_f: float = 0.05, t_b: float = 0.05,
          t_w: float = 0.05, steps: int = 3, layers: str = "timed") -> dict:
    from minipar.launch import run
    from minipar.pipeline_parallel.model_bubble import bubble_fraction
    from minipar.pipeline_parallel.schedules import schedule as make
    from minipar.pipeline_parallel.simulate import simulate
    from minipar.pipeline_parallel.timed import bench_rank, hop_latency, measured_bubble

    make(schedule, p, m, v)   # validates the arguments before any rank starts
    per_rank = run(bench_rank, p, schedule, m, v, t_f, t_b, t_w, steps, layers,
                   backend="gloo", timeout=600)
    measured, timeline = measured_bubble(per_rank)
    span = max(e for *_, e in timeline)
    hop = hop_latency(timeline, p)
    sim = simulate(make(schedule, p, m, v), m, t_f, t_b, t_w, comm=hop)
    return {"schedule": schedule, "p": p, "m": m, "v": v, "layers": layers,
            "steps": steps,
            **({"t_forward": t_f, "t_backward": t_b, "t_weight": t_w} if layers == "timed"
               else {}),
            "measured_bubble": measured,
            "model_bubble": bubble_fraction(schedule, p, m, v, t_f, t_b, t_w),
            "step_seconds": span,
            "hop_latency": hop, "model_bubble_with_latency": sim.bubble,
            "timeline": [[r, str(a), s, e] for r, a, s, e in timeline]}


def _main(args) -> int:
    from minipar.cli import CliError

    for name, lo in (("pp", 1), ("microbatches", 1), ("chunks", 1), ("steps", 1)):
        if getattr(args, name) < lo:
            raise CliError(f"--{name} ({getattr(args, name)}) must be >= {lo}")
    if args.pp > 16:
        raise CliError(f"--pp ({args.pp}) must be <= 16 on one machine")
    for name in ("t_forward", "t_backward", "t_weight"):
        if getattr(args, name) < 0:
            raise CliError(f"--{name.replace('_', '-')} ({getattr(args, name)}) must be >= 0")
    try:
        r = bench(args.schedule, args.pp, args.microbatches, args.chunks,
                  args.t_forward / 1e3, args.t_backward / 1e3, args.t_weight / 1e3,
                  args.steps, args.layers)
    except ValueError as e:
        raise CliError(str(e)) from None
    if args.json:
        if not args.timeline:
            r.pop("timeline")
        print(json.dumps(r))
        return 0
    times = (f" (t_F, t_B, t_W = {args.t_forward:g}, {args.t_backward:g}, {args.t_weight:g} ms)"
             if r["layers"] == "timed" else "")
    print(f"{r['schedule']} on p = {r['p']} gloo ranks, m = {r['m']}, v = {r['v']}, "
          f"{r['layers']} stages{times}")
    print(f"bubble measured {r['measured_bubble']:.3f}   model {r['model_bubble']:.3f}   "
          f"(fraction of the step, median of {r['steps']} steps)")
    print(f"median hop {r['hop_latency'] * 1e3:.2f} ms; model with that latency "
          f"{r['model_bubble_with_latency']:.3f}")
    return 0


def add_bench_parser(bench_sub) -> None:
    from minipar.pipeline_parallel.schedules import NAMES

    p = bench_sub.add_parser("pipeline_parallel", aliases=["pp"],
                             help="measure a pipeline schedule's bubble on ranks")
    p.add_argument("--schedule", choices=NAMES, default="1f1b", help="schedule (default 1f1b)")
    p.add_argument("--pp", type=int, default=4, help="pipeline ranks p (default 4)")
    p.add_argument("--microbatches", type=int, default=8, help="micro-batches m (default 8)")
    p.add_argument("--chunks", type=int, default=1, help="chunks per rank v (interleaved)")
    p.add_argument("--t-forward", type=float, default=50.0, help="ms per forward (default 50)")
    p.add_argument("--t-backward", type=float, default=50.0,
                   help="ms per input-gradient backward B (default 50)")
    p.add_argument("--t-weight", type=float, default=50.0,
                   help="ms per weight-gradient backward W (default 50)")
    p.add_argument("--steps", type=int, default=5,
                   help="timed steps after a warm-up; the median is reported (default 5)")
    p.add_argument("--layers", choices=("timed", "gpt"), default="timed",
                   help="fixed-duration stages (default) or real GPT layers")
    p.add_argument("--timeline", action="store_true", help="include the timeline in --json")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_main)
