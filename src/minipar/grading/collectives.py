"""Checkers for the collectives exercises (``exercises/collectives``).

The send/recv exercises run the learner's function on 2, 3 and 4 gloo ranks, one launch per world
size (the ``[layouts]`` of its clause table) running every case in turn (sizes divisible by n
and not, fewer elements than ranks, float32, float64 and int64), and compare with
``torch.distributed``'s own collective. The tracer
checks the traffic (each rank sends the ring's 2(n−1)/n·S bytes) and the peers (a ring talks only
to its two neighbours); calls into the course's own ``minipar.collectives`` are rejected. A first
case makes mistakes readable: rank r holds 8^r, so the base-8 digits of a sum count how often
each rank's value went in.
"""

from __future__ import annotations

import contextlib
import os
import re

from minipar.cost.network import collectives as cc
from minipar.grading import GradeFailure, as_number, close_number, reason_for
from minipar.grading.compare import type_error
from minipar.grading.declare import Chapter
from minipar.grading.imports import course_calls, course_reason, forbidden_modules
from minipar.grading.limits import LimitExceeded, RankFailure
from minipar.runtime.launch import RankError

CH = Chapter("collectives")  # its tasks' PASS lines and named mistakes: clauses/collectives.toml
_FORBIDDEN = forbidden_modules("collectives")  # minipar.collectives, minipar.cost: the answers


class CaseError(RuntimeError):
    """A learner's exception on a rank, labelled with the case that raised it."""


class BufferError_(RuntimeError):
    """A send/recv buffer whose dtype differs from the input's (gloo would abort)."""


# ----------------------------------------------------------------------------- on the ranks
def _cases(n: int):
    """(numel, dtype name) per case, in the order they run on every rank."""
    return [(4 * n, "float32"), (4 * n + 1, "float64"), (n + 1, "int64"), (n - 1, "float32")]


def _describe(n, numel, dtype):
    extra = " (not divisible by n)" if numel % n else ""
    extra = " (fewer elements than ranks)" if numel < n else extra
    return f"n={n}, {numel} elements{extra}, {dtype}"


def _input(rank, numel, dtype):
    import torch  # noqa: PLC0415 (lazy: torch)

    g = torch.Generator().manual_seed(100 * rank + numel)
    if dtype == "int64":
        return torch.randint(-50, 50, (numel,), generator=g)  # (numel,) int64
    return torch.randn(numel, generator=g, dtype=getattr(torch, dtype))  # (numel,)


