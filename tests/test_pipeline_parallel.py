"""Pipeline parallelism on gloo ranks: every schedule equals one process on the full batch
(losses, first-step gradients, parameters after several Adam steps, float64), p in {2, 3, 4},
m in {p, 2p, 2p+1}; p2p traffic and activation high-water equal the model; negative controls
show the checks catch an unscaled loss, a receiver that does not require grad, and a warm-up
that deadlocks (stopped and named by the grader's deadlock watch, never a hang)."""

import re
import sys

import cloudpickle
import pytest
from test_pipeline_parallel_schedules import _one_f_one_b_mirrored as mirrored_1f1b  # warm-up bug

from minipar.cost.chapters.pipeline_parallel import pp_p2p_bytes_per_microbatch
from minipar.grading import LimitExceeded, run_ranks
from minipar.pipeline_parallel import ScheduleError, simulate
from minipar.pipeline_parallel.communication import P2P
from minipar.pipeline_parallel.executor import PipelineExecutor
from minipar.pipeline_parallel.model_bubble import peak_in_flight
from minipar.pipeline_parallel.stage import partition_layers
from minipar.pipeline_parallel.train import (
    TrainOptions,
    max_error,
    small_config,
    token_batches,
    train_rank,
    train_reference,
)
from minipar.runtime.launch import RankError, run

# What this module sends to ranks (_all_cases, the buggy executors) goes by value: a rank then
# does not import this test module (pytest, the schedule tests), about 1 CPU-s per rank.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

STEPS, B_MICRO, TOL = 3, 2, 1e-9
C = small_config(L=8)


def cases(p):
    out = [(name, m, 1) for name in ("gpipe", "1f1b", "zb-h1") for m in (p, 2 * p, 2 * p + 1)]
    return out + [("interleaved", m, 2) for m in (p, 2 * p)]


def _all_cases(rank, p):
    out = {}
    for name, m, v in cases(p):
        batches = token_batches(STEPS, B_MICRO * m, C)
        # m = p: trace the first step's p2p messages and bytes
        res = train_rank(rank, p, name, m, v, C, batches, TrainOptions(trace_first_step=(m == p)))
        res.timeline = None
        out[name, m, v] = res
    # negative control: the loss not divided by m
    m = p
    out["unscaled"] = train_rank(
        rank, p, "1f1b", m, 1, C, token_batches(1, B_MICRO * m, C), TrainOptions(loss_scale=1.0)
    )
    return out


@pytest.fixture(scope="module", params=[2, 3, 4], ids=lambda p: f"p{p}")
def launched(request):
    p = request.param
    return p, run(_all_cases, p, backend="gloo", timeout=600)


@pytest.fixture(scope="module")
def references():
    refs = {}
    for p in (2, 3, 4):
        for _, m, _ in cases(p):
            if m not in refs:
                refs[m] = train_reference(C, token_batches(STEPS, B_MICRO * m, C))
    return refs


@pytest.mark.slow
def test_every_schedule_equals_one_process(launched, references):
    p, results = launched
    for name, m, v in cases(p):
        ref_losses, ref_grads, ref_params = references[m]
        ranks = [r[name, m, v] for r in results]
        assert max_error(ranks, ref_grads, "grads") < TOL, (name, m, v)
        assert max_error(ranks, ref_params, "params") < TOL, (name, m, v)
        assert ranks[-1].losses == pytest.approx(ref_losses, rel=1e-12)


@pytest.mark.slow
def test_unscaled_loss_gives_m_times_the_gradient(launched, references):
    p, results = launched
    ranks = [r["unscaled"] for r in results]
    _, ref_grads, _ = train_reference(C, token_batches(1, B_MICRO * p, C))
    assert max_error(ranks, ref_grads, "grads") > 0.5  # the check catches it ...
    scaled = {n: g * p for n, g in ref_grads.items()}  # ... and it is exactly m×
    assert max_error(ranks, scaled, "grads") < TOL


@pytest.mark.slow
def test_activation_high_water_equals_the_model(launched):
    p, results = launched
    for name, m, v in cases(p):
        measured = [r[name, m, v].peak_in_flight for r in results]
        assert measured == [peak_in_flight(name, r, p, m, v) for r in range(p)], (name, m)
    # GPipe holds m micro-batches on every rank, 1F1B p−r: bytes saved say the same
    m = 2 * p + 1
    g, o = results[1]["gpipe", m, 1], results[1]["1f1b", m, 1]
    assert g.peak_saved_bytes * (p - 1) == o.peak_saved_bytes * m


