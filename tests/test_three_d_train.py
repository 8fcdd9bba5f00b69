"""3D training on 8 gloo ranks, (d, t, p) = (2, 2, 2): TP blocks inside 1F1B pipeline stages,
ZeRO-1 over the DP group. Equal to one process (losses, gradients, parameters after 3 Adam
steps, float64); traffic per group equal to the cost model; ZeRO's state bytes equal to the
memory model; negative controls (swapped TP/DP groups, no embedding all-reduce) are caught."""
import pytest

from minipar.cost.collectives import busbw_factor
from minipar.cost.memory_time import model_state_bytes
from minipar.cost.pipeline_parallel import pp_p2p_bytes_per_microbatch
from minipar.cost.tensor_parallel import tp_bytes_per_layer
from minipar.cost.data_parallel import zero_bytes_per_rank
from minipar.launch import run
from minipar.three_d.train import SMALL, train_3d_on_rank

D, T, P, M, B, STEPS, BYTES = 2, 2, 2, 2, 2, 3, 8     # float64


@pytest.fixture(scope="module")
def results():
    return run(train_3d_on_rank, D * T * P, D, T, P, backend="gloo", timeout=900)


@pytest.mark.slow
def test_equal_to_one_process(results):
    for rank, r in enumerate(results):
        ok = r["correct"]
        assert ok["loss"] < 1e-12 and ok["grads"] < 1e-12, (rank, ok)
        assert ok["params"] < 1e-9, (rank, ok)


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["swapped_groups", "no_embedding_allreduce"])
def test_negative_controls_are_caught(results, bug):
    assert max(r[bug]["params"] for r in results) > 1e-3
    assert max(r[bug]["grads"] for r in results) > 1e-3


@pytest.mark.slow
def test_traffic_per_group_equals_the_cost_model(results):
    layers_per_stage = SMALL.L // P
    for r in results:
        tr = r["correct"]["traffic"]
        # TP: 4 all-reduces of (b, s, h) per layer per micro-batch; ring bytes = busbw × S
        assert tr["tp_calls"] == 4 * layers_per_stage * M * STEPS
        sent = tr["tp_all_reduce"] * busbw_factor("all-reduce", T)
        assert sent == tp_bytes_per_layer(B, SMALL.s, SMALL.h, T, BYTES) * \
            layers_per_stage * M * STEPS
        # PP: one (b, s, h) per micro-batch each way: half of the boundary's bytes per rank
        assert tr["pp_send"] == pp_p2p_bytes_per_microbatch(B, SMALL.s, SMALL.h, BYTES) / 2 \
            * M * STEPS
        # embedding group: the tied (V, h) gradient once per step
        assert tr["embedding_all_reduce"] == SMALL.V * SMALL.h * BYTES * STEPS
        # DP, ZeRO-1: reduce-scatter + all-gather of the stage's flat parameter
        flat = r["correct"]["flat_numel"] * BYTES
        ring = sum(tr["dp"][op] * busbw_factor(op.replace("_", "-"), D)
                   for op in ("reduce_scatter", "all_gather"))
        assert ring == zero_bytes_per_rank(1, flat, D) * STEPS


@pytest.mark.slow
def test_zero1_state_bytes_equal_the_model(results):
    for r in results:
        got = r["correct"]["state_bytes"]
        want = model_state_bytes(r["correct"]["flat_numel"], d=D, zero=1, weight_bytes=8,
                                 grad_bytes=8, optimizer_bytes=16)
        assert (got["weights"], got["gradients"], got["optimizer"]) == \
            (want.weights, want.gradients, want.optimizer)
