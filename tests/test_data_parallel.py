"""Data parallelism: every variant equals a single process on the whole batch; traffic and
model-state memory equal the cost model exactly; negative controls show the checks bite."""

import functools

import pytest
import torch
import torch.distributed as dist

from minipar.cost.chapters.data_parallel import dp_allreduce_bytes_per_rank, zero_bytes_per_rank
from minipar.cost.chapters.memory_time import model_state_bytes
from minipar.data_parallel import BucketedDataParallel, ZeRO, all_reduce_gradients
from minipar.data_parallel.experiments import ring_bytes, zero_on_rank
from minipar.data_parallel.models import TiedClassifier, token_batches
from minipar.data_parallel.train import (
    VARIANTS,
    DPOptions,
    global_losses,
    max_param_error,
    train_rank,
    train_reference,
)
from minipar.runtime.device import gpu_count
from minipar.runtime.launch import run
from minipar.runtime.tracer import trace

STEPS, BATCH, ATOL = 3, 8, 1e-6
OPTIMIZERS = ("sgd", "adam")


# ------------------------------------------------------------------ buggy variants (controls)
def summing_gradients(model):
    """Bug: all-reduce without dividing by n (the sum of the ranks' gradients)."""
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)


def averaging_parameters_hook(model):
    """Bug: a hook that averages the parameter itself instead of its gradient."""
    n = dist.get_world_size()

    def hook(p):
        dist.all_reduce(p.data)  # should be p.grad
        p.data.div_(n)

    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(hook)


def _train_buggy(rank, n, bug, optimizer):
    torch.manual_seed(0)
    model = TiedClassifier()
    opt = (
        torch.optim.SGD(model.parameters(), lr=0.1)
        if optimizer == "sgd"
        else torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)
    )
    if bug == "average_parameters":
        averaging_parameters_hook(model)
    for x, y in token_batches(STEPS, BATCH):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x.chunk(n)[rank]), y.chunk(n)[rank]).backward()
        if bug == "sum":
            summing_gradients(model)
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


# ------------------------------------------------------------------ one launch for everything
def _all_on_rank(rank, n):
    out = {"params": {}, "losses": {}, "bytes": {}, "buggy": {}}
    for opt in OPTIMIZERS:
        for v in VARIANTS:
            torch.manual_seed(0)
            tr = trace() if opt == "sgd" else None
            losses, params = train_rank(
                rank, n, v, TiedClassifier(), opt, token_batches(STEPS, BATCH), DPOptions(tracer=tr)
            )
            out["losses"][v, opt], out["params"][v, opt] = losses, params
            if tr is not None:
                out["bytes"][v] = {op: s.bytes / STEPS for op, s in tr.summary().items()}
        for bug in ("sum", "average_parameters"):
            out["buggy"][bug, opt] = _train_buggy(rank, n, bug, opt)
    out["zero"], out["psi"] = zero_on_rank(rank, n)
    return out


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"n{n}")
def launched(request):
    n = request.param
    return n, run(_all_on_rank, n, backend="gloo", timeout=120)


@pytest.fixture(scope="module")
def references():
    refs = {}
    for opt in OPTIMIZERS:
        for micro in (1, 4, 8):  # accumulation's micro-batch grouping (n·2 chunks)
            torch.manual_seed(0)
            refs[opt, micro] = train_reference(
                TiedClassifier(), opt, token_batches(STEPS, BATCH), micro=micro
            )
    return refs


def _reference(refs, variant, opt, n):
    return refs[opt, 2 * n if variant == "accumulation" else 1]


# ------------------------------------------------------------------ equality with one process
@pytest.mark.slow
@pytest.mark.parametrize("opt", OPTIMIZERS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_equals_single_process(launched, references, variant, opt):
    n, results = launched
    ref_losses, ref_params = _reference(references, variant, opt, n)
    for rank, r in enumerate(results):
        err = max_param_error(r["params"][variant, opt], ref_params)
        assert err < ATOL, f"{variant}/{opt} rank {rank}: parameters differ by {err:.2e}"
    losses = global_losses([r["losses"][variant, opt] for r in results])
    # a loss of ~3.4 carries float32 rounding of ~4e-7 per operation: compare relatively
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses)) < ATOL


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["sum", "average_parameters"])
def test_negative_controls_are_caught(launched, references, bug):
    n, results = launched
    for opt in OPTIMIZERS:
        err = max_param_error(results[0]["buggy"][bug, opt], references[opt, 1][1])
        assert err > 100 * ATOL, f"the check would not catch {bug!r} with {opt} (err {err:.1e})"


