"""The experts' gradient reduction over the expert-data-parallel group as its own planner term
(term_edp_exposed): its group (EDP = t·cp·d/ep ranks, ep apart), its exposure under what the
dense reduction left of the windows, and the step it leaves unchanged. Each test names the bug
it catches."""

import itertools

import pytest

from minipar.cost.network.collectives import collective_time
from minipar.cost.planner import three_d as planner
from minipar.cost.planner import three_d_terms as T

DSV3 = planner.MODELS["deepseek-v3"]


def _lay(**kw):
    base = dict(global_batch=16384, tp=1, pp=1, dp=2048, micro_batch=1, zero=1, ep=64)
    return planner.Layout(**(base | kw))


def test_edp_group_is_t_cp_d_over_ep_ranks_ep_apart():
    """DeepSeek-V3 on 2048 H800, t = 1, p = 1, ep = 64, ZeRO-1: each expert is held by
    2048/64 = 32 ranks, 64 apart (one per node of 8 GPUs), so its reduce-scatter (fp32
    gradients) and its all-gather (16-bit parameters) are rings over 32 ranks on the NIC.
    Catches: the experts reduced over all d·cp = 2048 ranks, or t apart inside a node."""
    cl = planner.cluster(2048, 8, "H800")
    lay = _lay()
    opt = planner.plan_options(DSV3, cl, planner.Options())
    psi = T.stage_params(DSV3, lay).expert  # the stage's E/ep local experts
    lk = cl.inter
    ring = lambda nbytes: collective_time("all-reduce", "ring", 32, nbytes, lk.alpha, lk.bandwidth)
    rs, ag = ring(opt.grad_reduce_bytes * psi) / 2, ring(2 * psi) / 2
    compute = T.term_compute(DSV3, cl, lay, opt)
    got = T.term_edp_exposed(DSV3, cl, lay, opt, compute, T.DpTerm(0.0, 0.0, "-"))
    assert got.reduce == pytest.approx(rs, rel=1e-12)
    assert got.gather == pytest.approx(ag, rel=1e-12)
    assert got.total == pytest.approx(rs + ag, rel=1e-12) and got.link == lk.name
    assert T.expert_grid(lay) == (1, 32, 64)


def _grid():
    """Layouts and options where the split can matter: ep 1 (no EDP term) to 64, ZeRO 0 to 3,
    each overlap switch on and off."""
    cl = planner.cluster(256, 8, "H800")
    m = planner.MODELS["qwen3-30b-a3b"]
    for ep, zero, tp, og, opg in itertools.product(
        (1, 8, 64), (0, 1, 3), (1, 4), (False, True), (False, True)
    ):
        lay = planner.Layout(1024, tp=tp, pp=1, dp=256 // tp, micro_batch=1, zero=zero, ep=ep)
        lay = planner.Layout(**(lay.__dict__ | dict(sp=tp > 1)))
        opt = planner.plan_options(
            m, cl, planner.Options(overlap_grad_reduce=og, overlap_param_gather=opg)
        )
        yield m, cl, lay, opt


def test_split_leaves_the_step_and_the_dp_total_unchanged():
    """dp_exposed + edp_exposed equals one exposure of both groups' collectives under the same
    windows (the model before the split), and dp_seconds is both totals; some case has the
    dense reduction inside the window and the experts' past it. Catches: the experts' term
    given the whole window again (the step too short), counted at ep = 1 too (the experts
    reduced twice), or dp_seconds left at the dense part."""
    split = 0
    for m, cl, lay, opt in _grid():
        br = planner.terms(m, cl, lay, opt)
        compute = T.term_compute(m, cl, lay, opt)
        if lay.zero == 3:
            assert br.edp_exposed == 0.0
            continue
        sp_, (etp, edp, stride) = T.stage_params(m, lay), T.expert_grid(lay)
        if lay.ep == 1:
            rs, ag, _ = T.dp_reduce_seconds(sp_.stage, lay.dp, lay.tp, lay.tp, lay.zero, cl, opt)
            assert br.edp_exposed == 0.0
        else:
            rs_d, ag_d, _ = T.dp_reduce_seconds(
                sp_.dense, lay.dp, lay.tp, lay.tp, lay.zero, cl, opt
            )
            rs_e, ag_e, _ = T.dp_reduce_seconds(sp_.expert, edp, etp, stride, lay.zero, cl, opt)
            rs, ag = rs_d + rs_e, ag_d + ag_e
            window = T.dp_windows(lay, opt, compute)[0]
            split += 0 < rs_d < window < rs and br.edp_exposed > 0
        whole = T.dp_exposed_seconds(rs, ag, *T.dp_windows(lay, opt, compute), opt)
        assert br.dp_exposed + br.edp_exposed == pytest.approx(whole, rel=1e-12, abs=1e-15)
        assert br.dp == pytest.approx(rs + ag, rel=1e-12)
    assert split > 0


def test_plan_shows_the_edp_column(capsys):
    """`minipar plan` at DeepSeek-V3's published layout (p 16, ep 64, ZeRO-1) without the
    grad-reduce overlap prints the experts' reduction (EDP = 128/64 = 2 ranks) in its own
    column and JSON field. Catches: the term computed but not in the table."""
    from test_cli_cost import run, run_json

    argv = ["plan", "--model", "deepseek-v3", "--gpu", "H800", "--gpus", "2048"]
    argv += ["--global-batch", "15360", "--tp", "1", "--pp", "16", "--ep", "64", "--zero", "1"]
    argv += ["--micro-batch", "1", "--recompute", "none", "--no-overlap-grad-reduce"]
    c = run_json(capsys, *argv)["configs"][0]
    assert c["edp_exposed_seconds"] > 0
    status, out, _ = run(capsys, *argv)
    assert status == 0 and "EDP exp" in out
