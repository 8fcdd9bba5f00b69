"""Checkers for the data-parallel exercises (``exercises/data_parallel``).

Each runs the learner's code on gloo ranks, on the layouts its clause table declares
(``[layouts.<task>]``, launched by :meth:`~minipar.grading.declare.Layouts.launch`), and
compares with a single-process run on the whole batch. When the answer is wrong, the checker
recomputes the outcome of each classic mistake in one process (summing instead of averaging,
not communicating, averaging parameters, syncing every micro-step, skipping the all-gather) and
names the one the answer matches.
"""

from __future__ import annotations

from minipar.grading import GradeFailure
from minipar.grading.compare import same
from minipar.grading.declare import Chapter, after_whole, not_whole_world_hint

# its tasks' PASS lines and the words of the mistakes it names: clauses/data_parallel.toml
CH = Chapter("data_parallel")
_DDP = ("BucketedDataParallel",)  # the accumulation exercise is handed the course's DDP

BATCH = 12  # divisible by 2, 3 and 4 ranks


def _same(a, b, atol=1e-6) -> bool:
    """The shared comparison (type, dtype, shape, values) at float32's tolerances."""
    return same(a, b, atol=atol, rtol=1e-5)


def _model():
    """The exercises' model, the same on every rank and in every run (seed 0)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.data_parallel.models import TiedClassifier  # noqa: PLC0415 (lazy: torch)

    torch.manual_seed(0)
    return TiedClassifier()


def _grads(model) -> list:
    """A copy of every parameter's gradient (None for a parameter without one)."""
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def _reference_grads(micro: int = 1, batch: int = BATCH, rank: int = 0, n: int = 1):
    """Gradients of the single-process model on the whole batch (None for frozen); with
    ``n > 1`` on rank ``rank``'s slice only (what that rank's backward computes)."""
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    from minipar.data_parallel.models import token_batches  # noqa: PLC0415 (lazy: torch)

    model = _model()
    x, y = token_batches(1, batch)[0]
    x, y = x.chunk(n)[rank], y.chunk(n)[rank]
    for xc, yc in zip(x.chunk(micro), y.chunk(micro)):
        (F.cross_entropy(model(xc), yc) / micro).backward()
    return _grads(model)


def _diagnose_grads(got, ref, n, rank, changed_params, reduced_bytes) -> None:
    """Raise GradeFailure naming the mistake if ``got`` is not ``ref``."""
    names = [
        "emb.weight (tied with head.weight)",
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
        "scale (frozen)",
    ]
    if changed_params:
        raise CH.fail("parameters averaged")
    local = _reference_grads(rank=rank, n=n)
    for name, g, l, r in zip(names, got, local, ref):
        if r is None:
            if g is not None:
                raise GradeFailure(f"rank {rank}: frozen parameter {name} got a gradient")
            continue
        if _same(g, r):
            continue
        if _same(g, n * r):
            raise CH.fail("summed", rank=rank, n=n)
        for k in (2, 4, 8):
            if k != n and _same(g, n * r / k):
                raise CH.fail("divided by a hard-coded n", rank=rank, n=n, k=k)
        if _same(g, l) and reduced_bytes:
            raise CH.fail(
                "parameters averaged, gradients own", rank=rank, reduced_bytes=reduced_bytes
            )
        if _same(g, l):
            raise CH.fail("not all-reduced", rank=rank, name=name)
        err = (g - r).abs().max().item() if g is not None and g.shape == r.shape else float("nan")
        raise CH.fail("gradient differs", rank=rank, name=name, err=err)


# ----------------------------------------------------------------------------- 01 average
def _local_grads(x, y):
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    model = _model()
    F.cross_entropy(model(x), y).backward()
    return model