# ------------------------------------------------------------------ traffic = cost model
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["naive", "bucketed", "accumulation", "ddp", "zero0"])
def test_all_reduce_traffic_is_psi_times_4(launched, variant):
    n, results = launched
    psi = results[0]["psi"]
    traced = dict(results[0]["bytes"][variant])
    if variant == "ddp":  # DDP rebuilds its buckets once, after step 1: rank 0 broadcasts the
        assert traced.pop("broadcast") * STEPS < 100  # order (a few ints), not gradients
    assert traced == {"all_reduce": psi * 4}, traced
    assert ring_bytes(traced, n) == pytest.approx(dp_allreduce_bytes_per_rank(psi * 4, n))


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_traffic(launched, stage):
    n, results = launched
    psi = results[0]["psi"]
    assert psi % n == 0  # no padding, so traced sizes are exactly Ψ·4
    traced = results[0]["bytes"][f"zero{stage}"]
    expected = {"reduce_scatter": psi * 4, "all_gather": (2 if stage == 3 else 1) * psi * 4}
    assert traced == expected
    assert ring_bytes(traced, n) == pytest.approx(zero_bytes_per_rank(stage, psi * 4, n))
    if stage == 3:
        assert ring_bytes(traced, n) == pytest.approx(1.5 * dp_allreduce_bytes_per_rank(psi * 4, n))


# ------------------------------------------------------------------ memory = cost model
@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_model_state_memory(launched, stage):
    n, results = launched
    psi = results[0]["psi"]
    model = model_state_bytes(psi, d=n, zero=stage, weight_bytes=4, grad_bytes=4, optimizer_bytes=8)
    for r in results:
        measured, _ = r["zero"][stage]
        assert (measured["weights"], measured["gradients"], measured["optimizer"]) == (
            model.weights,
            model.gradients,
            model.optimizer,
        )


# ------------------------------------------------------------------ fast, single-process
def _one_rank(rank, n, scale=1.0):
    """A wrapped model and a plain one, same seed and batch, two SGD steps: on a group of one
    rank the gradients and the parameters after each step must be bit-identical. ``scale``
    multiplies the wrapped model's gradients, the classic bug this check must catch."""
    torch.manual_seed(0)
    model = TiedClassifier()
    torch.manual_seed(0)
    plain = TiedClassifier()
    dp = BucketedDataParallel(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, plain)]
    same_grads = same_params = True
    for x, y in token_batches(2, 4):
        for m in (model, plain):
            torch.nn.functional.cross_entropy(m(x), y).backward()
        dp.finish()
        all_reduce_gradients(model)
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(scale)
        same_grads &= all(
            (a.grad is None and b.grad is None) or torch.equal(a.grad, b.grad)
            for a, b in zip(model.parameters(), plain.parameters())
        )
        for o in opts:
            o.step()
            o.zero_grad()
        same_params &= all(
            torch.equal(a, b) for a, b in zip(model.parameters(), plain.parameters())
        )
    return same_grads, same_params


@pytest.mark.slow
def test_one_rank_group_is_a_no_op():
    same_grads, same_params = run(_one_rank, 1, backend="gloo")[0]
    assert same_grads and same_params
    # negative control: a gradient scaled on the way (e.g. summed twice) changes both
    assert run(functools.partial(_one_rank, scale=2.0), 1, backend="gloo")[0] == (False, False)


@pytest.mark.slow
def test_bucket_order_and_sizes():
    run(functools.partial(_bucket_layout), 1, backend="gloo")


def _bucket_layout(rank, n):
    model = TiedClassifier()
    dp = BucketedDataParallel(model, bucket_cap_mb=4096 / 2**20)  # 4 KiB buckets
    flat = [p for b in dp.buckets for p in b]
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert flat == trainable[::-1]  # reverse order, each once
    assert all(p is not model.scale for p in flat)  # frozen left out
    assert len(dp.buckets) > 1


@pytest.mark.slow
def test_zero_rejects_bad_stage():
    from minipar.runtime.launch import RankError

    with pytest.raises(RankError, match=r"ZeRO stage \(4\) must be 0, 1, 2 or 3"):
        run(lambda r, n: ZeRO(TiedClassifier(), 4, None), 1, backend="gloo")


