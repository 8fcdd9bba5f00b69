"""Every ``torch.distributed`` primitive on tiny readable tensors, and the ring step by step.

Inputs are chosen to be read at a glance (:func:`minipar.collectives.primitives.example_inputs`):
rank r holds ``10·r + j`` at position j, so a value's tens digit says which rank it came from
and a sum (≥ 10·n) is plainly a sum; :func:`~minipar.collectives.primitives.primitive_outputs`
says what each call must return, and the tests hold the real calls to it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar import collectives as C
from minipar.collectives import ring_all_reduce
from minipar.collectives.primitives import PRIMITIVES, example_inputs
from minipar.runtime.launch import run


def _primitives_on_rank(rank: int, n: int) -> dict:
    def x(op):
        return torch.tensor(example_inputs(op, n)[rank])  # (n,), all-gather (2,)

    out = {op: x(op) for op in ("broadcast", "reduce", "all-reduce")}  # in place
    out.update({"reduce-scatter": torch.empty(1), "all-gather": torch.empty(2 * n)})
    out.update({"all-to-all": torch.empty(n), "send/recv": torch.empty(n)})
    dist.broadcast(out["broadcast"], src=0)
    dist.reduce(out["reduce"], dst=0)  # non-root: unspecified
    dist.all_reduce(out["all-reduce"])
    dist.reduce_scatter_single(out["reduce-scatter"], x("reduce-scatter"))
    dist.all_gather_single(out["all-gather"], x("all-gather"))
    dist.all_to_all_single(out["all-to-all"], x("all-to-all"))
    right, left = (rank + 1) % n, (rank - 1) % n  # send/recv: a ring shift right
    reqs = [dist.isend(x("send/recv"), dst=right), dist.irecv(out["send/recv"], src=left)]
    for req in reqs:
        req.wait()
    return {op: (x(op).tolist(), t.tolist()) for op, t in out.items()}


def run_primitives(n: int = 4) -> dict:
    """{primitive: {"inputs": [per rank], "outputs": [per rank]}} from a real run on n ranks."""
    per_rank = run(_primitives_on_rank, n, backend="gloo", timeout=60)
    return {
        op: {"inputs": [r[op][0] for r in per_rank], "outputs": [r[op][1] for r in per_rank]}
        for op in PRIMITIVES
    }


def describe(demo: dict, op: str) -> str:
    """The inputs and outputs of one primitive, one line per rank."""
    fmt = lambda v: "[" + ", ".join(f"{x:g}" for x in v) + "]"
    lines = [f"{op}:"]
    for r, (a, b) in enumerate(zip(demo[op]["inputs"], demo[op]["outputs"])):
        note = "  (unspecified off the root)" if op == "reduce" and r else ""
        lines.append(f"  rank {r}: {fmt(a):<28} -> {fmt(b)}{note}")
    return "\n".join(lines)


def _ring_steps_on_rank(rank: int, n: int, numel: int) -> dict:
    from minipar.runtime.tracer import trace  # noqa: PLC0415 (lazy: tracer)

    x = torch.full((numel,), float(2**rank))  # (numel,): bit r set = rank r contributed
    snaps = [("start", -1, x.tolist())]
    with trace() as tr:
        ring_all_reduce(x, on_step=lambda phase, k: snaps.append((phase, k, x.tolist())))
    return dict(snapshots=snaps, sent=tr.bytes("send"), messages=tr.count("send"))


def ring_steps(n: int = 4, numel: int = 4) -> dict:
    """A traced ring all-reduce of ``numel`` float32 values on n ranks, rank r holding 2^r (a
    value's binary digits name the ranks summed into it): ``snapshots[rank]`` = [(phase, k,
    values)], ``sent[rank]`` (bytes, traced), ``messages[rank]`` and ``S`` (bytes)."""
    per_rank = run(_ring_steps_on_rank, n, numel, backend="gloo", timeout=60)
    return dict(
        n=n,
        S=4 * numel,
        snapshots=[r["snapshots"] for r in per_rank],
        sent=[r["sent"] for r in per_rank],
        messages=[r["messages"] for r in per_rank],
    )


def _sent_on_rank(rank: int, n: int, numel: int) -> dict:
    from minipar.runtime.tracer import trace  # noqa: PLC0415 (lazy: tracer)

    algos = {"ring": C.ring_all_reduce, "parameter-server": C.parameter_server_all_reduce}
    if n & (n - 1) == 0:
        algos["recursive-doubling"] = C.recursive_doubling_all_reduce
    ref = torch.full((numel,), float(rank))
    dist.all_reduce(ref)
    out = {}
    for name, fn in algos.items():
        x = torch.full((numel,), float(rank))
        with trace() as tr:
            fn(x)
        out[name] = dict(
            sent=tr.bytes("send"),
            received=tr.bytes("recv"),
            messages=tr.count("send"),
            equal=bool(torch.equal(x, ref)),
        )
    return out


def sent_bytes_by_algorithm(n: int = 4, numel: int = 2**16) -> dict:
    """{algorithm: [per rank {sent, received, messages, equal}]} for one all-reduce of
    ``numel`` float32 values on n ranks, bytes from the tracer; ``equal``: same as dist's."""
    per_rank = run(_sent_on_rank, n, numel, backend="gloo", timeout=60)
    return {a: [r[a] for r in per_rank] for a in per_rank[0]}


def fit_ranges(bench: dict) -> dict:
    """The spread of a :func:`minipar.bench.collectives.run_benchmark` result's α-β fits, for the
    chapter to glue: ``alpha_us`` (µs per message) and ``bandwidth_gbps`` (GB/s = 10⁹ bytes/s
    per direction) as (lowest, highest) over the fits that succeeded, the ``ops`` they cover,
    and ``alpha_text``/``bandwidth_text`` ready to print ("59–314 µs"); ValueError if none did.
    """
    ok = [f for f in bench["fits"] if not f.get("error")]
    if not ok:
        raise ValueError(
            f"fits that succeeded ({len(ok)}) must be at least 1: "
            + "; ".join(str(f.get("error")) for f in bench["fits"])
        )
    alpha = [f["alpha"] * 1e6 for f in ok]  # µs
    bw = [f["bandwidth"] / 1e9 for f in ok]  # GB/s per direction
    out = {
        "alpha_us": (min(alpha), max(alpha)),
        "bandwidth_gbps": (min(bw), max(bw)),
        "ops": sorted({f["op"] for f in ok}),
    }
    out["alpha_text"] = f"{out['alpha_us'][0]:.0f}–{out['alpha_us'][1]:.0f} µs"
    out["bandwidth_text"] = (
        f"{out['bandwidth_gbps'][0]:.1f}–{out['bandwidth_gbps'][1]:.1f} GB/s per direction"
    )
    return out