def _average_body(gr, size, group, fn):
    """The whole world: ``fn(model)``; a subgroup: ``fn(model, group=group)`` (ranks 0 and 1
    average, rank 2 is alone), each rank's model holding the gradients of its world slice."""
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    from minipar.data_parallel.models import token_batches  # noqa: PLC0415 (lazy: torch)
    from minipar.runtime.tracer import trace  # noqa: PLC0415 (lazy: tracer)

    rank, n = dist.get_rank(), dist.get_world_size()
    x, y = token_batches(1, BATCH)[0]
    x, y = x.chunk(n)[rank], y.chunk(n)[rank]
    model = _local_grads(x, y)
    before = [p.detach().clone() for p in model.parameters()]
    with trace() as tr:
        fn(model) if group is None else fn(model, group=group)
    return dict(
        changed=any(not torch.equal(a, p) for a, p in zip(before, model.parameters())),
        grads=_grads(model),
        bytes=tr.bytes(),
    )


def _check_subgroup(results) -> None:
    """Ranks 0 and 1 called with a group of ranks [0, 1], rank 2 with a group of itself."""
    local = [_reference_grads(rank=r, n=3) for r in range(3)]
    pair = [None if a is None else (a + b) / 2 for a, b in zip(local[0], local[1])]
    everyone = [None if a is None else (a + b + c) / 3 for a, b, c in zip(*local)]
    summed_pair_over_3 = [None if a is None else (a + b) / 3 for a, b in zip(local[0], local[1])]
    for rank, r in enumerate(results):
        want = pair if rank < 2 else local[2]
        got = r["grads"]
        if all(w is None or _same(g, w) for g, w in zip(got, want)):
            continue
        if rank < 2 and all(w is None or _same(g, w) for g, w in zip(got, everyone)):
            raise CH.fail("group ignored", rank=rank)
        if rank < 2 and all(w is None or _same(g, w) for g, w in zip(got, summed_pair_over_3)):
            raise CH.fail("divided by the world size", rank=rank)
        raise CH.fail("not the group's mean", rank=rank)


AVERAGE = CH.layouts("average")  # 2 ranks; 3 ranks, then groups {0, 1} and {2} of them


@CH.task("average_gradients")
def check_average_gradients(fn, **_):
    ref = _reference_grads()
    for batch in AVERAGE.batches(_average_body, fn):
        for r in (c for c in batch if c["whole"]):
            _diagnose_grads(r["grads"], ref, r["world"], r["rank"], r["changed"], r["bytes"])
        sub = [c for c in batch if not c["whole"]]
        if sub:
            _check_subgroup(sub)


# ----------------------------------------------------------------------------- 02 bucketed
BUCKET_RANKS, CAP = 3, 2048  # 3 ranks: a hard-coded "/ 2" shows
BUCKETED = CH.layouts("bucketed")  # the whole world of BUCKET_RANKS ranks


def expected_buckets(model, cap: int) -> int:
    """Buckets of the exercise's rule: trainable parameters in reverse order, a bucket closed
    once it holds ``cap`` bytes or more."""
    count, size = 0, None
    for p in reversed([p for p in model.parameters() if p.requires_grad]):
        if size is None or size >= cap:
            count, size = count + 1, 0
        size += p.numel() * p.element_size()
    return count


def _bucketed_body(rank, n, group, fn):
    make, cap = fn
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    from minipar.data_parallel.models import token_batches  # noqa: PLC0415 (lazy: torch)
    from minipar.runtime.tracer import trace  # noqa: PLC0415 (lazy: tracer)

    model = _model()
    # Our hooks go in first, so for each parameter they run before the learner's: at the last
    # gradient's hook, the all-reduces already started were launched during backward.
    current, seen = {}, []
    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(
                lambda p: (
                    seen.append(current["tr"].count("all_reduce")) if "tr" in current else None
                )
            )
    dp = make(model, cap)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    out = {}
    for step, (x, y) in enumerate(token_batches(2, BATCH)):
        opt.zero_grad()
        before = [p.detach().clone() for p in model.parameters()]
        seen.clear()
        with trace() as tr:
            current["tr"] = tr
            F.cross_entropy(model(x.chunk(n)[rank]), y.chunk(n)[rank]).backward()
            current.clear()
            dp.finish()
        if step == 0:
            out.update(
                grads=_grads(model),
                changed=any(not torch.equal(a, p) for a, p in zip(before, model.parameters())),
                calls=tr.count("all_reduce"),
                bytes=tr.bytes("all_reduce"),
                all_bytes=tr.bytes(),
                before_last=seen[-1] if seen else 0,
            )
        opt.step()
    out["params"] = [p.detach().clone() for p in model.parameters()]
    return out