# ------------------------------------------------------------------ the bench command
@pytest.mark.slow
def test_bench_dp_runs_tiny_and_prints_the_keys(capsys):
    import json

    from minipar.cli import main

    assert (
        main(
            [
                "bench",
                "data_parallel",
                "--ranks",
                "2",
                "--steps",
                "1",
                "--rounds",
                "1",
                "--width",
                "16",
                "--depth",
                "2",
                "--batch",
                "4",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)  # stdout: the JSON object and nothing else
    t = out["step_seconds"]
    assert set(t) == {"compute", "naive", "bucketed", "ddp"} and min(t.values()) > 0
    assert out["params"] == 2 * (16 * 16 + 16) and out["ranks"] == 2
    assert (out["batch_per_rank"], out["bucket_cap_mb"]) == (4, 1.0)
    assert out["naive_to_ddp"] == pytest.approx(t["ddp"] / t["naive"])
    assert out["bucketed_to_ddp"] == pytest.approx(t["ddp"] / t["bucketed"])
    assert out["ddp_to_compute"] == pytest.approx(t["compute"] / t["ddp"])
    for v, seconds in t.items():  # samples per second over all ranks
        assert out["samples_per_second"][v] == pytest.approx(2 * 4 / seconds)
    # the short name is an alias of the same command
    assert main(["bench", "dp", "--ranks", "1"]) == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--ranks", "1"], "--ranks (1) must be >= 2"),
        (["--bucket-mb", "0"], "--bucket-mb (0.0) must be > 0"),
        (
            ["--ranks", "16", "--backend", "nccl"],
            "--backend nccl: backend 'nccl' needs one GPU per "
            f"rank: world_size (16) > GPUs visible ({gpu_count()}); use backend='gloo' or fewer ranks",
        ),
    ],
)
def test_bench_dp_bad_input_is_one_line(capsys, argv, message):
    from minipar.cli import main

    assert main(["bench", "dp", *argv]) == 2
    assert capsys.readouterr().err.strip() == f"minipar bench: error: {message}"


# ------------------------------------------------------------------ the contract (float64, n=3)
# What PyTorch DDP does, checked against one process: every synced backward all-reduces;
# parameters unused on some ranks are averaged with zeros, unused on every rank keep grad None
# and are not moved; replicas start from rank 0's parameters; ZeRO keeps float64; any output
# structure; unequal micro-batches; a process group that is not the default one.
ATOL64 = 1e-12
SUB = [0, 2]  # the subgroup: 2 of 3 ranks
SUB_VARIANTS = ("naive", "bucketed", "accumulation", "zero0", "zero1", "zero2", "zero3", "ddp")
BRANCHY = ("naive", "bucketed", "zero0", "zero1", "zero2", "zero3", "ddp")


def _branchy_data(steps, n, b=2, h=8, vocab=5):
    g = torch.Generator().manual_seed(3)
    return [
        (
            torch.randn(n * b, h, generator=g, dtype=torch.float64),
            torch.randint(vocab, (n * b,), generator=g),
        )
        for _ in range(steps)
    ]


def adamw(ps):
    return torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1)  # decay moves any non-None grad


def _branchy_reference(n, branch_ranks, steps=STEPS, zero_unused=False):
    """One process: the loss is the mean over ranks of each rank's loss (branch on some)."""
    from minipar.data_parallel.models import Branchy

    F = torch.nn.functional
    torch.manual_seed(0)
    model = Branchy().double()
    opt = adamw(model.parameters())
    grads = None
    for x, y in _branchy_data(steps, n):
        opt.zero_grad()
        sum(
            F.cross_entropy(model(xr, use_branch=r in branch_ranks)["logits"], yr)
            for r, (xr, yr) in enumerate(zip(x.chunk(n), y.chunk(n)))
        ).div(n).backward()
        for p in model.parameters():
            if zero_unused and p.grad is None:  # the bug, for the control
                p.grad = torch.zeros_like(p)
        if grads is None:
            grads = {
                k: None if p.grad is None else p.grad.clone() for k, p in model.named_parameters()
            }
        opt.step()
    return grads, {k: p.detach().clone() for k, p in model.named_parameters()}


def _branchy_rank(rank, n, variant, branch_ranks, steps=STEPS):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from minipar.data_parallel.models import Branchy

    F = torch.nn.functional
    torch.manual_seed(0)
    model = Branchy().double()
    adam = adamw
    fwd, zero, opt = model, None, None
    if variant.startswith("zero"):
        zero = ZeRO(model, int(variant[-1]), adam, find_unused_parameters=True)
    elif variant == "bucketed":
        BucketedDataParallel(model, bucket_cap_mb=0.0002, find_unused_parameters=True)
    elif variant == "ddp":
        fwd = DDP(model, find_unused_parameters=True)
    if zero is None:
        opt = adam(model.parameters())
    grads = None
    with trace() as tr:
        for x, y in _branchy_data(steps, n):
            (zero or opt).zero_grad()
            F.cross_entropy(
                fwd(x.chunk(n)[rank], use_branch=rank in branch_ranks)["logits"], y.chunk(n)[rank]
            ).backward()
            if variant == "naive":
                all_reduce_gradients(model, find_unused_parameters=True)
            if grads is None and zero is None:
                grads = {
                    k: None if p.grad is None else p.grad.clone()
                    for k, p in model.named_parameters()
                }
            (zero or opt).step()
    names = [k for k, _ in model.named_parameters()]
    params = zero.full_parameters() if zero else [p.detach().clone() for p in model.parameters()]
    ops = {op: st.bytes / steps for op, st in tr.summary().items()}
    return grads, dict(zip(names, params)), ops


