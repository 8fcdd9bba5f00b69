"""Checkers for the collectives exercises (``exercises/collectives``).

The send/recv exercises run the learner's function on 2, 3 and 4 gloo ranks through
:func:`minipar.launch.run` (a hang becomes a timeout, never a stuck notebook) and compare with
``torch.distributed``'s own collective. A second run uses inputs that make mistakes readable:
rank r holds 8^r, so the base-8 digits of a sum count how often each rank's value went in.
"""
from __future__ import annotations

from minipar.cost import collectives as cc
from minipar.grading import GradeFailure, as_number, close_number, task

RANKS = (2, 3, 4)          # a failing call restarts only its ranks' workers: fail small first


# ----------------------------------------------------------------------------- on the ranks
def _ring_on_rank(rank, n, fn, numel):
    import torch
    import torch.distributed as dist

    from minipar.trace import trace

    g = torch.Generator().manual_seed(100 * rank + numel)
    x = torch.randn(numel, generator=g)                  # (numel,) float32
    ref = x.clone()
    dist.all_reduce(ref)
    with trace() as tr:
        returned = fn(x)
    digits = torch.full((numel,), float(8**rank))        # base-8 digit r counts rank r
    fn(digits)
    ops = sorted({e.op for e in tr.events} - {"send", "recv"})
    return dict(got=x, ref=ref, returned=returned, digits=digits.tolist(), ops=ops,
                sent=tr.bytes("send"))


def _gather_on_rank(rank, n, fn, numel):
    import torch
    import torch.distributed as dist

    from minipar.trace import trace

    chunk = torch.arange(numel, dtype=torch.float32) + 100 * rank   # (numel,)
    ref = torch.empty(n * numel)
    dist.all_gather_single(ref, chunk.clone())
    with trace() as tr:
        out = fn(chunk.clone())
    ops = sorted({e.op for e in tr.events} - {"send", "recv"})
    return dict(got=out, ref=ref, ops=ops)


def _ready(rank, n):
    return rank


def _run(worker, n, fn, numel, timeout):
    from minipar.launch import run
    # Start (or restart, after a timeout killed them) the workers with a generous budget first:
    # a fresh worker imports torch inside the call, which must not eat the candidate's timeout.
    from minipar.launch import RankError

    run(_ready, n, backend="gloo", timeout=300)
    try:
        return run(worker, n, fn, numel, backend="gloo", timeout=timeout)
    except RankError as e:
        if "timed out" not in e.summary.lower():
            raise
        raise GradeFailure(f"timed out on {n} ranks (gloo gave up waiting after {timeout:g} s): "
                           "a send or recv was never matched -- does every send go to a rank "
                           "that receives from this one, and does every rank post its recv "
                           "(irecv) before waiting on its send?") from None


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
            return (f"{where}: your own value is counted {c[rank]} times — did you add your own "
                    "chunk twice (e.g. add the received chunk and then your own again)?")
        if twice:
            return (f"{where}: values of ranks {twice} are counted more than once — is a "
                    "finished chunk added again (an extra step, or adding during the all-gather "
                    "phase)?")
        return (f"{where}: the values of ranks {missing} are missing — does the reduce-scatter "
                "phase run all n−1 steps, each adding the received chunk, and the all-gather "
                "phase n−1 more?")
    return None


def _no_collectives(ops, what):
    if ops:
        raise GradeFailure(f"your code called {', '.join(ops)}; build {what} from send/recv "
                           "(isend/irecv) only")


# ----------------------------------------------------------------------------- tasks
@task("collectives.ring_all_reduce",
      "equals dist.all_reduce on 2, 3 and 4 ranks (sizes divisible by n and not) and each rank "
      "sends 2(n−1)/n·S bytes")
def check_ring_all_reduce(candidate, timeout: float = 20.0):
    import torch

    for n in RANKS:
        for numel in (4 * n, 4 * n + 1):
            per_rank = _run(_ring_on_rank, n, candidate, numel, timeout)
            for r, res in enumerate(per_rank):
                _no_collectives(res["ops"], "the ring all-reduce")
                where = f"n={n}, {numel} elements"
                if not torch.allclose(res["got"], res["ref"], rtol=1e-4, atol=1e-5):
                    ret = res["returned"]
                    if isinstance(ret, torch.Tensor) and ret.shape == res["ref"].shape and \
                            torch.allclose(ret, res["ref"], rtol=1e-4, atol=1e-5):
                        raise GradeFailure(f"{where}: you return the right sum but the input "
                                           "tensor was not updated in place")
                    why = _diagnose_sum(r, n, res["digits"])
                    err = (res["got"] - res["ref"]).abs().max().item()
                    raise GradeFailure(f"{where}: " + (why or f"rank {r} differs from "
                                       f"dist.all_reduce (max error {err:.3g}); the right ranks "
                                       "may be summed into the wrong positions"))
                S, expected = 4 * numel, cc.ring_bytes_per_rank("all-reduce", n, 4 * numel)
                if numel % n == 0 and res["sent"] != expected:
                    raise GradeFailure(f"{where}: rank {r} sent {res['sent']} bytes; a ring "
                                       f"all-reduce sends 2(n−1)/n·S = {expected:.0f} bytes "
                                       f"(S = {S}) — one chunk of S/n per step, 2(n−1) steps")


@task("collectives.all_gather",
      "equals dist.all_gather_single on 2, 3 and 4 ranks, using only send/recv")