@CH.task("bucketed")
def check_bucketed(make, **_):
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    from minipar.data_parallel.models import token_batches  # noqa: PLC0415 (lazy: torch)

    n, cap = BUCKET_RANKS, CAP
    ref = _reference_grads()
    results = list(BUCKETED.launch(_bucketed_body, (make, cap)))
    model = _model()
    psi = sum(p.numel() for p in model.parameters() if p.requires_grad)
    buckets = expected_buckets(model, cap)
    for rank, r in enumerate(results):
        _diagnose_grads(r["grads"], ref, n, rank, r["changed"], r["all_bytes"])
        if r["bytes"] != psi * 4:
            raise CH.fail("bytes not Ψ·4", rank=rank, bytes=r["bytes"], want=psi * 4)
        if r["calls"] != buckets:
            raise CH.fail(
                "not one all-reduce per bucket",
                rank=rank,
                calls=r["calls"],
                cap=cap,
                buckets=buckets,
            )
        if r["before_last"] == 0:
            raise CH.fail("no overlap")
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for x, y in token_batches(2, BATCH):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    for rank, r in enumerate(results):
        if not all(_same(a, b) for a, b in zip(r["params"], model.parameters())):
            raise CH.fail("bucket state not reset", rank=rank)


# ----------------------------------------------------------------------------- 03 accumulation
K, ACC_RANKS = 4, 3  # micro-batches per step, ranks (neither is 2)
ACCUMULATION = CH.layouts("accumulation", allow=_DDP)  # the whole world of ACC_RANKS ranks