@pytest.mark.slow
def test_p2p_traffic_equals_the_model(launched):
    p, results = launched
    b, s, h = B_MICRO, C.s, C.h
    for name, v in (("gpipe", 1), ("1f1b", 1), ("zb-h1", 1), ("interleaved", 2)):
        m = p
        n_msgs = sum(r[name, m, v].sends[0] for r in results)
        n_bytes = sum(r[name, m, v].sends[1] for r in results)
        boundaries = v * p - 1
        assert n_msgs == 2 * boundaries * m  # activation + gradient
        assert n_bytes == boundaries * m * pp_p2p_bytes_per_microbatch(b, s, h, 8)
        if name == "interleaved":  # v× the boundaries crossing ranks (v·p − 1 vs p − 1)
            assert n_msgs == sum(r["1f1b", m, 1].sends[0] for r in results) * (v * p - 1) / (p - 1)


# ------------------------------------------------------------------ negative controls
class NoGradReceiver(PipelineExecutor):
    """Bug: the received activation is not marked requires_grad."""

    def received_activation(self, x):
        return x


@pytest.mark.slow
@pytest.mark.parametrize("name", ["1f1b", "zb-h1"])
def test_receiver_must_require_grad(name):
    b = token_batches(1, 2 * B_MICRO, C)
    with pytest.raises(RankError, match="must be a leaf that requires grad"):
        opts = TrainOptions(executor_cls=NoGradReceiver)
        run(train_rank, 2, name, 2, 1, C, b, opts, backend="gloo", timeout=120)


class AttachedP2P(P2P):
    """Bug: the same-rank hand-off keeps the sender's graph (no detach)."""

    def send(self, t, to_stage, microbatch, kind):
        if self.owner(to_stage) == self.rank:
            self.local[to_stage, microbatch, kind] = t
            return
        super().send(t, to_stage, microbatch, kind)


class AttachedExecutor(PipelineExecutor):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.comm = AttachedP2P(self.rank, self.p, self.m)


@pytest.mark.slow
def test_sent_activation_must_be_detached():
    # one rank, two chunks: stage 0 hands its output to stage 1 in memory; without detach,
    # stage 1's backward runs into stage 0's graph and the received tensor has no .grad
    c = small_config(L=2)
    b = token_batches(1, 4, c)
    with pytest.raises(RankError, match="must be a leaf that requires grad"):
        run(
            train_rank,
            1,
            "interleaved",
            2,
            2,
            c,
            b,
            TrainOptions(executor_cls=AttachedExecutor),
            backend="gloo",
            timeout=120,
        )


@pytest.mark.slow
def test_wrong_warmup_deadlock_is_stopped_not_a_hang(short_stall_window):
    p, m = 3, 3
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate(mirrored_1f1b(p, m))  # caught on paper ...
    b = token_batches(1, B_MICRO * m, C)
    # ... and on ranks: every rank blocked for good in a p2p receive, which the grader's watch
    # (no rank gaining CPU for its window; shortened here, a true deadlock is caught whatever
    # the window) stops with each rank's stack. A hang would never return; a slow rank is busy.
    with short_stall_window() as stall_s, pytest.raises(LimitExceeded) as e:
        run_ranks(train_rank, p, "1f1b", m, 1, C, b, TrainOptions(actions=mirrored_1f1b(p, m)))
    assert e.value.kind == "deadlock", str(e.value)
    assert str(e.value).startswith(
        f"deadlock on {p} ranks: for {stall_s:g} s no rank made progress"
    ), str(e.value)
    for r in range(p):  # each rank's innermost frames, in one of its threads' stacks (the dump
        # lists every thread, and which comes first varies: a pool's forking thread may)
        stacks = re.split(r"^(?:Current thread|Thread) 0x", e.value.logs[r], flags=re.M)
        inner = [
            [ln for ln in st.splitlines() if ln.lstrip().startswith("File")][:3] for st in stacks
        ]
        assert any(
            "pipeline_parallel/communication.py" in f and f.endswith(" in recv")
            for frames in inner
            for f in frames
        ), (r, inner)


# ------------------------------------------------------------------ fast
def test_partition_layers():
    assert partition_layers(5, 3) == [range(0, 2), range(2, 4), range(4, 5)]
    with pytest.raises(ValueError, match=r"layers L \(3\) must be >= stages v·p \(4\)"):
        partition_layers(3, 4)


@pytest.mark.slow
def test_one_rank_is_the_reference():
    c = small_config(L=2)
    b = token_batches(2, 4, c)
    ref = train_reference(c, b)
    res = run(train_rank, 1, "interleaved", 2, 2, c, b, backend="gloo", timeout=120)
    assert max_error(res, ref[2]) < TOL and res[0].peak_in_flight == 2
