"""``minipar bench context_parallel`` (alias ``cp``): ring attention (contiguous and zigzag
shards) and Ulysses against one process, causal, forward + backward, on gloo ranks.

One launch on ``--ranks`` = cp gloo ranks, float32, shapes (b, a, s, d) = (``--batch``,
``--heads``, ``--seq``, ``--head-dim``). Each round runs every variant in turn after a barrier;
a variant's time is the median over ``--steps`` rounds of the slowest rank's forward + backward
(its waits for the ring included). "one_process" is full attention on rank 0 alone. Reported:

* ``contiguous_to_zigzag`` beside the model's causal imbalance 2cp/(cp+1) for blocks that
  compute a diagonal pair whole (:func:`minipar.cost.chapters.context_parallel.imbalance`,
  ``diagonal="whole"``; zigzag's is 1); communication, waits and shared cores add to it.
* bytes traced (:mod:`minipar.runtime.tracer`, one forward + backward) against the model: the
  ring's bytes one rank sends
  (:func:`~minipar.cost.chapters.context_parallel.ring_sent_bytes_per_layer`); Ulysses' summed
  input S of its four all-to-alls (nccl-tests' convention) and the (cp−1)/cp of it that leaves
  the rank.
* the α-β communication time (forward + backward, not overlapped), α and bandwidth fitted in
  the same launch from ring shifts (t = α + S/W) and gloo all-to-alls (pairwise exchange,
  :func:`minipar.cost.network.collectives.fit_alpha_beta`): the fastest of a few tries of 4
  back-to-back calls per size, α clamped at 0.

A benchmark reports, it never asserts: ranks share this machine's cores, so read the ratios
measured in one run, not absolute seconds.
"""

from __future__ import annotations

import functools
from statistics import median

from minipar.cost.chapters import context_parallel as C
from minipar.cost.network.collectives import fit_alpha_beta
from minipar.errors import InputError
from minipar.runtime.timing import interleaved, slowest, timed

from .common import MAX_RANKS, add_common, add_options, check, emit, fit_text

VARIANTS = ("one_process", "ring/contiguous", "ring/zigzag", "ulysses")
FIT_SIZES = (2**12, 2**16, 2**20, 2**22)  # bytes per message / all-to-all buffer (float32)