def _accumulation_body(rank, n, group, fn):
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    from minipar.data_parallel import BucketedDataParallel  # noqa: PLC0415 (lazy: torch)
    from minipar.data_parallel.models import token_batches  # noqa: PLC0415 (lazy: torch)
    from minipar.runtime.tracer import trace  # noqa: PLC0415 (lazy: tracer)

    model = _model()
    dp = BucketedDataParallel(model, bucket_cap_mb=25.0)
    backwards = []
    model.fc2.bias.register_post_accumulate_grad_hook(lambda p: backwards.append(1))
    x, y = token_batches(1, BATCH * K // 2 * n)[0]
    x, y = x.chunk(n)[rank], y.chunk(n)[rank]  # (K·b,) this rank's slice
    with trace() as tr:
        fn(model, dp, list(zip(x.chunk(K), y.chunk(K))), F.cross_entropy)
    return dict(grads=_grads(model), calls=tr.count("all_reduce"), backwards=len(backwards))


@CH.task("accumulation", allow=_DDP)
def check_accumulation(fn, **_):
    n = ACC_RANKS
    results = list(ACCUMULATION.launch(_accumulation_body, fn))
    ref = _reference_grads(micro=1, batch=BATCH * K // 2 * n)
    for rank, r in enumerate(results):
        if r["backwards"] != K:
            raise CH.fail(
                "not one backward per micro-batch", rank=rank, backwards=r["backwards"], K=K
            )
        if r["calls"] == 0:
            raise GradeFailure("no all-reduce at all: call dp.finish() after the last backward")
        if r["calls"] > 1:
            raise CH.fail("synced every micro-batch", calls=r["calls"], synced=K - 1)
        for g, want in zip(r["grads"], ref):
            if want is None:
                continue
            if _same(g, K * want, atol=1e-5):
                raise CH.fail("loss not divided by K", K=K)
            if not _same(g, want, atol=1e-5):
                raise CH.fail("accumulated gradients differ", rank=rank)


# ----------------------------------------------------------------------------- 04 ZeRO-1
P, STEPS = 24, 3
# the whole world of 2, then of 3 ranks, then groups {0, 1} and {2} of the 3
ZERO1 = CH.layouts("zero1", hint=not_whole_world_hint("DP"))


def _zero1_problem():
    import torch  # noqa: PLC0415 (lazy: torch)

    g = torch.Generator().manual_seed(7)
    X, y = torch.randn(BATCH, P, generator=g), torch.randn(BATCH, generator=g)  # (b, P), (b,)
    return X, y, torch.randn(P, generator=g) / 4


def _zero1_body(rank, n, group, fn):
    """``rank`` of ``n``: the rank in its group and the group's size; a group trains alone on
    its own data, as a world of ``n`` ranks would (``fn`` gets ``group=`` only in a subgroup)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.runtime.tracer import trace  # noqa: PLC0415 (lazy: tracer)

    kw = {} if group is None else {"group": group}
    X, y, w0 = _zero1_problem()
    flat = w0.clone()  # (P,) on every rank
    shard = torch.nn.Parameter(flat[rank * P // n : (rank + 1) * P // n].clone())  # (P/n,)
    opt = torch.optim.SGD([shard], lr=0.05, momentum=0.9)
    Xr, yr = X.chunk(n)[rank], y.chunk(n)[rank]
    with trace() as tr:
        for _ in range(STEPS):
            w = flat.clone().requires_grad_(True)
            ((Xr @ w - yr) ** 2).mean().backward()
            fn(flat, w.grad, shard, opt, **kw)
    return dict(
        flat=flat,
        ops={op: s.bytes for op, s in tr.summary().items()},
        state=sum(
            v.numel() for st in opt.state.values() for v in st.values() if torch.is_tensor(v)
        ),
    )


def _zero1_reference(n, mode):
    """Flat parameters after STEPS steps in one process; ``mode`` simulates a mistake."""
    import torch  # noqa: PLC0415 (lazy: torch)

    X, y, w0 = _zero1_problem()
    w = torch.nn.Parameter(w0.clone())
    opt = torch.optim.SGD([w], lr=0.05, momentum=0.9)
    for _ in range(STEPS):
        if mode != "accumulate":  # else step k uses the sum of steps 1..k's gradients
            opt.zero_grad()
        ((X @ w - y) ** 2).mean().backward()
        if mode == "sum":
            w.grad.mul_(n)
        opt.step()
    return w.detach()


@CH.task("zero1_step")
def check_zero1_step(fn, **_):
    _, _, w0 = _zero1_problem()
    for r in after_whole(ZERO1.launch(_zero1_body, fn)):
        n, rank, where = r["size"], r["gr"], r["where"]
        ref = _zero1_reference(n, "exact")
        got, lo, hi = r["flat"], rank * P // n, (rank + 1) * P // n
        if _same(got, ref, atol=1e-5):
            if r["state"] > P // n:
                raise CH.fail("optimizer state not sharded")
            if n > 1 and ("reduce_scatter" not in r["ops"] or "all_reduce" in r["ops"]):
                used = ", ".join(sorted(set(r["ops"]) - {"all_gather"})) or "nothing"
                raise CH.fail("no reduce-scatter", n=n, used=used)
            continue
        if _same(got, _zero1_reference(n, "sum"), atol=1e-5):
            raise CH.fail("zero1 summed", n=n)
        if _same(got, _zero1_reference(n, "accumulate"), atol=1e-5):
            raise CH.fail("gradient accumulated across steps", rank=rank, n=n, STEPS=STEPS)
        if _same(got[lo:hi], ref[lo:hi], atol=1e-5):
            raise CH.fail("shards not all-gathered", rank=rank, n=n)
        if "all_gather" not in r["ops"]:
            raise CH.fail("no all-gather", rank=rank, n=n)
        if n > 1 and _same(got, w0, atol=0):
            raise CH.fail("shard is a copy", rank=rank, n=n)
        if r["after_whole"]:
            raise CH.fail("zero1 group ignored", where)
        raise CH.fail("parameters differ", rank=rank, n=n, err=(got - ref).abs().max().item())