def _no_sync_section(rank, n, out):
    """Backward three times without no_sync: DDP's semantics, 3 all-reduces."""
    F = torch.nn.functional
    for impl in ("ours", "ddp"):
        torch.manual_seed(0)
        model = TiedClassifier().double()
        fwd = model
        if impl == "ours":
            BucketedDataParallel(model, bucket_cap_mb=0.001)
        else:
            from torch.nn.parallel import DistributedDataParallel as DDP

            fwd = DDP(model)
        x, y = token_batches(1, 6 * n)[0]
        with trace() as tr:
            for xc, yc in zip(x.chunk(n)[rank].chunk(3), y.chunk(n)[rank].chunk(3)):
                (F.cross_entropy(fwd(xc), yc) / 3).backward()
        out["no_sync", impl] = (
            [p.grad.clone() for p in model.parameters() if p.requires_grad],
            tr.bytes("all_reduce"),
        )


def _unused_section(rank, n, out):
    """Unused parameters: branch used on rank 0 only, spare on no rank."""
    for v in BRANCHY:
        *out["branchy", v], out["branchy_bytes", v] = _branchy_rank(rank, n, v, {0})


def _start_section(rank, n, out):
    """Replicas start from rank 0's parameters (each rank builds its model from its own seed)."""
    for impl in ("bucketed", "zero1", "zero3"):
        torch.manual_seed(rank)
        model = TiedClassifier().double()
        if impl == "bucketed":
            BucketedDataParallel(model)
            out["start", impl] = [p.detach().clone() for p in model.parameters() if p.requires_grad]
        else:
            zero = ZeRO(model, int(impl[-1]), make_sgd)
            out["start", impl] = zero.full_parameters()
            out["dtype", impl] = (zero.flat.dtype, zero.shard()[2].dtype, zero.shard()[:2])


def _accumulation_section(rank, n, out):
    """Unequal micro-batches (1, 2, 3) on equal ranks; then unequal ranks (r+2 samples)."""
    from minipar.data_parallel import accumulation_step

    F = torch.nn.functional
    x, y = token_batches(1, 6 * n)[0]
    xr, yr = x.chunk(n)[rank], y.chunk(n)[rank]  # (6,)
    sizes = [r + 2 for r in range(n)]
    lo = sum(sizes[:rank])
    cases = {
        "micro": ([(xr[a:b], yr[a:b]) for a, b in ((0, 1), (1, 3), (3, 6))], None),
        "ranks": (
            [
                (x[lo : lo + 1], y[lo : lo + 1]),
                (x[lo + 1 : lo + sizes[rank]], y[lo + 1 : lo + sizes[rank]]),
            ],
            sum(sizes),
        ),
    }
    for case, (mbs, total) in cases.items():
        torch.manual_seed(0)
        model = TiedClassifier().double()
        dp = BucketedDataParallel(model)
        kw = {"global_samples": total, "global_loss": True} if total else {"global_loss": True}
        loss = accumulation_step(model, dp, mbs, F.cross_entropy, **kw)
        out["accumulation", case] = (
            [p.grad.clone() for p in model.parameters() if p.requires_grad],
            loss,
        )


def _group_section(rank, n, out):
    """Every implementation on a subgroup of 2 of the 3 ranks (rank 1 sits out)."""
    from minipar.data_parallel import broadcast_parameters

    group = dist.new_group(SUB)
    if rank in SUB:
        torch.manual_seed(rank + 1)  # rank 2 differs from rank 0 (seed 1)
        model = TiedClassifier().double()
        broadcast_parameters(model, group)  # from group rank 0 = global rank 0
        out["broadcast"] = [p.detach().clone() for p in model.parameters()]
        for v in SUB_VARIANTS:
            torch.manual_seed(0)
            out["group", v] = train_rank(
                SUB.index(rank),
                len(SUB),
                v,
                TiedClassifier().double(),
                "adam",
                token_batches(STEPS, BATCH),
                DPOptions(group=group),
            )


