"""Ring, recursive-doubling and parameter-server all-reduce against dist, on 1–4 gloo ranks.

Each multi-process test makes ONE ``run`` call that tries many cases on the ranks and returns
plain data; the assertions happen here. The 4-rank test runs first so that the warm pool already
holds four workers for the 2- and 3-rank calls.
"""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

from minipar.collectives import (
    parameter_server_all_reduce,
    recursive_doubling_all_reduce,
    ring,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
)
from minipar.cost.network.collectives import ring_bytes_per_rank
from minipar.runtime.launch import run
from minipar.runtime.tracer import trace

# Ship this module's functions to the ranks by value (workers cannot import a test module).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SIZES = [1, 3, 7, 16, 101, 1000]  # elements: below n, odd, divisible, not divisible


def _inputs(rank, numel):
    g = torch.Generator().manual_seed(1000 * rank + numel)
    return torch.randn(numel, generator=g, dtype=torch.float64)


def _compare_all(rank, n):
    """[(case, numel, max abs difference from dist)] for every algorithm and size."""
    algos = {"ring": ring_all_reduce, "parameter_server": parameter_server_all_reduce}
    if n & (n - 1) == 0:
        algos["recursive_doubling"] = recursive_doubling_all_reduce
    out = []
    for numel in SIZES:
        ref = _inputs(rank, numel)
        dist.all_reduce(ref)
        for name, fn in algos.items():
            x = _inputs(rank, numel)
            fn(x)
            out.append((name, numel, (x - ref).abs().max().item()))
        # reduce-scatter and all-gather on a size divisible by n, against dist's
        full = _inputs(rank, numel * n)
        mine = ring_reduce_scatter(full.clone())
        theirs = torch.empty(numel, dtype=full.dtype)
        dist.reduce_scatter_single(theirs, full)
        out.append(("reduce_scatter", numel, (mine - theirs).abs().max().item()))
        gathered = torch.zeros(numel * n, dtype=full.dtype)
        gathered[rank * numel : (rank + 1) * numel] = full[:numel]
        ring_all_gather(gathered)
        ref_g = torch.empty(numel * n, dtype=full.dtype)
        dist.all_gather_single(ref_g, full[:numel].clone())
        out.append(("all_gather", numel, (gathered - ref_g).abs().max().item()))
    # a 2-D, non-contiguous tensor keeps its shape and gets the right values
    m = _inputs(rank, 35).view(5, 7).t()  # (7, 5), not contiguous
    ref = m.clone()
    dist.all_reduce(ref)
    ring_all_reduce(m)
    out.append(("ring_2d_noncontiguous", 35, (m - ref).abs().max().item()))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("n", [4, 2, 3])
def test_algorithms_equal_dist_all_reduce(n):
    for rank, cases in enumerate(run(_compare_all, n, backend="gloo", timeout=60)):
        for name, numel, err in cases:
            assert err < 1e-9, f"{name} on rank {rank}, {numel} elements, n={n}: error {err}"


def _ring_sent_bytes(rank, n, numels):
    out = []
    for numel in numels:
        x = torch.ones(numel)  # float32: S = 4·numel bytes
        with trace() as tr:
            ring_all_reduce(x)
        out.append((tr.bytes("send"), tr.count("send"), tr.bytes("recv")))
    return out


@pytest.mark.slow
def test_ring_sends_2_n_minus_1_over_n_of_S():
    n, numels = 4, [16, 1000, 1001, 7]
    per_rank = run(_ring_sent_bytes, n, numels, backend="gloo", timeout=60)
    for i, numel in enumerate(numels):
        S = 4 * numel
        sent = [r[i][0] for r in per_rank]
        assert all(r[i][1] == 2 * (n - 1) for r in per_rank)  # 2(n−1) messages
        assert sum(sent) == 2 * (n - 1) * S  # always, in total
        received = [r[i][2] for r in per_rank]
        assert all(received[(r + 1) % n] == sent[r] for r in range(n))  # right neighbour gets it
        if numel % n == 0:  # exactly the formula, per rank
            assert sent == [ring_bytes_per_rank("all-reduce", n, S)] * n
        else:  # chunks differ by one element: within 2 elements of the formula
            assert all(abs(s - 2 * (n - 1) / n * S) <= 2 * 4 for s in sent), sent


def _off_by_one_step(r, n, k):
    """A plausible slip: the reduce-scatter takes the all-gather's chunk indices (r−k, r−k−1),
    one chunk off, so no rank ever adds into the chunk it later broadcasts."""
    return (r - k) % n, (r - k - 1) % n


