"""Putting-them-together exercises: solutions pass, starters fail, wrong answers are named."""

import pytest
from grading_support import clause_cases, clause_fails, exercise_function

from minipar.grading import check

TASKS = {
    "01_rank_groups": ("three_d.rank_groups", "rank_groups"),
    "02_choose_layout": ("three_d.choose_layout", "choose_layout"),
    "03_cost_per_token": ("three_d.cost_per_token", "usd_per_million_tokens"),
    "04_five_d_groups": ("three_d.five_d_groups", "five_d_groups"),
}


def fn(stem, solved=True):
    return exercise_function("three_d", stem, TASKS[stem][1], solved=solved)


@pytest.mark.parametrize("stem", TASKS)
def test_solution_passes_and_starter_fails(stem, capsys):
    task_id = TASKS[stem][0]
    assert check(task_id, fn(stem))
    assert not check(task_id, fn(stem, solved=False))
    assert "not implemented yet" in capsys.readouterr().out.splitlines()[-1]


def _groups(order):
    """Groups for an arbitrary axis order (outermost first), e.g. ("dp", "pp", "tp")."""

    def make(d, t, p):
        sizes = {"tp": t, "dp": d, "pp": p}
        stride, s = {}, 1
        for ax in reversed(order):
            stride[ax], s = s, s * sizes[ax]
        import itertools

        out = {}
        for ax in ("tp", "dp", "pp"):
            others = [a for a in order if a != ax]
            out[ax] = [
                [
                    sum(i * stride[a] for a, i in zip(others, idx)) + k * stride[ax]
                    for k in range(sizes[ax])
                ]
                for idx in itertools.product(*(range(sizes[a]) for a in others))
            ]
        return out

    return make


def tp_without_stage(d, t, p):
    """The tp groups forget the pipeline stage's offset i_p·d·t: right when p = 1."""
    rank = lambda i_p, i_d, i_t: i_p * d * t + i_d * t + i_t
    return {
        "tp": [[i_d * t + k for k in range(t)] for i_p in range(p) for i_d in range(d)],
        "dp": [[rank(i, j, k) for j in range(d)] for i in range(p) for k in range(t)],
        "pp": [[rank(i, j, k) for i in range(p)] for j in range(d) for k in range(t)],
    }


def pp_stride_t(d, t, p):
    """pp groups stepping by t (the tp size) instead of d·t."""
    rank = lambda i_p, i_d, i_t: i_p * d * t + i_d * t + i_t
    return {
        "tp": [[rank(i, j, k) for k in range(t)] for i in range(p) for j in range(d)],
        "dp": [[rank(i, j, k) for j in range(d)] for i in range(p) for k in range(t)],
        "pp": [[j * t + k + i * t for i in range(p)] for j in range(d) for k in range(t)],
    }


def groups_from_the_grid(d, t, p):
    from minipar.three_d.grid import RankGrid

    g = RankGrid(d, t, p)
    return {ax: g.groups(ax) for ax in ("tp", "dp", "pp")}


