"""``minipar bench expert_parallel`` (alias ``ep``): the expert-parallel MoE layer, forward +
backward, with an even and a skewed router, on gloo ranks.

One launch on ``--ranks`` = x gloo ranks, float32: n = ``--tokens`` tokens of width h =
``--hidden`` per rank, E = ``--experts`` experts of FFN width f = ``--ffn`` split E/x per rank,
top-K = ``--top-k``, no capacity limit. "even" is the random router on zero-mean tokens;
"skewed" adds ``--skew`` times a shared direction to expert 0's router row and moves the tokens
along it (:func:`minipar.expert_parallel.experiments.skewed_router`). Reported:

* ``step_seconds``: forward + backward, slowest rank, median over ``--steps`` rounds (both
  routers in every round); the all-to-alls make every rank wait for the most loaded one.
* ``expert_seconds``: each rank's own expert compute on the rows it received, timed one rank
  at a time (the others wait at a barrier, so shared cores do not blur it), the fastest of
  ``--steps`` tries; ``measured_imbalance`` (max over mean) beside ``counted_imbalance`` of the
  rows (:func:`minipar.cost.chapters.expert_parallel.imbalance`).
* bytes of every collective of one forward + backward (:mod:`minipar.runtime.tracer`) against
  :func:`minipar.cost.chapters.expert_parallel.layer_events` from the routed counts (all-to-all
  input size S, nccl-tests' convention).
* the α-β time of the four token all-to-alls
  (:func:`~minipar.cost.chapters.expert_parallel.layer_comm_time`) with α and bandwidth fitted
  in the same launch from gloo all-to-alls (median of a few tries per size; pairwise exchange,
  :func:`minipar.cost.network.collectives.fit_alpha_beta`; α clamped at 0).
* ``kernels``: in this process, one forward + backward of the experts' MLPs on n·x·K rows over
  ``--grouped-experts`` experts (:func:`minipar.expert_parallel.experiments.kernel_seconds`):
  the per-expert loop, one padded batched matmul, and ``torch._grouped_mm`` where this torch
  has it; one thread, fastest of ``--steps`` tries, with the ratios ``loop_over_padded`` and
  ``loop_over_grouped_mm``.

A benchmark reports, it never asserts: ranks share this machine's cores, so read the ratios
measured in one run, not absolute seconds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from statistics import median

from minipar.cost.chapters.expert_parallel import imbalance, layer_comm_time, layer_events
from minipar.errors import InputError
from minipar.runtime.timing import interleaved, one_rank_at_a_time, slowest, timed

from .common import MAX_RANKS, add_common, add_options, check, emit, fit_text

ROUTERS = ("even", "skewed")
FIT_SIZES = (2**12, 2**15, 2**18, 2**20)  # all-to-all buffer S in bytes (float32)


@dataclass(frozen=True)
class EPBench:
    """What the bench runs: ``tokens`` per rank of width ``hidden``, ``experts`` (None: 2 per
    rank) of FFN width ``ffn``, top-``top_k``, the skewed router's ``skew``, ``steps`` timed
    rounds, and ``grouped_experts`` for the kernel comparison (the command's options)."""

    tokens: int = 1024
    experts: int | None = None
    top_k: int = 1
    hidden: int = 128
    ffn: int = 512
    skew: float = 3.0
    steps: int = 5
    grouped_experts: int = 32


def _expert_seconds(layer, rows_per_expert: list[int], reps: int) -> float:
    """Fastest forward + backward of this rank's experts on random rows of the counted sizes."""
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.expert_parallel.moe import expert_mlp  # noqa: PLC0415 (lazy: torch)

    w1 = layer.w1.detach().clone().requires_grad_()  # (E/x, h, f)
    w2 = layer.w2.detach().clone().requires_grad_()  # (E/x, f, h)
    xs = [torch.randn(m, layer.hidden) for m in rows_per_expert]  # (m_e, h) each

    def step():
        for e, x in enumerate(xs):
            if len(x):
                expert_mlp(x, w1[e], w2[e]).sum().backward()
        w1.grad = w2.grad = None

    return min(timed(step, reps, 1, barrier=False))


def bench_on_rank(rank: int, ep: int, load: EPBench) -> dict:
    """This rank's seconds per router and round, its expert time, counts, traced bytes and the
    all-to-all fit's timings."""
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    from minipar.expert_parallel.experiments import _a2a_times_on_rank, skewed_router  # noqa: PLC0415 (lazy: torch)
    from minipar.expert_parallel.layer import ExpertParallelMoE  # noqa: PLC0415 (lazy: torch)
    from minipar.expert_parallel.moe import MoE  # noqa: PLC0415 (lazy: torch)
    from minipar.runtime import tracer  # noqa: PLC0415 (lazy: torch)

    tokens, experts, top_k = load.tokens, load.experts, load.top_k
    hidden, steps = load.hidden, load.steps
    layers, inputs = {}, {}
    for name in ROUTERS:
        torch.manual_seed(0)  # the same full MoE on every rank
        moe = MoE(hidden, load.ffn, experts, top_k)
        if name == "skewed":
            skewed_router(moe, bias=load.skew)
        layers[name] = ExpertParallelMoE.from_full(moe)
        g = torch.Generator().manual_seed(100 + rank)  # this rank's own tokens
        inputs[name] = torch.randn(tokens, hidden, generator=g) + (0.5 if name == "skewed" else 0)

    def step(name):
        x = inputs[name].clone().requires_grad_()  # (n, h)
        layers[name](x).sum().backward()
        layers[name].zero_grad()

    seconds = interleaved({n: functools.partial(step, n) for n in ROUTERS}, steps)
    out = {"seconds": seconds}
    for name in ROUTERS:
        layer = layers[name]
        with tracer.trace() as tr:
            step(name)
        rows = torch.zeros(ep, ep, dtype=torch.int64)
        rows[rank] = layer.send_counts.sum(1)  # rows this rank sends to each rank
        dist.all_reduce(rows)  # rows[s][d] for every pair
        rows = rows.tolist()
        mine = layer.tokens_per_expert.tolist()  # rows each local expert processed
        expert_s = one_rank_at_a_time(functools.partial(_expert_seconds, layer, mine, steps))
        out[name] = {
            "traced": [[e.op, e.bytes] for e in tr.events],
            "model": [list(e) for e in layer_events(rows, rank, hidden, experts, top_k, 4)],
            "rows": rows,
            "tokens_per_local_expert": mine,
            "expert_seconds": expert_s,
        }
    out["a2a_seconds"] = _a2a_times_on_rank(rank, ep, list(FIT_SIZES), steps + 2)
    return out


def bench(ranks: int = 4, load: EPBench = EPBench()) -> dict:
    from minipar.expert_parallel.experiments import fit_all_to_all, kernel_seconds  # noqa: PLC0415 (lazy: torch)
    from minipar.runtime.launch import run  # noqa: PLC0415 (lazy: launcher)

    ep = ranks
    E = 2 * ep if load.experts is None else load.experts
    load = replace(load, experts=E)
    tokens, top_k, hidden, ffn, steps = load.tokens, load.top_k, load.hidden, load.ffn, load.steps
    per = run(bench_on_rank, ep, load, backend="gloo", timeout=900)
    t = {n: slowest([r["seconds"] for r in per], n) for n in ROUTERS}
    a2a_s = [max(r["a2a_seconds"][i] for r in per) for i in range(len(FIT_SIZES))]
    fit = fit_all_to_all(FIT_SIZES, a2a_s, ep)
    if fit["error"] is None:  # noise can make α negative
        fit["alpha"] = max(fit["alpha"], 0.0)
    routers = {}
    for n in ROUTERS:
        per_expert = [c for r in per for c in r[n]["tokens_per_local_expert"]]  # (E,) in order
        counted = imbalance(per_expert, ep)
        secs = [r[n]["expert_seconds"] for r in per]
        traced = [sum(b for _, b in r[n]["traced"]) for r in per]
        model = [sum(b for _, b in r[n]["model"]) for r in per]
        rows = per[0][n]["rows"]
        routers[n] = {
            "tokens_per_expert": per_expert,
            "rows_per_rank": counted["per rank"],
            "counted_imbalance": counted["max/mean rank"],
            "expert_seconds": secs,
            "measured_imbalance": max(secs) / (sum(secs) / ep),
            "per_rank_step_seconds": [median(r["seconds"][n]) for r in per],
            "bytes": {
                "traced_per_rank": traced,
                "model_per_rank": model,
                "equal": all(r[n]["traced"] == r[n]["model"] for r in per),
            },
            "rows": rows,
            "predicted_a2a_seconds": (
                layer_comm_time(rows, hidden, fit["alpha"], fit["bandwidth"], 4)
                if fit["bandwidth"]
                else None
            ),
        }
    return {
        "ranks": ep,
        "backend": "gloo",
        "tokens_per_rank": tokens,
        "experts": E,
        "top_k": top_k,
        "hidden": hidden,
        "ffn": ffn,
        "skew": load.skew,
        "dtype": "float32",
        "steps": steps,
        "step_seconds": t,
        "skewed_to_even": t["skewed"] / t["even"],
        "routers": routers,
        "fit": fit,
        "kernels": kernel_seconds(ep * tokens * top_k, load.grouped_experts, hidden, ffn, steps),
    }


def _show(r: dict) -> None:
    print(
        f"expert-parallel MoE layer, forward + backward, on x = {r['ranks']} gloo ranks: "
        f"n = {r['tokens_per_rank']} tokens per rank, h = {r['hidden']}, f = {r['ffn']}, "
        f"E = {r['experts']}, K = {r['top_k']}, float32, median of {r['steps']} rounds"
    )
    print(
        f"{'router':<8}{'step (ms)':>10}{'rows per rank':>24}{'rows max/mean':>15}"
        f"{'expert time max/mean':>22}"
    )
    for n in ROUTERS:
        x = r["routers"][n]
        print(
            f"{n:<8}{r['step_seconds'][n] * 1e3:>10.1f}{str(x['rows_per_rank']):>24}"
            f"{x['counted_imbalance']:>15.2f}{x['measured_imbalance']:>22.2f}"
        )
    print(f"skewed / even step time: {r['skewed_to_even']:.2f}")
    print(f"all-to-all fit: {fit_text(r['fit'])}")
    for n in ROUTERS:
        x = r["routers"][n]
        p = x["predicted_a2a_seconds"]
        print(
            f"{n}: collective bytes per rank traced {x['bytes']['traced_per_rank']}, model "
            f"{x['bytes']['model_per_rank']}"
            f"{'' if x['bytes']['equal'] else ' (traced differs from the model)'}; "
            f"four token all-to-alls predicted "
            f"{'—' if p is None else f'{p * 1e3:.2f} ms'}"
        )
    k = r["kernels"]
    gm = (
        f"torch._grouped_mm {k['grouped_mm'] * 1e3:.2f} ms (loop / grouped_mm "
        f"{k['loop_over_grouped_mm']:.1f}×)"
        if k["grouped_mm"]
        else "torch._grouped_mm: not available"
    )
    print(
        f"experts' MLPs, {k['rows']} rows over {k['experts']} experts, forward + backward: "
        f"Python loop {k['loop'] * 1e3:.2f} ms, padded bmm {k['padded'] * 1e3:.2f} ms "
        f"(loop / padded {k['loop_over_padded']:.1f}×), {gm}"
    )
    print(
        "Bytes: every all-to-all's input S (nccl-tests' size), counts included. Expert time: "
        "one rank at a time, so the ranks do not share the cores."
    )


def _check(args) -> int:
    """The arguments' rules (run before torch is imported: a typo costs no import); the
    number of experts E."""
    check(
        args,
        at_least=dict(ranks=2, tokens=1, top_k=1, hidden=1, ffn=1, steps=1, grouped_experts=1),
        at_most=dict(ranks=MAX_RANKS),
        positive=("skew",),
    )
    experts = 2 * args.ranks if args.experts is None else args.experts
    if experts < 1:
        raise InputError(f"--experts ({experts}) must be >= 1")
    if experts % args.ranks:
        raise InputError(
            f"--ranks ({args.ranks}) must divide --experts ({experts}) (each rank owns E/x experts)"
        )
    if args.top_k > experts:
        raise InputError(f"--top-k ({args.top_k}) must be <= --experts ({experts})")
    return experts


def _main(args) -> int:
    experts = _check(args)
    load = EPBench(
        **{f.name: getattr(args, f.name) for f in fields(EPBench)} | {"experts": experts}
    )
    return emit(args, lambda: bench(args.ranks, load), _show)


def add_bench_parser(bench_sub) -> None:
    p = bench_sub.add_parser(
        "expert_parallel",
        aliases=["ep"],
        help="time the expert-parallel MoE layer with an even and a skewed "
        "router; bytes and α-β all-to-all time against the model",
    )
    add_common(p, ranks=4, ranks_help="ranks = x (ep)")
    p.add_argument("--experts", type=int, default=None, help="experts E (default 2·ranks)")
    add_options(
        p,
        ("--tokens", 1024, "tokens per rank n (default 1024)"),
        ("--top-k", 1, "experts per token K (default 1, Switch's: the skew lands on one rank)"),
        ("--hidden", 128, "hidden size h (default 128)"),
        ("--ffn", 512, "expert FFN width f (default 512)"),
        ("--skew", 3.0, "router bias towards expert 0 in the skewed run (default 3)"),
        ("--steps", 5, "timed rounds (default 5)"),
        ("--grouped-experts", 32, "experts of the loop-vs-grouped kernel timing (default 32)"),
    )
    p.set_defaults(func=_main, precheck=_check)


def gpu_check_args(gpus: int) -> list[str] | None:
    """Not part of the GPU check (:mod:`minipar.bench.cli`): its ranks are gloo ranks (no
    ``--backend``) and its experts run on the CPU, so a run there would spend minutes of the
    check's budget and prove nothing about NCCL or the GPU."""
    return None
