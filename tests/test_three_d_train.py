"""3D training on gloo ranks, composed as Megatron composes it: TP blocks with sequence
parallelism inside 1F1B pipeline stages, stage messages cut to (b, s/t, h) (Narayanan et al.
2021 §4.1), ZeRO-1 over the DP group. Equal to one process (losses, gradients, parameters after
3 Adam steps, float64) at (d, t, p) = (2, 2, 2) with SP and (1, 3, 2) with the explicit
scatter/gather; traffic per process group (attributed by the group's identity) equal to the
cost model; ZeRO's state bytes equal to the memory model; negative controls caught. FSDP2 + TP
on a 2-D DeviceMesh (torchtitan's composition) equals the course's TP + ZeRO-3 and one process."""

import pytest

from minipar.cost.chapters.data_parallel import zero_bytes_per_rank
from minipar.cost.chapters.memory_time import model_state_bytes
from minipar.cost.chapters.pipeline_parallel import pp_p2p_bytes_per_microbatch
from minipar.cost.chapters.tensor_parallel import tp_bytes_per_layer
from minipar.cost.network.collectives import busbw_factor
from minipar.runtime.launch import run
from minipar.three_d.grid import RankGrid
from minipar.three_d.train import SMALL, fsdp2_tp_on_rank, train_3d_on_rank

M, B, STEPS, BYTES = 2, 2, 3, 8  # micro-batches, micro-batch size, Adam steps, float64
CASES = {"sp": (2, 2, 2), "scatter_gather": (1, 3, 2)}
ALL_BUGS = (None, "swapped_groups", "no_embedding_allreduce", "no_sp_grad_allreduce")


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    mode = request.param
    d, t, p = CASES[mode]
    results = run(
        train_3d_on_rank, d * t * p, RankGrid(d, t, p), ALL_BUGS, mode, backend="gloo", timeout=900
    )
    return mode, (d, t, p), results


def _ring(tr, kind, d_or_t):
    """Bytes a rank puts on the wire (ring) for its calls in group ``kind``."""
    return sum(
        nbytes * busbw_factor(key.split(":")[1].replace("_", "-"), d_or_t)
        for key, (_, nbytes) in tr.items()
        if key.startswith(kind + ":")
    )


@pytest.mark.slow
def test_equal_to_one_process(case):
    _, _, results = case
    for rank, r in enumerate(results):
        ok = r["correct"]
        assert ok["loss"] < 1e-12 and ok["grads"] < 1e-12, (rank, ok)
        assert ok["params"] < 1e-9, (rank, ok)


@pytest.mark.slow
def test_negative_controls_are_caught(case):
    mode, (d, t, p), results = case
    bugs = [b for b in ALL_BUGS[1:] if b in results[0]]
    expected = (
        {"no_embedding_allreduce"}
        | ({"no_sp_grad_allreduce"} if mode == "sp" else set())
        | ({"swapped_groups"} if d == t else set())
    )
    assert set(bugs) == expected
    for bug in bugs:
        assert max(r[bug]["params"] for r in results) > 1e-3, bug
        assert max(r[bug]["grads"] for r in results) > 1e-3, bug