def _fit_times_on_rank(cp: int, reps: int) -> dict:
    """Fastest seconds of one ring shift and of one all-to-all per size in ``FIT_SIZES``."""
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    from minipar.context_parallel.ring_communication import RingShift  # noqa: PLC0415 (lazy: torch)

    out = {"ring": [], "all_to_all": []}
    for size in FIT_SIZES:
        numel = max(cp, size // 4 // cp * cp)  # (S/4,) float32
        x, y = torch.ones(numel), torch.empty(numel)
        RingShift(x).wait(), dist.all_to_all_single(y, x)  # warm up this size
        # the fastest of reps tries of 4 back-to-back calls, all ranks starting together
        out["ring"].append(min(timed(lambda: RingShift(x).wait(), reps, inner=4)))
        out["all_to_all"].append(min(timed(lambda: dist.all_to_all_single(y, x), reps, inner=4)))
    return out


def bench_on_rank(rank: int, cp: int, b: int, a: int, s: int, d: int, steps: int) -> dict:
    """This rank's seconds per variant and round, traced bytes, and the fit's timings."""
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.context_parallel.experiments import qkv  # noqa: PLC0415 (lazy: torch)
    from minipar.context_parallel.online_softmax import full_attention  # noqa: PLC0415 (lazy: torch)
    from minipar.context_parallel.ring import ring_attention  # noqa: PLC0415 (lazy: torch)
    from minipar.context_parallel.sharding import shard_sequence  # noqa: PLC0415 (lazy: torch)
    from minipar.context_parallel.ulysses import ulysses_attention  # noqa: PLC0415 (lazy: torch)
    from minipar.runtime import tracer  # noqa: PLC0415 (lazy: torch)

    full = [t.float() for t in qkv(b, a, s, d, logit=10)]  # (b, a, s, d) each
    dout = torch.randn(b, a, s, d, generator=torch.Generator().manual_seed(7))
    shard = lambda t, lay: shard_sequence(t, 2, None, lay)  # (b, a, s/cp, d)
    shards = {
        lay: ([shard(t, lay) for t in full], shard(dout, lay)) for lay in ("contiguous", "zigzag")
    }
    fns = {
        "ring/contiguous": lambda q, k, v: ring_attention(q, k, v, True, None, "contiguous"),
        "ring/zigzag": lambda q, k, v: ring_attention(q, k, v, True, None, "zigzag"),
        "ulysses": lambda q, k, v: ulysses_attention(q, k, v, True),
    }

    def step(name):
        if name == "one_process":
            if rank != 0:
                return
            (q, k, v), g = full, dout
            fn = lambda q, k, v: full_attention(q, k, v, True)
        else:
            (q, k, v), g = shards["zigzag" if name == "ring/zigzag" else "contiguous"]
            fn = fns[name]
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        fn(q, k, v).backward(g)

    # the ranks meet after each call too: "one_process" runs on rank 0 alone
    seconds = interleaved(
        {n: functools.partial(step, n) for n in VARIANTS}, steps, barrier_after=True
    )
    traced = {}
    for name in fns:
        with tracer.trace() as tr:
            step(name)
        traced[name] = {op: [st.calls, st.bytes] for op, st in tr.summary().items()}
    return {"seconds": seconds, "traced": traced, "fit": _fit_times_on_rank(cp, steps + 2)}


F32 = 4  # bytes per element: the bench runs in float32


def _bytes(per: list[dict], shape: tuple) -> dict:
    """Per variant: the bytes and messages every rank traced (they must agree) against the
    model's; ``shape`` = (b, s, h, cp)."""
    batch, seq, h, cp = shape
    sends = C.ring_sends_per_layer(cp)
    ring = C.ring_sent_bytes_per_layer(batch, seq, h, cp, F32)["total"]
    ring = (ring, sends["forward"] + sends["backward"])
    a2a = 2 * sum(S for _, S in C.ulysses_all_to_alls_per_layer(batch, seq, h, cp, F32))
    out = {}
    for name, op, (model, messages) in (
        ("ring/contiguous", "send", ring),
        ("ring/zigzag", "send", ring),
        ("ulysses", "all_to_all", (a2a, 4)),
    ):
        got = [r["traced"][name].get(op, [0, 0]) for r in per]  # [calls, bytes] per rank
        out[name] = {
            "traced_per_rank": [g[1] for g in got],
            "traced_messages_per_rank": [g[0] for g in got],
            "model": model,
            "model_messages": messages,
            "equal": all(g == [messages, model] for g in got),
        }
    leaving = C.ulysses_sent_bytes_per_layer(batch, seq, h, cp, F32)
    out["ulysses"]["model_leaving_rank"] = leaving["total"]
    return out


def _fit_per(per: list[dict], cp: int) -> dict:
    """α (s) and bandwidth (bytes/s) of one ring shift and of the all-to-all, from the slowest
    rank's fastest time per size; a fit that the noise made meaningless (bandwidth <= 0) says so
    instead of predicting."""
    from minipar.cost.validation.calibrate import fit_line  # noqa: PLC0415 (lazy: help)

    sizes, fit = list(FIT_SIZES), {"sizes": list(FIT_SIZES)}
    for name, key in (("ring_shift", "ring"), ("all_to_all", "all_to_all")):
        seconds = [max(r["fit"][key][i] for r in per) for i in range(len(sizes))]
        fit[name] = {"alpha": None, "bandwidth": None, "seconds": seconds}
        try:
            if name == "ring_shift":  # t = α + S/W: the slope is 1/W
                a, c = fit_line(sizes, seconds)
                c = 1 / c if c > 0 else 0
            else:
                a, c = fit_alpha_beta(sizes, seconds, "all-to-all", cp, "pairwise-exchange")
        except ValueError as e:
            fit[name]["error"] = str(e)
            continue
        fit[name].update(alpha=max(a, 0.0), bandwidth=c if c > 0 else None)
        fit[name]["error"] = None if c > 0 else "fitted bandwidth <= 0 (noise): no prediction"
    return fit


def _predicted(bytes_: dict, fit: dict, shape: tuple) -> dict:
    """Each variant's communication seconds from the fitted α-β (None where the fit failed)."""
    batch, seq, h, cp = shape
    rs, aa = fit["ring_shift"], fit["all_to_all"]
    ring = ulysses = None
    if rs["bandwidth"]:  # every message carries one K/V block
        kv = C.kv_block_bytes(batch, seq, h, cp, F32)
        ring = bytes_["ring/zigzag"]["model_messages"] * (rs["alpha"] + kv / rs["bandwidth"])
    if aa["bandwidth"]:
        attn = C.AttentionShape(batch, seq, h, cp, "contiguous", bytes_per_elem=F32)
        ulysses = 2 * C.ulysses_time(attn, alpha=aa["alpha"], bandwidth=aa["bandwidth"])
    return {"ring/contiguous": ring, "ring/zigzag": ring, "ulysses": ulysses}


def bench(
    ranks: int = 4,
    seq: int = 2048,
    batch: int = 1,
    heads: int = 4,
    head_dim: int = 32,
    steps: int = 5,
) -> dict:
    from minipar.runtime.launch import run  # noqa: PLC0415 (lazy: launcher)

    cp, h = ranks, heads * head_dim
    shape = (batch, seq, h, cp)
    per = run(bench_on_rank, cp, batch, heads, seq, head_dim, steps, backend="gloo", timeout=900)
    per_rank = {n: [median(r["seconds"][n]) for r in per] for n in VARIANTS}
    per_rank["one_process"] = per_rank["one_process"][:1]  # rank 0 alone
    t = {n: slowest([r["seconds"] for r in per], n) for n in VARIANTS}
    t["one_process"] = median(per[0]["seconds"]["one_process"])
    bytes_ = _bytes(per, shape)
    fit = _fit_per(per, cp)
    return {
        "ranks": cp,
        "backend": "gloo",
        "b": batch,
        "a": heads,
        "s": seq,
        "d": head_dim,
        "h": h,
        "dtype": "float32",
        "causal": True,
        "steps": steps,
        "step_seconds": t,
        "per_rank_seconds": per_rank,
        "speedup_vs_one_process": {n: t["one_process"] / t[n] for n in VARIANTS[1:]},
        "contiguous_to_zigzag": t["ring/contiguous"] / t["ring/zigzag"],
        "model_imbalance_contiguous": C.imbalance(cp, "contiguous", diagonal="whole"),
        "model_attention_flops_per_rank": {
            lay: C.attention_flops_per_rank(batch, seq, h, cp, lay)
            for lay in ("contiguous", "zigzag")
        },
        "kv_block_bytes": C.kv_block_bytes(batch, seq, h, cp, F32),
        "bytes": bytes_,
        "fit": fit,
        "predicted_comm_seconds": _predicted(bytes_, fit, shape),
    }


def _show(r: dict) -> None:
    print(
        f"causal attention, forward + backward, on cp = {r['ranks']} gloo ranks: "
        f"(b, a, s, d) = ({r['b']}, {r['a']}, {r['s']}, {r['d']}), float32, "
        f"median of {r['steps']} rounds"
    )
    print(f"{'variant':<17}{'slowest (ms)':>13}{'vs one process':>16}   per rank (ms)")
    for n in VARIANTS:
        sp = r["speedup_vs_one_process"].get(n, 1.0)
        ranks = " ".join(f"{x * 1e3:.1f}" for x in r["per_rank_seconds"][n])
        print(f"{n:<17}{r['step_seconds'][n] * 1e3:>13.1f}{sp:>16.2f}   {ranks}")
    print(
        f"contiguous / zigzag slowest rank: measured {r['contiguous_to_zigzag']:.2f}, "
        f"model's causal imbalance 2cp/(cp+1) = {r['model_imbalance_contiguous']:.2f}"
    )
    print(f"{'bytes per rank':<17}{'traced':>14}{'model':>14}{'predicted comm':>17}")
    for n, v in r["bytes"].items():
        p = r["predicted_comm_seconds"][n]
        traced = max(v["traced_per_rank"])
        print(
            f"{n:<17}{traced:>14,}{v['model']:>14,.0f}"
            f"{'—' if p is None else f'{p * 1e3:.2f} ms':>17}"
            f"{'' if v['equal'] else '   (traced differs from the model)'}"
        )
    for name, f in (("ring shift", r["fit"]["ring_shift"]), ("all-to-all", r["fit"]["all_to_all"])):
        print(f"{name}: {fit_text(f)}")
    print(
        "Ring bytes: what a rank sends; Ulysses: the all-to-alls' input S (nccl-tests' size). "
        "Predicted comm: forward + backward, not overlapped."
    )


def _check(args) -> None:
    """The arguments' rules (run before torch is imported: a typo costs no import)."""
    check(
        args,
        at_least=dict(ranks=2, seq=1, batch=1, heads=1, head_dim=1, steps=1),
        at_most=dict(ranks=MAX_RANKS),
    )
    if args.heads % args.ranks:
        raise InputError(
            f"--ranks ({args.ranks}) must divide --heads ({args.heads}) "
            f"(Ulysses splits the heads over the ranks)"
        )
    if args.seq % (2 * args.ranks):
        raise InputError(
            f"--seq ({args.seq}) must be divisible by 2·ranks ({2 * args.ranks}) "
            f"(zigzag cuts the sequence into 2·cp chunks)"
        )


def _main(args) -> int:
    _check(args)
    return emit(
        args,
        lambda: bench(args.ranks, args.seq, args.batch, args.heads, args.head_dim, args.steps),
        _show,
    )


def add_bench_parser(bench_sub) -> None:
    p = bench_sub.add_parser(
        "context_parallel",
        aliases=["cp"],
        help="time ring (contiguous, zigzag) and Ulysses attention against "
        "one process; bytes and α-β time against the model",
    )
    add_common(p, ranks=4, ranks_help="ranks = cp")
    add_options(
        p,
        ("--seq", 2048, "total sequence length s (default 2048)"),
        ("--batch", 1, "sequences b (default 1)"),
        ("--heads", 4, "attention heads a (default 4)"),
        ("--head-dim", 32, "head dimension h/a (default 32)"),
        ("--steps", 5, "timed rounds (default 5)"),
    )
    p.set_defaults(func=_main, precheck=_check)


def gpu_check_args(gpus: int) -> list[str] | None:
    """Not part of the GPU check (:mod:`minipar.bench.cli`): its ranks are gloo ranks (no
    ``--backend``) and its attention runs on the CPU, so a run there would spend minutes of the
    check's budget and prove nothing about NCCL or the GPU."""
    return None