@contextlib.contextmanager
def _guarded(dtype):
    """Within the candidate: point-to-point buffers must have the input's dtype (a mismatch
    makes gloo abort the process with nothing the learner can act on)."""
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    originals = {name: getattr(dist, name) for name in ("send", "recv", "isend", "irecv")}

    def wrap(name, fn):
        def guarded(tensor, *args, **kwargs):
            if tensor.dtype != dtype:
                raise BufferError_(
                    CH.why(
                        "buffer dtype", name=name, dtype=str(tensor.dtype)[6:], input=str(dtype)[6:]
                    )
                )
            return fn(tensor, *args, **kwargs)

        return guarded

    for name, fn in originals.items():
        setattr(dist, name, wrap(name, fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


def _run_case(fn, x, where, **info):
    """``fn(x)`` under the tracer, the dtype guard and the course-call watch: what it returned
    (a tensor, else None), and ``info`` with the traffic it made and the type it returned."""
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.runtime.tracer import trace  # noqa: PLC0415 (lazy: tracer)

    os.write(2, f"minipar check: running case {where}\n".encode())  # shown if the rank dies
    with trace() as tr:
        try:
            with _guarded(x.dtype), course_calls(_FORBIDDEN) as used:
                returned = fn(x)
        except NotImplementedError:
            raise
        except BufferError_ as e:
            raise BufferError_(f"{where}: {e}") from None
        except Exception as e:
            raise CaseError(f"{where}: {type(e).__name__}: {e}") from e
    sends = sorted({e.peer for e in tr.events if e.op == "send"})
    recvs = sorted({e.peer for e in tr.events if e.op == "recv"})
    ops = sorted({e.op for e in tr.events} - {"send", "recv"})
    info.update(sends=sends, recvs=recvs, ops=ops, used=sorted(used), sent=tr.bytes("send"))
    info.update(where=where, returned_type=type(returned).__name__)
    return (returned if isinstance(returned, torch.Tensor) else None), info


def _ring_on_rank(rank, n, fn):
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    out = []
    for numel, dtype in _cases(n):
        where = _describe(n, numel, dtype)
        x = _input(rank, numel, dtype)
        ref = x.clone()
        dist.all_reduce(ref)
        returned, info = _run_case(fn, x, where, numel=numel, elsize=x.element_size(), ref=ref)
        info.update(got=x, returned=returned)
        if not out:  # base-8 digits: who was added how often
            digits = torch.full((numel,), float(8**rank))
            _run_case(fn, digits, where)
            info["digits"] = digits.tolist()
        out.append(info)
    return out


def _gather_on_rank(rank, n, fn):
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    out = []
    for numel, dtype in ((3, "float32"), (1, "float64"), (2, "int64")):
        where = f"n={n}, chunks of {numel}, {dtype}"
        chunk = (torch.arange(numel) + 100 * rank).to(getattr(torch, dtype))  # (numel,)
        ref = torch.empty(n * numel, dtype=chunk.dtype)  # (n·numel,)
        dist.all_gather_single(ref, chunk.clone())
        returned, info = _run_case(
            fn, chunk.clone(), where, numel=numel, elsize=chunk.element_size(), ref=ref
        )
        out.append(dict(info, got=returned))
    return out


def _on_error(e, n):
    """A rank's failure as one reason naming the case it happened in (the send/recv cases write
    their own "running case" lines; a deadlock gets the unmatched-send hint)."""
    if isinstance(e, LimitExceeded):
        logs = " ".join(getattr(e, "logs", {}).values())
        case = re.findall(r"minipar check: running case ([^\n]*)", logs)
        hint = CH.why("unmatched send hint") if e.kind == "deadlock" else ""
        return GradeFailure(
            (f"{case[-1]}: " if case else f"n={n}: ") + str(e).split(" -- ")[0] + hint
        )
    if isinstance(e, RankFailure):
        m = re.match(r"(?:\w+\.)*(CaseError|BufferError_): (.*)", e.summary, re.S)
        if m and m.group(1) == "BufferError_":
            return GradeFailure(f"rank {e.rank}, {m.group(2)}")
        if m:
            return GradeFailure(
                reason_for(RankError(e.rank, m.group(2), e.remote_traceback)).replace(
                    "your code raised on rank", "your code raised, on rank"
                )
            )
        case = re.findall(r"minipar check: running case ([^\n]*)", e.stderr_tail)
        return GradeFailure((f"{case[-1]}: " if case else f"n={n}: ") + str(e))
    return None


def _ring_body(rank, n, group, fn):
    return {"cases": _ring_on_rank(rank, n, fn)}


def _gather_body(rank, n, group, fn):
    return {"cases": _gather_on_rank(rank, n, fn)}


# 2, 3 and 4 ranks, the whole world each ([layouts] of the clause table)
RANKS = CH.layouts(on_error=_on_error)


def _cases_of(body, candidate):
    """(rank, world size, that rank's cases) of every launch, in order."""
    for batch in RANKS.batches(body, candidate):
        for c in batch:
            yield c["rank"], c["world"], c["cases"]


def _common(res, rank, what):
    if res["ops"]:
        raise CH.fail("called a collective", res["where"], ops=", ".join(res["ops"]), what=what)
    if res["used"]:
        raise GradeFailure(f"{res['where']}: " + course_reason(res["used"][0]))


# ----------------------------------------------------------------------------- diagnosis
def _counts(v: float, n: int):
    """Base-8 digits of v: how many times each rank's 8^r went into it (None if not decodable)."""
    if v != int(v) or not 0 <= v < 8**n:
        return None
    return [int(v) // 8**r % 8 for r in range(n)]


def _diagnose_sum(rank: int, n: int, digits: list) -> str | None:
    for j, v in enumerate(digits):
        c = _counts(v, n)
        if c is None or c == [1] * n:
            continue
        where = f"rank {rank}, element {j}"
        if len(set(c)) == 1:
            return f"{where}: result is {c[0]}× the expected sum"
        twice, missing = [r for r in range(n) if c[r] > 1], [r for r in range(n) if c[r] == 0]
        if twice == [rank] and not missing:
            return CH.why("own chunk added twice", case=where, times=c[rank])
        if twice:
            return CH.why("counted more than once", case=where, twice=twice)
        return CH.why("values missing", case=where, missing=missing)
    return None


def _ring_peers(res, rank, n, what):
    right, left = (rank + 1) % n, (rank - 1) % n
    sends, recvs = set(res["sends"]), set(res["recvs"])
    if (sends <= {right} and recvs <= {left}) or (sends <= {left} and recvs <= {right}):
        return
    raise CH.fail(
        "not ring neighbours",
        res["where"],
        rank=rank,
        sends=sorted(sends),
        recvs=sorted(recvs),
        right=right,
        left=left,
        what=what,
    )


# ----------------------------------------------------------------------------- tasks
@CH.task("ring_all_reduce")
def check_ring_all_reduce(candidate):
    import torch  # noqa: PLC0415 (lazy: torch)

    for r, n, cases in _cases_of(_ring_body, candidate):
        for res in cases:
            _common(res, r, "the ring all-reduce")
            where = res["where"]
            got, ref = res["got"], res["ref"]
            if not torch.allclose(got.double(), ref.double(), rtol=1e-4, atol=1e-5):
                ret = res["returned"]
                if (
                    ret is not None
                    and ret.shape == ref.shape
                    and torch.allclose(ret.double(), ref.double(), rtol=1e-4, atol=1e-5)
                ):
                    raise CH.fail("not in place", where)
                why = _diagnose_sum(r, n, res["digits"]) if "digits" in res else None
                err = (got.double() - ref.double()).abs().max().item()
                raise GradeFailure(f"{where}: " + (why or CH.why("sum differs", r=r, err=err)))
            if res["returned"] is None or not torch.equal(res["returned"], got):
                wrong = res["returned"] is not None and type_error(res["returned"], got)
                raise GradeFailure(
                    f"{where}: rank {r} returned "
                    + (f"a tensor of another type ({wrong})" if wrong else res["returned_type"])
                    + "; return the tensor you summed into"
                )
            S = res["numel"] * res["elsize"]
            expected = cc.ring_bytes_per_rank("all-reduce", n, S)
            if res["numel"] % n == 0 and res["sent"] != expected:
                raise CH.fail("ring bytes", where, r=r, sent=res["sent"], expected=expected, S=S)
            _ring_peers(res, r, n, "is this a direct exchange rather than a ring?")


@CH.task("all_gather")
def check_all_gather(candidate):
    import torch  # noqa: PLC0415 (lazy: torch)

    for r, n, cases in _cases_of(_gather_body, candidate):
        for res in cases:
            _common(res, r, "the all-gather")
            got, ref, numel = res["got"], res["ref"], res["numel"]
            where = f"{res['where']}, rank {r}"
            if got is None:
                raise CH.fail("gather not a tensor", where, returned_type=res["returned_type"])
            if tuple(got.shape) != tuple(ref.shape):
                raise CH.fail(
                    "gather shape",
                    where,
                    shape=tuple(got.shape),
                    want=tuple(ref.shape),
                    numel=numel,
                )
            if got.dtype != ref.dtype:
                raise CH.fail(
                    "gather dtype", where, dtype=str(got.dtype)[6:], chunk=str(ref.dtype)[6:]
                )
            if not torch.equal(got, ref):
                blocks, want = got.view(n, numel), ref.view(n, numel)  # (n, numel)
                for i in range(n):
                    if torch.equal(blocks[i], want[i]):
                        continue
                    src = [k for k in range(n) if torch.equal(blocks[i], want[k])]
                    if src:
                        raise CH.fail("block from another rank", where, i=i, src=src[0])
                    raise CH.fail("block never arrived", where, i=i)
            S = n * numel * res["elsize"]
            expected = cc.ring_bytes_per_rank("all-gather", n, S)
            if res["sent"] != expected:
                raise CH.fail("gather bytes", where, r=r, sent=res["sent"], expected=expected, S=S)


@CH.task("alpha_beta_time")
def check_alpha_beta_time(candidate):
    for n, S, a, bw in CH.data["configs"]["alpha_beta_time"]:  # [configs] of its clause table
        want = cc.collective_time("all-reduce", "ring", n, S, a, bw)
        got = as_number(CH.call(candidate, n, S, a, bw), "return seconds as a number")
        if abs(got - want) <= 1e-6 * want:
            continue
        where = f"n={n}, S={S:g} B, α={a:g} s, bandwidth={bw:g} B/s"
        if abs(got - (n - 1) * (a + S / n / bw)) <= 1e-6 * want:
            raise CH.fail("one phase", where, got=got)
        if (
            abs(got - (2 * n * a + 2 * S / bw)) <= 1e-6 * want
            or abs(got - 2 * (n - 1) * (a + S / bw)) <= 1e-6 * want
        ):
            raise CH.fail("whole message per step", where, got=got)
        close_number(got, want, where, rel=1e-6)


@CH.task("busbw")
def check_busbw(candidate):
    for op in ("all-reduce", "all-gather", "reduce-scatter", "broadcast"):
        for n in (2, 8):
            S, t = 1e9, 0.02
            want = cc.busbw(op, n, S, t)
            try:
                got = as_number(CH.call(candidate, op, n, S, t), "return bytes/s as a number")
            except KeyError as e:  # a table keyed on another spelling of op
                raise CH.fail("op spelling", op=op, key=e.args[0] if e.args else "") from None
            if abs(got - want) <= 1e-6 * want:
                continue
            where = f"{op}, n={n}, S={S:g} B, t={t} s"
            if abs(got - S / t) <= 1e-6 * want:
                raise CH.fail("busbw is algbw", where, got=got, busbw_factor=cc.busbw_factor(op, n))
            close_number(got, want, where, rel=1e-6)


@CH.task("gradient_sync")
def check_gradient_sync(candidate):
    ans = CH.call(candidate)
    if not isinstance(ans, dict) or not {"S_bytes", "bandwidth", "seconds"} <= set(ans):
        raise GradeFailure("return a dict with keys S_bytes, bandwidth, seconds")
    S = 1.5e9 * 4
    if abs(float(ans["S_bytes"]) - 1.5e9) < 1:
        raise CH.fail("S in elements")
    close_number(ans["S_bytes"], S, "S_bytes", rel=1e-3)
    bw = float(ans["bandwidth"])
    if abs(bw - 900e9) < 1e6:
        raise CH.fail("bidirectional bandwidth")
    if abs(bw - 450 * 2**30) < 1e6 or abs(bw - 900 * 2**30) < 1e6:
        raise GradeFailure("bandwidth: datasheet GB/s are decimal (1e9 bytes), not GiB (2^30)")
    close_number(bw, 450e9, "bandwidth (bytes/s per direction)", rel=1e-3)
    want = cc.collective_time("all-reduce", "ring", 8, S, 2e-6, 450e9)
    got = float(ans["seconds"])
    if abs(got - want / 1e-3) <= 1e-3 * want / 1e-3:
        raise GradeFailure("seconds: that looks like milliseconds; answer in seconds")
    if abs(got - cc.collective_time("reduce-scatter", "ring", 8, S, 2e-6, 450e9)) < 1e-3 * want:
        raise CH.fail("seconds of one phase")
    close_number(got, want, "seconds", rel=1e-3)