def _overlap_section(rank, n, out):
    """ZeRO-1 whose all-gathers the next forward waits for layer by layer."""
    from minipar.data_parallel.overlap import zero1_prefetch_on_rank

    out["overlap"] = zero1_prefetch_on_rank(rank, n, 32, 4, 4, 3, torch.float64)


CLIP, CLIP_LR = 0.1, 0.5


def _clip_section(rank, n, out):
    """ZeRO stages 0-3 clipping by the global gradient norm (SGD, 3 steps)."""
    F = torch.nn.functional
    for stage in (0, 1, 2, 3):
        torch.manual_seed(0)
        model = TiedClassifier().double()
        zero = ZeRO(model, stage, lambda ps: torch.optim.SGD(ps, lr=CLIP_LR))
        norms = []
        for x, y in token_batches(STEPS, 6 * n):
            zero.zero_grad()
            F.cross_entropy(model(x.chunk(n)[rank]), y.chunk(n)[rank]).backward()
            norms.append(zero.step(max_norm=CLIP))
        out["clip", stage] = (zero.full_parameters(), norms)


def _clip_reference(per_shard: int = 0):
    """One process, whole batch, clip_grad_norm_; ``per_shard`` > 0 simulates the classic bug
    (each of that many shards of the flat gradient clipped by its own norm)."""
    torch.manual_seed(0)
    model = TiedClassifier().double()
    ps = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(ps, lr=CLIP_LR)
    norms = []
    for x, y in token_batches(STEPS, 18):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if per_shard:
            flat = torch.cat([p.grad.reshape(-1) for p in ps])
            for chunk in flat.tensor_split(per_shard):
                chunk.mul_((CLIP / (chunk.norm() + 1e-6)).clamp(max=1.0))
            offset = 0
            for p in ps:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        else:
            norms.append(torch.nn.utils.clip_grad_norm_(ps, CLIP).item())
        opt.step()
    return ps, norms


# ZeRO + find_unused_parameters + Adam: the branch is used on rank 0 in steps 0, 2, 3 and on no
# rank in step 1. The shard is one tensor with one Adam step count: step 1 restores the branch's
# values and moments but the count still advances (the difference documented in zero.py).
SKIP_PLAN = ({0}, set(), {0}, {0})


def adam(ps):
    return torch.optim.Adam(ps, lr=0.01)


def _skip_then_use_section(rank, n, out):
    from minipar.data_parallel.models import Branchy

    F = torch.nn.functional
    data = _branchy_data(len(SKIP_PLAN), n)
    for stage in (0, 1, 2, 3):
        torch.manual_seed(0)
        model = Branchy().double()
        zero = ZeRO(model, stage, adam, find_unused_parameters=True)
        for (x, y), users in zip(data, SKIP_PLAN):
            zero.zero_grad()
            F.cross_entropy(
                model(x.chunk(n)[rank], use_branch=rank in users)["logits"], y.chunk(n)[rank]
            ).backward()
            zero.step()
        names = [k for k, _ in model.named_parameters()]
        out["skip", stage] = dict(zip(names, zero.full_parameters()))


def _skip_reference(n, count_skipped_step: bool):
    """One process with torch.optim.Adam; ``count_skipped_step`` adds 1 to the branch's own
    step count in the step where it has no gradient (what one flat shard's count does)."""
    from minipar.data_parallel.models import Branchy

    F = torch.nn.functional
    torch.manual_seed(0)
    model = Branchy().double()
    opt = adam(model.parameters())
    for (x, y), users in zip(_branchy_data(len(SKIP_PLAN), n), SKIP_PLAN):
        opt.zero_grad()
        sum(
            F.cross_entropy(model(xr, use_branch=r in users)["logits"], yr)
            for r, (xr, yr) in enumerate(zip(x.chunk(n), y.chunk(n)))
        ).div(n).backward()
        opt.step()
        if count_skipped_step and not users:
            for p in model.branch.parameters():
                opt.state[p]["step"] += 1
    return {k: p.detach().clone() for k, p in model.named_parameters()}


SECTIONS = (
    _no_sync_section,
    _unused_section,
    _start_section,
    _accumulation_section,
    _group_section,
    _overlap_section,
    _clip_section,
    _skip_then_use_section,
)


def _contract_on_rank(rank, n):
    out = {"errors": {}}
    for section in SECTIONS:  # one section's failure must not hide the others'
        try:
            section(rank, n, out)
        except Exception as e:  # reported by the section's test
            out["errors"][section.__name__] = f"{type(e).__name__}: {e}"
    return out


def _ok(contract, section):
    for rank, r in enumerate(contract):
        assert section.__name__ not in r["errors"], f"rank {rank}: {r['errors']}"