def check_all_gather(candidate, timeout: float = 20.0):
    import torch

    for n in RANKS:
        numel = 3
        for r, res in enumerate(_run(_gather_on_rank, n, candidate, numel, timeout)):
            _no_collectives(res["ops"], "the all-gather")
            got, ref = res["got"], res["ref"]
            where = f"n={n}, rank {r}"
            if not isinstance(got, torch.Tensor):
                raise GradeFailure(f"{where}: return a tensor of n·numel elements, got "
                                   f"{type(got).__name__}")
            if tuple(got.shape) != tuple(ref.shape):
                raise GradeFailure(f"{where}: result has shape {tuple(got.shape)}, expected "
                                   f"{tuple(ref.shape)} (n chunks of {numel}, rank order)")
            if torch.equal(got, ref):
                continue
            blocks = got.view(n, numel)                    # (n, numel)
            for i in range(n):
                if torch.equal(blocks[i], ref.view(n, numel)[i]):
                    continue
                src = [k for k in range(n) if torch.equal(blocks[i], ref.view(n, numel)[k])]
                if src:
                    raise GradeFailure(f"{where}: block {i} holds rank {src[0]}'s chunk; block "
                                       f"i must hold rank i's — check which block you receive "
                                       "into at each step")
                raise GradeFailure(f"{where}: block {i} (rank {i}'s chunk) never arrived — an "
                                   "all-gather needs n−1 steps (or a recv from every other rank)")


@task("collectives.alpha_beta_time",
      "matches 2(n−1)α + 2(n−1)/n·S/bandwidth for ring all-reduce on 5 cases")
def check_alpha_beta_time(candidate):
    cases = [(2, 1e6, 1e-5, 1e10), (8, 1e9, 2e-6, 450e9), (3, 12345, 5e-6, 50e9),
             (64, 4e9, 5e-6, 50e9), (16, 1024, 3e-5, 12.5e9)]
    for n, S, a, bw in cases:
        want = cc.collective_time("all-reduce", "ring", n, S, a, bw)
        got = as_number(candidate(n, S, a, bw), "return seconds as a number")
        if abs(got - want) <= 1e-6 * want:
            continue
        where = f"n={n}, S={S:g} B, α={a:g} s, bandwidth={bw:g} B/s"
        if abs(got - (n - 1) * (a + S / n / bw)) <= 1e-6 * want:
            raise GradeFailure(f"{where}: {got:.4g} s is half the ring all-reduce — that is one "
                               "phase (a reduce-scatter); the all-gather phase costs as much again")
        if abs(got - (2 * n * a + 2 * S / bw)) <= 1e-6 * want or \
                abs(got - 2 * (n - 1) * (a + S / bw)) <= 1e-6 * want:
            raise GradeFailure(f"{where}: {got:.4g} s; each of the 2(n−1) steps moves S/n bytes, "
                               "not S, and there are n−1 steps per phase, not n")
        close_number(got, want, where, rel=1e-6)


@task("collectives.busbw", "matches nccl-tests busbw for all-reduce, all-gather, "
                           "reduce-scatter and broadcast")
def check_busbw(candidate):
    for op in ("all-reduce", "all-gather", "reduce-scatter", "broadcast"):
        for n in (2, 8):
            S, t = 1e9, 0.02
            want = cc.busbw(op, n, S, t)
            got = as_number(candidate(op, n, S, t), "return bytes/s as a number")
            if abs(got - want) <= 1e-6 * want:
                continue
            where = f"{op}, n={n}, S={S:g} B, t={t} s"
            if abs(got - S / t) <= 1e-6 * want:
                raise GradeFailure(f"{where}: {got:.4g} B/s is algbw = S/t; busbw multiplies it "
                                   f"by the fraction of S each link carries "
                                   f"({cc.busbw_factor(op, n):g} here)")
            close_number(got, want, where, rel=1e-6)


@task("collectives.gradient_sync",
      "S = 6e9 bytes, 450e9 bytes/s per direction, ring all-reduce ≈ 23.36 ms")
def check_gradient_sync(candidate):
    ans = candidate()
    if not isinstance(ans, dict) or not {"S_bytes", "bandwidth", "seconds"} <= set(ans):
        raise GradeFailure("return a dict with keys S_bytes, bandwidth, seconds")
    S = 1.5e9 * 4
    if abs(float(ans["S_bytes"]) - 1.5e9) < 1:
        raise GradeFailure("S_bytes: 1.5e9 is the number of gradients (elements); fp32 "
                           "gradients take 4 bytes each")
    close_number(ans["S_bytes"], S, "S_bytes", rel=1e-3)
    bw = float(ans["bandwidth"])
    if abs(bw - 900e9) < 1e6:
        raise GradeFailure("bandwidth: 900 GB/s is NVLink 4's bidirectional total; a ring step "
                           "sends in one direction at 450 GB/s")
    if abs(bw - 450 * 2**30) < 1e6 or abs(bw - 900 * 2**30) < 1e6:
        raise GradeFailure("bandwidth: datasheet GB/s are decimal (1e9 bytes), not GiB (2^30)")
    close_number(bw, 450e9, "bandwidth (bytes/s per direction)", rel=1e-3)
    want = cc.collective_time("all-reduce", "ring", 8, S, 2e-6, 450e9)
    got = float(ans["seconds"])
    if abs(got - want / 1e-3) <= 1e-3 * want / 1e-3:
        raise GradeFailure("seconds: that looks like milliseconds; answer in seconds")
    if abs(got - cc.collective_time("reduce-scatter", "ring", 8, S, 2e-6, 450e9)) < 1e-3 * want:
        raise GradeFailure("seconds: that is one phase; a ring all-reduce is a reduce-scatter "
                           "plus an all-gather, 2(n−1)/n·S·β in all")
    close_number(got, want, "seconds", rel=1e-3)
