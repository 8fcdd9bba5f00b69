"""All five parallelisms at once: a tiny MoE GPT trained with d × t × p × cp × ep (experts folded
over a stage's ranks) on gloo ranks, float64, equal to one process (parameters after 3 Adam
steps, first-step gradients) at (d, t, p, cp, ep) = (1, 2, 2, 2, 2) on 8 ranks and
(3, 1, 1, 2, 2) on 6 (ep does not divide d); traffic per group of the grid equal to the cost
model's count; negative controls on the 8 ranks (CP gradient reduction forgotten, experts reduced
over the EP group instead of the EDP group) caught; the chapter's notebook adds the router not
summed over TP."""

import pytest
import torch

from minipar.grid import Grid
from minipar.runtime.launch import run
from minipar.three_d.five_d import (
    TINY,
    Stage5D,
    applies,
    expected_traffic,
    measured_traffic,
    moe_gpt,
    train_5d_on_rank,
)

TESTED_BUGS = (None, "no_cp_grad_reduction", "experts_over_ep")  # router_not_over_tp: notebook
CASES = {
    "all five on 8 ranks": ((1, 2, 2, 2, 2), TESTED_BUGS),
    "dp=3 × cp=2, ep=2 folded, on 6 ranks": ((3, 1, 1, 2, 2), (None,)),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    shape, bugs = CASES[request.param]
    grid = Grid(*shape)
    return grid, run(train_5d_on_rank, grid.world_size, grid, bugs, backend="gloo", timeout=600)


@pytest.mark.slow
def test_equal_to_one_process(case):
    _, results = case
    for rank, r in enumerate(results):
        ok = r["correct"]
        assert ok["grads"] < 1e-12 and ok["params"] < 1e-9, (rank, ok)


@pytest.mark.slow
def test_negative_controls_are_caught(case):
    grid, results = case
    bugs = [b for b in results[0] if b != "correct"]
    if grid.world_size == 8:
        assert set(bugs) == set(TESTED_BUGS[1:]) and all(applies(b, grid) for b in bugs)
    for bug in bugs:
        assert max(r[bug]["params"] for r in results) > 1e-3, bug
        assert max(r[bug]["grads"] for r in results) > 1e-3, bug


@pytest.mark.slow
def test_traffic_per_group_equals_the_cost_model(case):
    grid, results = case
    named = {"tp", "cp", "dp", "dp_cp", "pp", "ep", "edp", "embedding"}
    for r, measured in zip(results, measured_traffic(results, grid)):
        ok = r["correct"]
        assert {k.split(":")[0] for k in ok["traffic"]} <= named, ok["traffic"]
        want = expected_traffic(grid, ok["coord"][0], ok["reduced"])
        assert measured == pytest.approx(want, rel=1e-12), (ok["coord"], measured, want)
    # every kind the grid has more than one rank of moved bytes somewhere
    moved = {k for row in measured_traffic(results, grid) for k, v in row.items() if v}
    assert ("ep" in moved) == (grid.ep > 1) and ("cp:send" in moved) == (grid.cp > 1)


def test_one_rank_is_the_one_process_model():
    """No process group: every stage of one is the identity's sharding, and the MoE GPT."""
    model = moe_gpt()
    tokens = torch.randint(TINY.V, (2, TINY.s))
    none = dict.fromkeys(("tp", "cp", "ep"))
    for layout in ("contiguous", "zigzag"):
        got = Stage5D(model, 0, 1, none, layout)(tokens)
        assert (got - model(tokens)).abs().max() < 1e-12
    assert not any(expected_traffic(Grid(), 0, {"router": 32, "dense": 9, "experts": 7}).values())


def _reductions(bug, grid: Grid) -> tuple:
    """What :func:`reduce_gradients` reduces under ``bug``: (router groups, dense groups and
    divisor, expert groups): a bug changes nothing where this equals the correct run's."""
    router = [] if bug == "router_not_over_tp" else grid.groups("tp")
    dense = ("dp", grid.d) if bug == "no_cp_grad_reduction" else ("dp_cp", grid.d * grid.cp)
    experts = grid.groups("ep" if bug == "experts_over_ep" else "edp")
    singletons = lambda groups: [g for g in groups if len(g) > 1]  # a group of one: no-op
    return singletons(router), grid.groups(dense[0]), dense[1], singletons(experts), experts


def test_a_bug_is_skipped_exactly_where_it_changes_no_reduction():
    """On every grid up to 3 along each axis (ep every divisor of a stage), ``applies`` is False
    exactly where the bug reduces over the same groups with the same divisor as the correct
    run (forgetting cp at cp = 1, the router at t = 1, ep for edp at one rank per stage)."""
    grids = [
        Grid(d, t, p, cp, ep)
        for d in (1, 2, 3)
        for t in (1, 2, 3)
        for p in (1, 2)
        for cp in (1, 2, 3)
        for ep in range(1, d * t * cp + 1)
        if (d * t * cp) % ep == 0
    ]
    for bug in TESTED_BUGS[1:] + ("router_not_over_tp",):
        for grid in grids:
            changes = _reductions(bug, grid) != _reductions(None, grid)
            assert applies(bug, grid) == changes, (bug, grid)
    assert all(applies(None, g) for g in grids)