def make_sgd(ps):
    return torch.optim.SGD(ps, lr=0.1)


@pytest.fixture(scope="module")
def contract():
    return run(_contract_on_rank, 3, backend="gloo", timeout=300)


def _double_reference_grads(batch):
    torch.manual_seed(0)
    model = TiedClassifier().double()
    x, y = token_batches(1, batch)[0]
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return [p.grad for p in model.parameters() if p.requires_grad], loss.item()


@pytest.mark.slow
def test_every_synced_backward_all_reduces_like_ddp(contract):
    _ok(contract, _no_sync_section)
    ref, _ = _double_reference_grads(18)
    psi = sum(g.numel() for g in ref)
    for r in contract:
        for impl in ("ours", "ddp"):
            grads, nbytes = r["no_sync", impl]
            assert max((g - w).abs().max().item() for g, w in zip(grads, ref)) < ATOL64, impl
            assert nbytes == 3 * psi * 8, (impl, nbytes)  # three backward, three reductions
    # control: the old behaviour (only the first micro-batch's backward all-reduced, the other
    # two kept local), computed in one process, fails the comparison above on every rank
    for rank, grads in enumerate(_first_microbatch_only_grads(3)):
        assert max((g - w).abs().max().item() for g, w in zip(grads, ref)) > 1e-3, rank


def _first_microbatch_only_grads(n):
    """Per rank, what a DP that all-reduced only the first of three micro-batches leaves:
    mean over ranks of micro-batch 0's gradient + the rank's own micro-batches 1 and 2."""
    F = torch.nn.functional
    x, y = token_batches(1, 6 * n)[0]
    per = []  # per[r][k]: rank r, micro-batch k, its grads
    for xr, yr in zip(x.chunk(n), y.chunk(n)):
        per.append([])
        for xc, yc in zip(xr.chunk(3), yr.chunk(3)):
            torch.manual_seed(0)
            model = TiedClassifier().double()
            (F.cross_entropy(model(xc), yc) / 3).backward()
            per[-1].append([p.grad for p in model.parameters() if p.requires_grad])
    shared = [sum(per[r][0][i] for r in range(n)) / n for i in range(len(per[0][0]))]
    return [[a + b + c for a, b, c in zip(shared, per[r][1], per[r][2])] for r in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("variant", BRANCHY)
def test_unused_parameters_follow_ddp(contract, variant):
    _ok(contract, _unused_section)
    ref_grads, ref_params = _branchy_reference(3, {0})
    init = _branchy_reference(3, {0}, steps=0)[1]
    assert ref_grads["spare.weight"] is None and ref_grads["branch.weight"] is not None
    for rank, r in enumerate(contract):
        grads, params = r["branchy", variant]
        for k, want in ref_params.items():
            err = (params[k] - want).abs().max().item()
            assert err < ATOL64, f"{variant} rank {rank}: {k} differs by {err:.1e}"
        assert torch.equal(params["spare.weight"], init["spare.weight"])  # never moved
        if grads is not None:  # not ZeRO (flat, local grads)
            assert grads["spare.weight"] is None and grads["spare.bias"] is None
            assert (grads["branch.weight"] - ref_grads["branch.weight"]).abs().max() < ATOL64
    # controls: a zero gradient for the unused parameter lets AdamW's weight decay move it;
    # rank 0's branch gradient not averaged with the others' zeros is 3x too large
    # traffic: one used-flag (fp32) per parameter tensor on top of the float64 gradients; naive
    # skips the parameter nobody used, bucketed reduces it as zeros (both leave its grad None)
    flags, psi, spare = 8 * 4, 261, 72
    want = {
        "naive": {"all_reduce": flags + (psi - spare) * 8},
        "bucketed": {"all_reduce": flags + psi * 8},
        "zero1": {"all_reduce": flags, "reduce_scatter": psi * 8, "all_gather": psi * 8},
    }
    if variant in want:
        assert contract[0]["branchy_bytes", variant] == want[variant]
    zeroed = _branchy_reference(3, {0}, zero_unused=True)[1]
    assert (zeroed["spare.weight"] - init["spare.weight"]).abs().max() > 1e-4
    from minipar.data_parallel.models import Branchy

    torch.manual_seed(0)
    alone = Branchy().double()  # rank 0's own gradient, unaveraged
    x, y = _branchy_data(1, 3)[0]
    torch.nn.functional.cross_entropy(
        alone(x.chunk(3)[0], use_branch=True)["logits"], y.chunk(3)[0]
    ).backward()
    assert (alone.branch.weight.grad - ref_grads["branch.weight"]).abs().max() > 1e-3


@pytest.mark.slow
def test_replicas_start_from_rank_0(contract):
    _ok(contract, _start_section)
    torch.manual_seed(0)
    want = [p for p in TiedClassifier().double().parameters() if p.requires_grad]
    for rank, r in enumerate(contract):
        for impl in ("bucketed", "zero1", "zero3"):
            assert all(torch.equal(a, b) for a, b in zip(r["start", impl], want)), (rank, impl)
    torch.manual_seed(1)  # control: rank 1's own seed
    assert not torch.equal(TiedClassifier().emb.weight, want[0].float())


@pytest.mark.slow
def test_zero_keeps_float64_and_documents_its_shard(contract):
    _ok(contract, _start_section)
    for rank, r in enumerate(contract):
        for impl in ("zero1", "zero3"):
            flat_dtype, shard_dtype, (lo, hi) = r["dtype", impl]
            assert flat_dtype == shard_dtype == torch.float64
            assert (lo, hi) == (rank * (hi - lo), (rank + 1) * (hi - lo))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["micro", "ranks"])
