"""The rank grid: tp innermost, dp next, pp outermost; groups partition the ranks; on 8 gloo
ranks the created groups all-reduce over exactly the ranks the grid names."""

import itertools

import pytest

from minipar.runtime.launch import run
from minipar.three_d import RankGrid
from minipar.three_d.experiments import check_members, group_members_on_rank

SHAPES = [(1, 1, 1), (2, 2, 2), (3, 2, 5), (5, 3, 1), (1, 3, 2), (2, 1, 3), (4, 8, 6)]


@pytest.mark.parametrize("d, t, p", SHAPES)
def test_groups_partition_the_ranks(d, t, p):
    g = RankGrid(d, t, p)
    n = g.world_size
    for kind, size, count in (("tp", t, d * p), ("dp", d, t * p), ("pp", p, d * t)):
        groups = g.groups(kind)
        assert len(groups) == count and all(len(x) == size for x in groups)
        assert sorted(itertools.chain(*groups)) == list(range(n))
    # tp consecutive; dp stride t; pp stride d·t
    assert all(x == list(range(x[0], x[0] + t)) for x in g.groups("tp"))
    assert all(x == list(range(x[0], x[0] + d * t, t)) for x in g.groups("dp"))
    assert all(x == list(range(x[0], n, d * t)) for x in g.groups("pp"))
    for r in range(n):
        c = g.coord(r)
        assert g.rank(*c) == r
        # ranks in my tp group share my (pp, dp); in my dp group my (pp, tp); pp: (dp, tp)
        assert {g.coord(x)[:2] for x in g.group_of("tp", r)} == {(c.pp, c.dp)}
        assert {(g.coord(x).pp, g.coord(x).tp) for x in g.group_of("dp", r)} == {(c.pp, c.tp)}
        assert {g.coord(x)[1:] for x in g.group_of("pp", r)} == {(c.dp, c.tp)}
    emb = g.groups("embedding")
    assert len(emb) == d * t
    assert all(len(x) == (2 if p > 1 else 1) for x in emb)
    assert sorted(itertools.chain(*emb)) == sorted(
        r for r in range(n) if g.coord(r).pp in (0, p - 1)
    )


def test_example_2_2_2_by_hand():
    g = RankGrid(2, 2, 2)
    assert g.groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g.groups("dp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g.groups("pp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g.groups("embedding") == g.groups("pp")
    assert RankGrid(1, 1, 3).groups("embedding") == [[0, 2]]
    assert RankGrid(1, 1, 3).group_of("embedding", 1) == []


def test_describe_marks_groups_that_leave_a_node():
    text = RankGrid(2, 8, 3).describe(gpus_per_node=8)
    assert "tp groups:" in text and "(0 of 6 span more than one node)" in text
    assert text.count("\n") == 1 + 1 + 48 + 4 - 1
    assert "pp groups:" in str(RankGrid(2, 2, 2))


def test_bad_grid_names_rule_and_value():
    with pytest.raises(ValueError, match=r"t \(0\) must be an integer >= 1"):
        RankGrid(2, 0, 1)
    with pytest.raises(ValueError, match=r"rank \(8\) must be in \[0, 8\)"):
        RankGrid(2, 2, 2).coord(8)


@pytest.mark.slow
@pytest.mark.parametrize("d, t, p", [(2, 2, 2), (1, 3, 2)])
def test_created_groups_reduce_over_the_right_ranks(d, t, p):
    grid = RankGrid(d, t, p)
    results = run(group_members_on_rank, grid.world_size, d, t, p, backend="gloo", timeout=240)
    assert check_members(grid, results) == []
    # negative control: the classic bug, the tp and dp axes swapped (dp innermost), same sizes
    # for (2, 2, 2), is caught by the same check
    if d == t:
        swapped = [
            {"tp": r["dp"], "dp": r["tp"], **{k: r[k] for k in ("pp", "embedding") if k in r}}
            for r in results
        ]
        assert check_members(grid, swapped) != []


@pytest.mark.parametrize("d, t, p", SHAPES)
def test_the_3d_grid_is_the_course_grid_with_cp_and_ep_one(d, t, p):
    from minipar.grid import Grid

    g, whole = RankGrid(d, t, p), Grid(d, t, p)
    for kind in ("tp", "dp", "pp", "embedding"):
        assert g.groups(kind) == whole.groups(kind)
    assert all(
        tuple(g.coord(r)) == (c.pp, c.dp, c.tp) and c.cp == 0
        for r, c in ((r, whole.coord(r)) for r in range(g.world_size))
    )
    with pytest.raises(ValueError, match=r"group kind \('cp'\) must be one of tp, dp, pp"):
        g.groups("cp")


def test_the_3d_grid_refuses_cp_and_ep():
    with pytest.raises(ValueError, match=r"cp = ep = 1, got cp \(2\), ep \(1\)"):
        RankGrid(2, 2, 2, 2)