def _negative_control(rank, n):
    """[error as written, error with the off-by-one step planted in minipar.collectives.ring]:
    the max difference of minipar's ring_all_reduce from dist.all_reduce on the same inputs.
    The step is patched in the module ring_reduce_scatter reads it from, and restored (the
    warm pool's ranks run later tests)."""
    errors = []
    for step in (ring.reduce_scatter_step, _off_by_one_step):
        kept, ring.reduce_scatter_step = ring.reduce_scatter_step, step
        try:
            x, ref = _inputs(rank, 12), _inputs(rank, 12)
            dist.all_reduce(ref)
            ring_all_reduce(x)
        finally:
            ring.reduce_scatter_step = kept
        errors.append((x - ref).abs().max().item())
    return errors


@pytest.mark.slow
def test_equality_check_catches_an_off_by_one_ring():
    errors = run(_negative_control, 4, backend="gloo", timeout=60)
    assert all(ok < 1e-12 and planted > 1e-3 for ok, planted in errors), errors


def _odd_ranks_and_one_rank(rank, n):
    try:
        recursive_doubling_all_reduce(torch.ones(4))
    except ValueError as e:
        return str(e)
    return "no error"


@pytest.mark.slow
def test_recursive_doubling_rejects_three_ranks():
    msgs = run(_odd_ranks_and_one_rank, 3, backend="gloo", timeout=30)
    assert all("power-of-two" in m and "(3)" in m for m in msgs), msgs


def _one_rank(rank, n):
    x = torch.arange(5.0)
    with trace() as tr:
        ring_all_reduce(x)
        recursive_doubling_all_reduce(x)
        parameter_server_all_reduce(x)
    return x.tolist(), tr.count()


@pytest.mark.slow
def test_one_rank_is_a_no_op():
    [(values, calls)] = run(_one_rank, 1, backend="gloo", timeout=30)
    assert values == [0.0, 1.0, 2.0, 3.0, 4.0] and calls == 0


# ------------------------------------------------------------------ a non-default group
SUB = [0, 2]  # a subgroup of 2 of 3 ranks; rank 1 sits out


def _on_subgroup(rank, n):
    """[(case, max abs difference from dist on the same group)]; rank 1 returns []."""
    group = dist.new_group(SUB)
    x = _inputs(rank, 7)
    ring_all_reduce(x)  # control: the default group, as if group were ignored
    if rank not in SUB:
        return []
    ref = _inputs(rank, 7)
    dist.all_reduce(ref, group=group)
    out = [("control_default_group", 7, (x - ref).abs().max().item())]
    for numel in (1, 7, 16):
        ref = _inputs(rank, numel)
        dist.all_reduce(ref, group=group)
        for name, fn in (
            ("ring", ring_all_reduce),
            ("parameter_server", parameter_server_all_reduce),
            ("recursive_doubling", recursive_doubling_all_reduce),
        ):
            x = _inputs(rank, numel)
            fn(x, group=group)
            out.append((name, numel, (x - ref).abs().max().item()))
        full = _inputs(rank, 2 * numel)
        theirs = torch.empty(numel, dtype=full.dtype)
        dist.reduce_scatter_single(theirs, full, group=group)
        mine = ring_reduce_scatter(full.clone(), group=group)
        out.append(("reduce_scatter", numel, (mine - theirs).abs().max().item()))
        me = SUB.index(rank)
        gathered = torch.zeros(2 * numel, dtype=full.dtype)
        gathered[me * numel : (me + 1) * numel] = full[:numel]
        ref_g = torch.empty(2 * numel, dtype=full.dtype)
        dist.all_gather_single(ref_g, full[:numel].clone(), group=group)
        out.append(
            (
                "all_gather",
                numel,
                (ring_all_gather(gathered, group=group) - ref_g).abs().max().item(),
            )
        )
    return out


@pytest.mark.slow
def test_every_algorithm_on_a_subgroup():
    per_rank = run(_on_subgroup, 3, backend="gloo", timeout=120)
    assert per_rank[1] == []
    for rank in SUB:
        (name, _, err), *cases = per_rank[rank]
        assert name == "control_default_group" and err > 1e-3  # the check would catch it
        assert len(cases) == 15
        for name, numel, err in cases:
            assert err < 1e-12, f"rank {rank}: {name} on {numel} elements differs by {err:.1e}"