def test_accumulation_weights_unequal_batches_and_returns_global_loss(contract, case):
    _ok(contract, _accumulation_section)
    batch = 18 if case == "micro" else 2 + 3 + 4
    ref, ref_loss = _double_reference_grads(18)
    if case == "ranks":
        torch.manual_seed(0)
        model = TiedClassifier().double()
        x, y = token_batches(1, 18)[0]
        loss = torch.nn.functional.cross_entropy(model(x[:batch]), y[:batch])
        loss.backward()
        ref, ref_loss = [p.grad for p in model.parameters() if p.requires_grad], loss.item()
    for r in contract:
        grads, loss = r["accumulation", case]
        assert max((g - w).abs().max().item() for g, w in zip(grads, ref)) < ATOL64
        assert loss == pytest.approx(ref_loss, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("variant", SUB_VARIANTS)
def test_every_implementation_runs_on_a_subgroup(contract, variant):
    _ok(contract, _group_section)
    torch.manual_seed(0)
    micro = 4 if variant == "accumulation" else 1
    ref_losses, ref_params = train_reference(
        TiedClassifier().double(), "adam", token_batches(STEPS, BATCH), micro=micro
    )
    assert all(("group", variant) not in contract[r] for r in range(3) if r not in SUB)
    for rank in SUB:
        losses, params = contract[rank]["group", variant]
        assert max_param_error(params, ref_params) < ATOL64, (variant, rank)
    losses = global_losses([contract[r]["group", variant][0] for r in SUB])
    assert losses == pytest.approx(ref_losses, rel=1e-12)


@pytest.mark.slow
def test_broadcast_parameters_on_a_subgroup(contract):
    _ok(contract, _group_section)
    torch.manual_seed(1)
    want = list(TiedClassifier().double().parameters())
    for rank in SUB:
        assert all(torch.equal(a, b) for a, b in zip(contract[rank]["broadcast"], want)), rank
    torch.manual_seed(3)  # control: rank 2's own seed
    assert not torch.equal(TiedClassifier().double().emb.weight, want[0])


def test_subgroup_check_catches_dividing_by_the_world_size():
    """Control: averaging over the 3 ranks of the world instead of the 2 of the group."""
    torch.manual_seed(0)
    _, ref = train_reference(TiedClassifier().double(), "adam", token_batches(STEPS, BATCH))
    torch.manual_seed(0)
    model = TiedClassifier().double()
    for p in model.parameters():
        if p.requires_grad:
            p.register_hook(lambda g: g * 2 / 3)
    _, wrong = train_reference(model, "adam", token_batches(STEPS, BATCH))
    assert max_param_error(wrong, ref) > 100 * ATOL64


@pytest.mark.parametrize("impl", ["naive", "bucketed", "zero2"])
@pytest.mark.slow
def test_a_parameter_without_gradient_is_a_clear_error(impl):
    from minipar.runtime.launch import RankError

    with pytest.raises(
        RankError,
        match=r"unless find_unused_parameters=True; no gradient for: "
        r".*spare\.weight",
    ):
        run(_unused_without_flag, 2, impl, backend="gloo", timeout=120)


def _unused_without_flag(rank, n, impl):
    from minipar.data_parallel.models import Branchy

    model = Branchy().double()
    zero = ZeRO(model, 2, make_sgd) if impl == "zero2" else None
    if impl == "bucketed":
        BucketedDataParallel(model)
    x, y = _branchy_data(1, n)[0]
    torch.nn.functional.cross_entropy(model(x)["logits"], y).backward()
    if impl == "naive":
        all_reduce_gradients(model)
    if zero:
        zero.step()


@pytest.mark.slow
def test_zero1_all_gather_overlaps_the_next_forward(contract):
    """Equal to one process; and the order of events proves the overlap without timing: every
    all-gather is launched before the next forward starts, and layer 0's forward begins while
    the other layers' all-gathers are still not waited for."""
    from minipar.data_parallel.overlap import zero1_prefetch_reference

    _ok(contract, _overlap_section)
    ref = zero1_prefetch_reference(3, 32, 4, 4, 3, torch.float64)
    depth = 4
    for rank, r in enumerate(contract):
        assert max_param_error(r["overlap"]["params"], ref) < ATOL64, rank
        ev = [(k, i, pending) for k, i, _, pending in r["overlap"]["events"] if k != "done"]
        launches = [i for k, i, _ in ev if k == "launch"]
        assert launches == list(range(depth)) and ev[:depth] == [
            ("launch", i, i) for i in range(depth)
        ]
        assert [(k, i) for k, i, _ in ev[depth:]] == [
            (k, i) for i in range(depth) for k in ("wait", "forward")
        ]
        assert ev[depth + 1] == ("forward", 0, depth - 1)  # layer 0 runs, 3 still in flight
        from minipar.data_parallel.overlap import prefetch_report

        assert prefetch_report(r["overlap"]).endswith(
            f"started with {depth - 1} later layers' all-gathers still outstanding: "
            "communication overlapped the next forward"
        )
    # control: gradients summed instead of averaged (lr·n) would not match
    wrong = zero1_prefetch_reference(3, 32, 4, 4, 3, torch.float64, lr=0.3)
    assert max_param_error(wrong, ref) > 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_clips_by_the_global_norm(contract, stage):
    _ok(contract, _clip_section)
    ref, ref_norms = _clip_reference()
    assert min(ref_norms) > CLIP  # clipping is active every step
    for rank, r in enumerate(contract):
        params, norms = r["clip", stage]
        assert norms == pytest.approx(ref_norms, rel=1e-12), (stage, rank)
        assert max_param_error(params, ref) < ATOL64, (stage, rank)
    wrong, _ = _clip_reference(per_shard=3)  # control: each shard by its own
    assert max_param_error(wrong, ref) > 1e-6


@pytest.mark.slow
def test_zero_adam_skip_counts_the_step_as_documented(contract):
    """Pins the documented difference: after a step in which no rank used the branch, ZeRO (all
    stages) equals one process whose Adam also counted that step for the branch; plain
    torch.optim.Adam (which does not count a None gradient's step) differs, most in the branch
    (the others follow through the loss)."""
    _ok(contract, _skip_then_use_section)
    counted, plain = _skip_reference(3, True), _skip_reference(3, False)
    for rank, r in enumerate(contract):
        for stage in (0, 1, 2, 3):
            params = r["skip", stage]
            for k, want in counted.items():
                err = (params[k] - want).abs().max().item()
                assert err < ATOL64, f"stage {stage} rank {rank}: {k} differs by {err:.1e}"
    gap = {k: (counted[k] - plain[k]).abs().max().item() for k in plain}
    assert gap["branch.weight"] > 1e-4 and gap["branch.bias"] > 1e-4  # the difference is real,
    assert max(gap, key=gap.get).startswith("branch.")  # the branch's above all


def test_assign_buckets_fills_from_the_last_parameter_and_closes_at_the_cap():
    from minipar.data_parallel.bucketed import assign_buckets

    # sizes in bytes of parameters 0..4; a bucket closes once it holds the cap (10) or more
    assert assign_buckets([4, 4, 8, 3, 3], 10) == [[4, 3, 2], [1, 0]]
    assert assign_buckets([4, 4, 8, 3, 3], 1e9) == [[4, 3, 2, 1, 0]]  # one bucket
    assert assign_buckets([4, 4], 1) == [[1], [0]]  # every parameter alone
    with pytest.raises(ValueError, match=r"bucket cap \(0 bytes\) must be > 0"):
        assign_buckets([4], 0)


def test_run_on_ranks_names_its_backend_so_the_launcher_prints_nothing(monkeypatch, capsys):
    """The launcher announces an "auto" choice on stdout, which lands in the notebook's page;
    run_on_ranks resolves "auto" itself and passes the name."""
    from minipar.data_parallel import timing

    seen = []
    monkeypatch.setattr(timing.launch, "run", lambda fn, n, *a, backend: seen.append(backend))
    timing.run_on_ranks(print, 2)
    assert seen and seen[0] in ("gloo", "nccl")
    assert capsys.readouterr().out == ""
