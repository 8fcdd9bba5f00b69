"""Data parallelism: every variant equals a single process on the whole batch; traffic and
model-state memory equal the cost model exactly; negative controls show the checks bite."""
import functools

import pytest
import torch
import torch.distributed as dist

from minipar.cost.memory import model_state_bytes
from minipar.cost.traffic import dp_allreduce_bytes_per_rank, zero_bytes_per_rank
from minipar.data_parallel import BucketedDataParallel, ZeRO, all_reduce_gradients
from minipar.data_parallel.experiments import ring_bytes, zero_on_rank
from minipar.data_parallel.models import TiedClassifier, token_batches
from minipar.data_parallel.train import (VARIANTS, global_losses, max_param_error,
                                         train_reference, train_rank)
from minipar.launch import run
from minipar.trace import trace

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
        dist.all_reduce(p.data)          # should be p.grad
        p.data.div_(n)
    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(hook)


def _train_buggy(rank, n, bug, optimizer):
    torch.manual_seed(0)
    model = TiedClassifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1) if optimizer == "sgd" else \
        torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)
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
            losses, params = train_rank(rank, n, v, TiedClassifier(), opt,
                                        token_batches(STEPS, BATCH), tracer=tr)
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
    return n, run(_all_on_rank, n, timeout=120)


@pytest.fixture(scope="module")
def references():
    refs = {}
    for opt in OPTIMIZERS:
        for micro in (1, 4, 8):  # accumulation's micro-batch grouping (n·2 chunks)
            torch.manual_seed(0)
            refs[opt, micro] = train_reference(TiedClassifier(), opt, token_batches(STEPS, BATCH),
                                               micro=micro)
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
    model = model_state_bytes(psi, d=n, zero=stage, weight_bytes=4, grad_bytes=4,
                              optimizer_bytes=8)
    for r in results:
        measured, _ = r["zero"][stage]
        assert (measured["weights"], measured["gradients"], measured["optimizer"]) == \
            (model.weights, model.gradients, model.optimizer)


# ------------------------------------------------------------------ fast, single-process
def _one_rank(rank, n):
    model = TiedClassifier()
    before = [p.detach().clone() for p in model.parameters()]
    dp = BucketedDataParallel(model)
    x, y = token_batches(1, 4)[0]
    torch.nn.functional.cross_entropy(model(x), y).backward()
    grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    dp.finish()
    all_reduce_gradients(model)
    same = all(g is None and p.grad is None or torch.equal(g, p.grad)
               for g, p in zip(grads, model.parameters()))
    return same, all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_one_rank_group_is_a_no_op():
    same, untouched = run(_one_rank, 1)[0]
    assert same and untouched


def test_bucket_order_and_sizes():
    run(functools.partial(_bucket_layout), 1)


def _bucket_layout(rank, n):
    model = TiedClassifier()
    dp = BucketedDataParallel(model, bucket_cap_mb=4096 / 2**20)   # 4 KiB buckets
    flat = [p for b in dp.buckets for p in b]
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert flat == trainable[::-1]                                 # reverse order, each once
    assert all(p is not model.scale for p in flat)                 # frozen left out
    assert len(dp.buckets) > 1


def test_zero_rejects_bad_stage():
    from minipar.launch import RankError
    with pytest.raises(RankError, match=r"ZeRO stage \(4\) must be 0, 1, 2 or 3"):
        run(lambda r, n: ZeRO(TiedClassifier(), 4, None), 1)


# ------------------------------------------------------------------ the bench command
@pytest.mark.slow
def test_bench_dp_runs_tiny_and_prints_the_keys(capsys):
    import json

    from minipar.cli import main
    assert main(["bench", "dp", "--ranks", "2", "--steps", "1", "--rounds", "1", "--width", "16",
                 "--depth", "2", "--batch", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"naive_to_ddp", "bucketed_to_ddp", "step_seconds"} <= set(out)


@pytest.mark.parametrize("argv, message", [
    (["--ranks", "1"], "--ranks (1) must be >= 2"),
    (["--bucket-mb", "0"], "--bucket-mb (0.0) must be > 0"),
])
def test_bench_dp_bad_input_is_one_line(capsys, argv, message):
    from minipar.cli import main
    assert main(["bench", "dp", *argv]) == 2
    assert capsys.readouterr().err.strip() == f"minipar bench: error: {message}"