@pytest.mark.slow
def test_traffic_per_group_equals_the_cost_model(case):
    mode, (d, t, p), results = case
    layers = SMALL.L // p
    act = B * SMALL.s * SMALL.h * BYTES  # one (b, s, h) message, bytes
    for r in results:
        ok = r["correct"]
        tr, (i_p, _, _) = ok["traffic"], ok["coord"]
        assert set(k.split(":")[0] for k in tr) <= {"tp", "dp", "pp", "embedding"}, tr
        # TP: the layers' f/g (all-reduces, or all-gather + reduce-scatter under SP: same
        # bytes), one all-gather per micro-batch at the stage's edge (SP: the first stage's
        # scatter backward, the last stage's gather forward; scatter/gather: the receiver's
        # gather forward, the sender's scatter backward), and under SP one all-reduce of the
        # layer-norm and row-bias gradients per step
        edges = (i_p == 0) + (i_p == p - 1) if mode == "sp" else (i_p > 0) + (i_p < p - 1)
        want = (
            tp_bytes_per_layer(B, SMALL.s, SMALL.h, t, BYTES) * layers * M
            + edges * (t - 1) / t * act * M
            + busbw_factor("all-reduce", t) * ok["sp_numel"] * BYTES
        ) * STEPS
        assert _ring(tr, "tp", t) == pytest.approx(want, rel=1e-12)
        ops = 8 * layers * M if mode == "sp" else 4 * layers * M
        calls = sum(c for k, (c, _) in tr.items() if k.startswith("tp:"))
        assert calls == (ops + edges * M + (mode == "sp")) * STEPS
        # PP: each rank sends 1/t of a (b, s, h) per micro-batch, one direction per boundary
        assert (
            tr["pp:send"][1]
            == pp_p2p_bytes_per_microbatch(B, SMALL.s, SMALL.h, BYTES) / 2 / t * M * STEPS
        )
        # embedding group: the tied (V, h) gradient once per step
        assert tr["embedding:all_reduce"][1] == SMALL.V * SMALL.h * BYTES * STEPS
        # DP, ZeRO-1: reduce-scatter + all-gather of the stage's flat parameter
        assert _ring(tr, "dp", d) == zero_bytes_per_rank(1, ok["flat_numel"] * BYTES, d) * STEPS


@pytest.mark.slow
def test_zero1_state_bytes_equal_the_model(case):
    _, (d, _, _), results = case
    for r in results:
        got = r["correct"]["state_bytes"]
        want = model_state_bytes(
            r["correct"]["flat_numel"],
            d=d,
            zero=1,
            weight_bytes=8,
            grad_bytes=8,
            optimizer_bytes=16,
        )
        assert (got["weights"], got["gradients"], got["optimizer"]) == (
            want.weights,
            want.gradients,
            want.optimizer,
        )


@pytest.mark.slow
def test_fsdp2_over_tp_on_a_2d_mesh_equals_ours_and_one_process():
    d, t = 2, 2
    good = run(fsdp2_tp_on_rank, d * t, d, t, backend="gloo", timeout=600)
    for r in good:
        assert r["fsdp2-ref"] < 1e-12 and r["ours-ref"] < 1e-12 and r["fsdp2-ours"] < 1e-12, r
        tr = r["traffic"]
        # FSDP2 = ZeRO-3 over dp on the TP-local shards: all-gather forward and backward,
        # reduce-scatter once: 3(d-1)/d of the local parameter bytes per step
        assert _ring(tr, "dp", d) == zero_bytes_per_rank(3, r["params_local"] * BYTES, d) * STEPS
        # TP: an MLP block is half a transformer layer (one g forward, one f backward)
        assert _ring(tr, "tp", t) == tp_bytes_per_layer(B, 3, 8, t, BYTES) / 2 * 2 * STEPS
    bad = run(fsdp2_tp_on_rank, d * t, d, t, "data_by_tp_rank", backend="gloo", timeout=600)
    assert max(r["fsdp2-ref"] for r in bad) > 1e-3
    assert max(r["ours-ref"] for r in bad) > 1e-3


def test_stage_modes_name_the_rule_and_one_rank_is_the_identity():
    import torch

    from minipar.model import GPT
    from minipar.three_d.train import MODES, Stage3D, gather_from_tp_ranks

    with pytest.raises(ValueError, match=r"mode \('tp'\) must be one of sp, scatter_gather"):
        Stage3D(GPT(SMALL), 0, 2, None, "tp")
    x = torch.randn(2, SMALL.s, SMALL.h)
    assert gather_from_tp_ranks(x) is x  # no process group: one rank
    # one rank, any mode: the whole GPT, stage 0 of 1, equals the unsharded model
    torch.manual_seed(0)
    full = GPT(SMALL).double()
    tokens = torch.randint(SMALL.V, (2, SMALL.s))
    for mode in MODES:
        got = Stage3D(full, 0, 1, None, mode)(tokens)
        assert (got - full(tokens)).abs().max() < 1e-12, mode