# --- exercise 4: the five-dimensional grid's cp, dp_cp, ep and edp groups -------------------
def _five(
    d,
    t,
    p,
    cp,
    ep,
    *,
    order="tcd",
    ep_rule="folded",
    edp_rule="expert",
    offset=True,
    base=0,
    rule_checked=True,
):
    """Groups under a chosen rule for each slip; the defaults give the right answer."""
    S = t * cp * d
    if rule_checked and S % ep:
        raise ValueError(f"ep ({ep}) must divide t·cp·d ({S})")
    st = {
        "tcd": dict(t=1, c=t, d=t * cp),
        "tdc": dict(t=1, d=t, c=t * d),
        "ctd": dict(c=1, t=cp, d=cp * t),
    }[order]
    rank = lambda i, j, k, l: base + i * S + j * st["d"] + k * st["c"] + l * st["t"]
    off = lambda i: i * S if offset else 0
    if ep_rule == "folded":
        ep_g = [[off(i) + e * ep + x for x in range(ep)] for i in range(p) for e in range(S // ep)]
    elif ep_rule == "inside_dp":
        ep_g = [
            [rank(i, q * ep + x, k, l) for x in range(ep)]
            for i in range(p)
            for q in range(d // ep)
            for k in range(cp)
            for l in range(t)
        ]
    else:  # edp innermost
        ep_g = [
            [i * S + e + x * (S // ep) for x in range(ep)] for i in range(p) for e in range(S // ep)
        ]
    dp_cp = [
        [rank(i, j, k, l) for j in range(d) for k in range(cp)] for i in range(p) for l in range(t)
    ]
    edp = (
        dp_cp
        if edp_rule == "dense"
        else [[i * S + e * ep + x for e in range(S // ep)] for i in range(p) for x in range(ep)]
    )
    return {
        "cp": [
            [rank(i, j, k, l) for k in range(cp)]
            for i in range(p)
            for j in range(d)
            for l in range(t)
        ],
        "dp_cp": dp_cp,
        "ep": ep_g,
        "edp": edp,
    }


def test_five_d_groups_the_tests_own_answer_passes():
    assert check("three_d.five_d_groups", _five)


def five_d_groups_reversed(d, t, p, cp, ep):
    """Every list of groups, and every group, in decreasing order: the text says order does not
    matter (dist.new_group sorts its ranks), so this correct reading passes."""
    return {k: [g[::-1] for g in v[::-1]] for k, v in _five(d, t, p, cp, ep).items()}


def five_d_no_rule_check(d, t, p, cp, ep):
    return _five(d, t, p, cp, ep, rule_checked=False)


def five_d_wrong_exception(d, t, p, cp, ep):
    assert (t * cp * d) % ep == 0, "ep must divide t·cp·d"
    return _five(d, t, p, cp, ep)


def five_d_ep_must_divide_d(d, t, p, cp, ep):
    """Refuses ep ∤ d too, as if the experts folded over the data-parallel ranks only."""
    if d % ep:
        raise ValueError(f"ep ({ep}) must divide d ({d})")
    return _five(d, t, p, cp, ep)


def five_d_groups_as_tuples(d, t, p, cp, ep):
    """Each group a tuple, each list of groups a tuple: the text accepts any sequence."""
    return {k: tuple(tuple(g) for g in v) for k, v in _five(d, t, p, cp, ep).items()}


def test_five_d_groups_in_any_order_pass():
    assert check("three_d.five_d_groups", five_d_groups_reversed)


def test_five_d_groups_as_tuples_pass():
    assert check("three_d.five_d_groups", five_d_groups_as_tuples)


def test_five_d_grader_shapes_make_every_dimension_matter():
    from minipar.grading.three_d import FIVE_D_SHAPES, FIVE_D_UNSUPPORTED

    pow2 = lambda x: x & (x - 1) == 0
    assert any(  # a dp_cp slip needs d, cp > 1; an edp one p > 1; ep not dividing d, folding
        d > 1 and p > 1 and cp > 1 and d % ep and not all(map(pow2, (d, cp)))
        for d, t, p, cp, ep in FIVE_D_SHAPES
    )
    d, t, p, cp, ep = FIVE_D_UNSUPPORTED
    assert (t * cp * d) % ep


# ------------------------------------------------------------------ the clause table's wrong answers
WRONG = {
    # 01 rank groups
    "groups_picotron_order": _groups(("dp", "pp", "tp")),
    "groups_dp_innermost": _groups(("pp", "tp", "dp")),
    "groups_one_rank": lambda d, t, p: {"tp": [[0]], "dp": [[0]], "pp": [[0]]},
    "groups_not_a_dict": lambda d, t, p: [[0, 1]],
    "tp_without_stage": tp_without_stage,
    "pp_stride_t": pp_stride_t,
    "groups_from_the_grid": groups_from_the_grid,
    # 02 choose a layout (the answer is a function returning (d, t, p))
    "layout_tp_across_nodes": lambda: (16, 16, 4),
    "layout_too_few_gpus": lambda: (16, 8, 4),
    "layout_not_the_gpus": lambda: (50, 5, 4),
    "layout_zero3_only": lambda: (512, 1, 2),
    "layout_bubble": lambda: (32, 2, 16),
    "layout_slower": lambda: (4, 8, 32),
    "layout_layers_not_divisible": lambda: (16, 1, 64),
    "layout_as_text": lambda: "8x8x16",
    # 03 cost per token
    "usd_per_token": lambda step_seconds, gpus, global_batch, seq, usd_per_gpu_hour: (
        gpus * step_seconds / 3600 * usd_per_gpu_hour / (global_batch * seq)
    ),
    "usd_per_sequence": lambda step_seconds, gpus, global_batch, seq, usd_per_gpu_hour: (
        gpus * step_seconds / 3600 * usd_per_gpu_hour / global_batch * 1e6
    ),
    "usd_seconds_as_hours": lambda step_seconds, gpus, global_batch, seq, usd_per_gpu_hour: (
        gpus * step_seconds * usd_per_gpu_hour / (global_batch * seq) * 1e6
    ),
    "usd_one_gpu": lambda step_seconds, gpus, global_batch, seq, usd_per_gpu_hour: (
        step_seconds / 3600 * usd_per_gpu_hour / (global_batch * seq) * 1e6
    ),
    "usd_hard_coded": lambda **kw: 0.5,
    "usd_from_course": lambda step_seconds, gpus, global_batch, seq, usd_per_gpu_hour: __import__(
        "minipar.cost.planner.three_d", fromlist=["x"]
    ).dollars_per_million_tokens(step_seconds, gpus, global_batch * seq, usd_per_gpu_hour),
    # 04 five-dimensional groups
    "five_d_dp_cp_swapped": lambda *s: _five(*s, order="tdc"),
    "five_d_cp_tp_swapped": lambda *s: _five(*s, order="ctd"),
    "five_d_ep_inside_dp": lambda *s: _five(*s, ep_rule="inside_dp"),
    "five_d_edp_innermost": lambda *s: _five(*s, ep_rule="edp_inner"),
    "five_d_off_by_one": lambda *s: _five(*s, base=1),
    "five_d_no_stage_offset": lambda *s: _five(*s, offset=False),
    "five_d_edp_is_dp_cp": lambda *s: _five(*s, edp_rule="dense"),
    "five_d_rank_missing": lambda *s: dict(_five(*s), edp=[[0]]),
    "five_d_not_a_dict": lambda *s: [[0]],
    "five_d_from_course": lambda d, t, p, cp, ep: {
        k: __import__("minipar.grid", fromlist=["Grid"]).Grid(d, t, p, cp, ep).groups(k)
        for k in ("cp", "dp_cp", "ep", "edp")
    },
    "five_d_no_rule_check": five_d_no_rule_check,
    "five_d_wrong_exception": five_d_wrong_exception,
    "five_d_ep_must_divide_d": five_d_ep_must_divide_d,
}


@pytest.mark.parametrize("task_id, clause", clause_cases("three_d", slow=lambda t: False))
def test_every_clause_has_a_wrong_answer_that_fails_with_its_reason(task_id, clause, capsys):
    clause_fails(task_id, clause, WRONG, capsys)
