"""``minipar bench three_d``: calibrate this machine (compute rate and per-layer cost, α-β per
group size), predict the tiny 3D GPT's step time under every (d, t, p) layout of ``--ranks``
(:mod:`minipar.cost.validation.calibrate`), run each layout and report predicted against
measured: the error per layout and Spearman's rank correlation. It never asserts.
"""

from __future__ import annotations

from .common import MAX_RANKS, add_common, check, emit


def _show(r: dict) -> None:
    m = r["machine"]
    print(
        f"3D GPT {r['config']} on {r['ranks']} gloo ranks, B = {r['batch']}, b = {r['micro_batch']}"
    )
    line = (
        f"calibrated: t = 1 layer {m['flop_rate'] / 1e9:.2f} GFLOP/s + "
        f"{m['layer_overhead_s'] * 1e3:.2f} ms (CPU)"
    )
    if "cores" in m:
        line += (
            f"; the ranks got {m['cores']:.2f} of {m['usable_cpus']} cores (share "
            f"{m['share']:.2f}); ends {m['ends']['s'] * 1e3:.2f} ms + "
            f"{m['ends']['s_per_sequence'] * 1e3:.2f} ms per sequence (CPU)"
        )
    print(line)
    if m.get("links"):
        print(
            "  "
            + "; ".join(
                f"{k}: {v['alpha'] * 1e6:.0f} µs + bytes / {v['bandwidth'] / 1e9:.2f} GB/s"
                for k, v in m["links"].items()
            )
        )
    parts = ("compute_s", "tp_s", "pp_s", "dp_s", "bubble_s", "optimizer_s")
    print(
        f"{'d':>2} {'t':>2} {'p':>2} {'predicted':>11} {'measured':>11} {'error':>7}   "
        "compute / tp / pp / dp / bubble / optimizer; critical path, cores' bound (ms)"
    )
    for x in r["layouts"]:
        row = (
            f"{x['d']:>2} {x['t']:>2} {x['p']:>2} {x['predicted_s'] * 1e3:>8.1f} ms "
            f"{x['measured_s'] * 1e3:>8.1f} ms {x['error']:>+6.0f}%"
        )
        q = x.get("prediction", {})
        if all(k in q for k in parts + ("critical_s", "cores_s")):
            row += (
                "   "
                + " / ".join(f"{q[k] * 1e3:.1f}" for k in parts)
                + f"; {q['critical_s'] * 1e3:.1f}, {q['cores_s'] * 1e3:.1f}"
            )
        print(row)
    print(f"Spearman (predicted vs measured step time): {r['spearman']:.2f}")


def _check(args) -> None:
    """The arguments' rules (run before torch is imported: a typo costs no import)."""
    check(args, at_least=dict(ranks=2, steps=1), at_most=dict(ranks=MAX_RANKS))


def _main(args) -> int:
    from minipar.three_d.calibrate import bench  # noqa: PLC0415 (lazy: torch)

    _check(args)
    return emit(args, lambda: bench(args.ranks, steps=args.steps), _show)


def add_bench_parser(bench_sub) -> None:
    p = bench_sub.add_parser(
        "three_d", aliases=["3d"], help="calibrate, predict every (d, t, p) layout, run, compare"
    )
    add_common(p, 4, "ranks (every (d, t, p) with d·t·p = ranks is run)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per layout (default 3)")
    p.set_defaults(func=_main, precheck=_check)


def gpu_check_args(gpus: int) -> list[str] | None:
    """Not part of the GPU check (:mod:`minipar.bench.cli`): it calibrates and runs the 3D GPT
    on gloo ranks and the CPU (no ``--backend``), so a run there would spend minutes of the
    check's budget and prove nothing about NCCL or the GPU. (Its notebook's NCCL group check
    is in the check: ``Chapter.gpu``.)"""
    return None
