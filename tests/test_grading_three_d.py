"""Putting-them-together exercises: solutions pass, starters fail, wrong answers are named."""

import pytest
from grading_support import exercise_function, failure

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


@pytest.mark.parametrize(
    "candidate, reason",
    [
        (_groups(("dp", "pp", "tp")), "order dp > pp > tp"),  # picotron's order
        (_groups(("pp", "tp", "dp")), "order pp > tp > dp"),  # dp innermost
        (
            lambda d, t, p: {"tp": [[0]], "dp": [[0]], "pp": [[0]]},
            "for (d, t, p) = (2, 2, 2): tp groups [[0]]; Megatron's are [[0, 1], [2, 3], [4, 5], "
            "[6, 7]] -- yours has [[0]], which Megatron's has not; it lacks [[0, 1], [2, 3], [4, 5], "
            "[6, 7]]",
        ),
        (lambda d, t, p: [[0, 1]], "return a dict"),
        (
            tp_without_stage,
            "for (d, t, p) = (2, 2, 2): tp groups [[0, 1], [0, 1], [2, 3], [2, 3]]; "
            "Megatron's are [[0, 1], [2, 3], [4, 5], [6, 7]] -- it lacks [[4, 5], "
            "[6, 7]]",
        ),
        (
            pp_stride_t,
            "pp groups [[0, 2], [1, 3], [2, 4], [3, 5]]; Megatron's are [[0, 4], [1, 5], "
            "[2, 6], [3, 7]]",
        ),
        (groups_from_the_grid, "course's own minipar.three_d.grid (RankGrid)"),
    ],
)
def test_rank_group_slips(candidate, reason, capsys):
    assert reason in failure("three_d.rank_groups", candidate, capsys)


@pytest.mark.parametrize(
    "layout, reason",
    [
        ((16, 16, 4), "exceeds the GPUs per node"),
        ((16, 8, 4), "must equal the GPUs (1024)"),
        ((50, 5, 4), "must equal the GPUs"),
        ((512, 1, 2), "ZeRO-3) predicts"),  # fits only as ZeRO-3: a choice, slower
        ((32, 2, 16), "most of the gap is the pipeline bubble"),
        ((4, 8, 32), "slower than"),  # fits, but a big bubble at m = 384
        ((16, 1, 64), "layers (96) must be divisible by p (64)"),
        ("8x8x16", "return a tuple"),
    ],
)
def test_choose_layout_rejects(layout, reason, capsys):
    assert reason in failure("three_d.choose_layout", lambda: layout, capsys)


@pytest.mark.parametrize(
    "candidate, reason",
    [
        (
            lambda step_seconds, gpus, global_batch, seq, usd_per_gpu_hour: (
                gpus * step_seconds / 3600 * usd_per_gpu_hour / (global_batch * seq)
            ),
            "per token, not per million",
        ),
        (
            lambda step_seconds, gpus, global_batch, seq, usd_per_gpu_hour: (
                gpus * step_seconds / 3600 * usd_per_gpu_hour / global_batch * 1e6
            ),
            "per sequence",
        ),
        (
            lambda step_seconds, gpus, global_batch, seq, usd_per_gpu_hour: (
                gpus * step_seconds * usd_per_gpu_hour / (global_batch * seq) * 1e6
            ),
            "seconds as hours",
        ),
        (
            lambda step_seconds, gpus, global_batch, seq, usd_per_gpu_hour: (
                step_seconds / 3600 * usd_per_gpu_hour / (global_batch * seq) * 1e6
            ),
            "number of GPUs",
        ),
        (lambda **kw: 0.5, "expected"),
        (
            lambda step_seconds, gpus, global_batch, seq, usd_per_gpu_hour: __import__(
                "minipar.cost.three_d", fromlist=["x"]
            ).dollars_per_million_tokens(step_seconds, gpus, global_batch * seq, usd_per_gpu_hour),
            "course's own minipar.cost.three_d (dollars_per_million_tokens)",
        ),
    ],
)
def test_cost_slips(candidate, reason, capsys):
    assert reason in failure("three_d.cost_per_token", candidate, capsys)


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


def test_five_d_groups_in_any_order_pass():
    assert check("three_d.five_d_groups", five_d_groups_reversed)


def test_five_d_grader_shapes_make_every_dimension_matter():
    from minipar.grading.three_d import FIVE_D_SHAPES, FIVE_D_UNSUPPORTED

    pow2 = lambda x: x & (x - 1) == 0
    assert any(  # a dp_cp slip needs d, cp > 1; an edp one p > 1; ep not dividing d, folding
        d > 1 and p > 1 and cp > 1 and d % ep and not all(map(pow2, (d, cp)))
        for d, t, p, cp, ep in FIVE_D_SHAPES
    )
    d, t, p, cp, ep = FIVE_D_UNSUPPORTED
    assert (t * cp * d) % ep


@pytest.mark.parametrize(
    "candidate, reason",
    [
        (five_d_no_rule_check, "it must raise a ValueError naming the rule"),
        (five_d_wrong_exception, "your function raised AssertionError; raise a ValueError"),
    ],
)
def test_five_d_unsupported_shape_must_raise(candidate, reason, capsys):
    assert reason in failure("three_d.five_d_groups", candidate, capsys)


@pytest.mark.parametrize(
    "candidate, reason",
    [
        (lambda *s: _five(*s, order="tdc"), "step by t·d = 8: dp and cp are swapped"),
        (
            lambda *s: _five(*s, order="ctd"),
            "cp groups are consecutive ranks: cp and tp are swapped",
        ),
        (
            lambda *s: _five(*s, ep_rule="inside_dp"),
            "your ep groups step by t·cp = 4 through the data-parallel ranks: ep is not folded",
        ),
        (lambda *s: _five(*s, ep_rule="edp_inner"), "step by S/ep = 8 (ep and edp swapped)"),
        (
            lambda *s: _five(*s, base=1),
            "rank 16 in your cp groups is outside [0, 16) (an off-by-one?)",
        ),
        (
            lambda *s: _five(*s, offset=False),
            "for (d, t, p, cp, ep) = (1, 2, 2, 2, 4): rank 0 is in two ep groups, [0, 1, 2, 3] and "
            "[0, 1, 2, 3] (the same group twice",
        ),
        (
            lambda *s: _five(*s, edp_rule="dense"),
            "(1, 2, 2, 2, 4): your edp groups are the dense weights' dp_cp groups",
        ),
        (lambda *s: dict(_five(*s), edp=[[0]]), "rank 1 is in no edp group"),
        (lambda *s: [[0]], "return a dict with keys 'cp', 'dp_cp', 'ep', 'edp'"),
        (
            lambda d, t, p, cp, ep: {
                k: __import__("minipar.grid", fromlist=["Grid"]).Grid(d, t, p, cp, ep).groups(k)
                for k in ("cp", "dp_cp", "ep", "edp")
            },
            "course's own minipar.grid",
        ),
    ],
)
def test_five_d_group_slips(candidate, reason, capsys):
    assert reason in failure("three_d.five_d_groups", candidate, capsys)