# ------------------------------------------------------------------ batch_isend_irecv on gloo
def _batched_ring_shift(rank, n, iters):
    x = torch.full((1000,), float(rank))
    y = torch.empty(1000)
    for _ in range(iters):
        ops = [dist.P2POp(dist.isend, x, (rank + 1) % n), dist.P2POp(dist.irecv, y, (rank - 1) % n)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    return y[0].item()


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_batch_isend_irecv_runs_on_gloo(n):
    """The book says it runs on gloo with torch 2.13 (older releases could hang): checked here,
    20 ring shifts; a hang would raise TimeoutError."""
    got = run(_batched_ring_shift, n, 20, backend="gloo", timeout=60)
    assert got == [float((r - 1) % n) for r in range(n)]


def test_fit_ranges_for_the_chapter():
    from minipar.collectives.demo import fit_ranges

    bench = {
        "fits": [
            dict(op="all-reduce", alpha=59e-6, bandwidth=1.6e9, error=None),
            dict(op="broadcast", alpha=314e-6, bandwidth=3.9e9, error=None),
            dict(op="all-gather", alpha=None, bandwidth=None, error="too few"),
        ]
    }
    r = fit_ranges(bench)
    assert r["alpha_us"] == pytest.approx((59, 314)) and r["ops"] == ["all-reduce", "broadcast"]
    assert r["alpha_text"] == "59–314 µs"
    assert r["bandwidth_text"] == "1.6–3.9 GB/s per direction"
    with pytest.raises(ValueError, match=r"fits that succeeded \(0\) must be at least 1: too few"):
        fit_ranges({"fits": bench["fits"][2:]})


# ------------------------------------------------------------------ the ring's chunk schedule
def test_ring_schedule_ends_with_every_sum_everywhere():
    """Pure: after the reduce-scatter rank r owns the full sum of chunk r, after the all-gather
    every chunk of every rank holds all n ranks; each step every rank sends a different chunk."""
    from minipar.collectives.ring import all_gather_step, reduce_scatter_step
    from minipar.collectives.ring import ring_all_reduce_contributions as contributions

    for n in range(1, 7):
        snaps = contributions(n)
        assert len(snaps) == 1 + 2 * (n - 1)
        everyone = frozenset(range(n))
        after_rs = snaps[n - 1][2]
        assert all(after_rs[r][r] == everyone for r in range(n))
        assert all(c == everyone for row in snaps[-1][2] for c in row)
        for step in (reduce_scatter_step, all_gather_step):
            for k in range(n - 1):
                assert sorted(step(r, n, k)[0] for r in range(n)) == list(range(n))
                # what rank r receives is what its left neighbour sends
                assert all(step(r, n, k)[1] == step((r - 1) % n, n, k)[0] for r in range(n))


@pytest.mark.slow
def test_ring_schedule_is_what_the_ranks_do():
    """The pure schedule the book draws equals the real ring's state after every step (rank r
    holds 2^r, so a value's binary digits name the ranks summed into it)."""
    from minipar.collectives.demo import ring_steps
    from minipar.collectives.ring import ring_all_reduce_contributions as contributions

    n = 4
    real = ring_steps(n=n, numel=n)["snapshots"]  # [rank][step] = (phase, k, values)
    for i, (phase, k, held) in enumerate(contributions(n)):
        for r in range(n):
            got_phase, got_k, values = real[r][i]
            assert (got_phase, got_k) == (phase, k)
            got = [frozenset(q for q in range(n) if int(v) >> q & 1) for v in values]
            assert got == held[r], (phase, k, r)


# ------------------------------------------------------------------ the primitives' definitions
def test_primitive_definitions_on_lists():
    from minipar.collectives.primitives import example_inputs, primitive_outputs

    x = example_inputs("all-to-all", 3)
    assert primitive_outputs("all-to-all", x) == [[0, 10, 20], [1, 11, 21], [2, 12, 22]]
    assert primitive_outputs("reduce-scatter", x) == [[30], [33], [36]]
    assert primitive_outputs("reduce", x) == [[30, 33, 36], None, None]
    assert primitive_outputs("send/recv", x)[0] == x[2]
    g = example_inputs("all-gather", 3)
    assert primitive_outputs("all-gather", g)[1] == [0, 1, 10, 11, 20, 21]
    with pytest.raises(ValueError, match=r"op \('gather'\) must be one of"):
        primitive_outputs("gather", x)


@pytest.mark.slow
def test_primitive_definitions_are_what_torch_distributed_returns():
    """The before/after figure draws primitive_outputs; the real gloo calls must agree (reduce:
    on the root only, the rest is unspecified)."""
    from minipar.collectives.demo import run_primitives
    from minipar.collectives.primitives import PRIMITIVES, primitive_outputs

    real = run_primitives(n=4)
    for op in PRIMITIVES:
        want = primitive_outputs(op, real[op]["inputs"])
        for r, (got, expected) in enumerate(zip(real[op]["outputs"], want)):
            if expected is not None:
                assert got == expected, (op, r)
