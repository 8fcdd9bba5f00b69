"""The course's one rank grid: tp → cp → dp → pp innermost first, experts folded over a stage.
Every rank is in exactly one group of each kind, groups have the stated sizes and strides, on
non-powers of two too; created torch groups reduce over exactly the ranks the grid names; a
grid with dp and cp swapped is caught by the same checks (negative control)."""

import itertools

import pytest

from minipar.grid import KINDS, Grid, new_groups
from minipar.runtime.launch import run

SHAPES = [
    (1, 1, 1, 1, 1),
    (2, 2, 2, 2, 4),
    (3, 1, 1, 2, 2),
    (1, 2, 2, 2, 2),
    (3, 2, 5, 3, 9),
    (5, 3, 1, 1, 15),
    (2, 3, 2, 5, 6),
    (1, 1, 3, 4, 1),
]


def expected_sizes(g: Grid) -> dict:
    """(size of one group, number of groups) of each kind."""
    S, N = g.stage_size, g.world_size
    return {
        "tp": g.t,
        "cp": g.cp,
        "dp": g.d,
        "dp_cp": g.d * g.cp,
        "pp": g.p,
        "ep": g.ep,
        "edp": S // g.ep,
        "embedding": min(2, g.p),
    }, N


def check_partition(g: Grid, groups_of) -> list[str]:
    """What is wrong with ``groups_of(kind)`` as the groups of ``g`` (empty: nothing)."""
    sizes, N = expected_sizes(g)
    problems = []
    for kind in KINDS:
        groups = groups_of(kind)
        members = sorted(itertools.chain(*groups))
        everyone = (
            list(range(N))
            if kind != "embedding"
            else sorted(r for r in range(N) if g.coord(r).pp in (0, g.p - 1))
        )
        if members != everyone:
            problems.append(f"{kind}: ranks not covered exactly once")
        if any(len(x) != sizes[kind] for x in groups):
            problems.append(f"{kind}: a group is not of size {sizes[kind]}")
        if any(x != sorted(x) for x in groups):
            problems.append(f"{kind}: a group is not in increasing order")
    # what the ranks of one group share, from the coordinates
    for r in range(N):
        c = g.coord(r)
        for kind, free in (
            ("tp", "tp"),
            ("cp", "cp"),
            ("dp", "dp"),
            ("pp", "pp"),
            ("dp_cp", ("dp", "cp")),
        ):
            mine = next((x for x in groups_of(kind) if r in x), [])
            fixed = [k for k in c._fields if k not in free]
            if {tuple(getattr(g.coord(x), k) for k in fixed) for x in mine} != {
                tuple(getattr(c, k) for k in fixed)
            }:
                problems.append(f"{kind}: rank {r}'s group {mine} mixes other coordinates")
    return problems


@pytest.mark.parametrize("d, t, p, cp, ep", SHAPES)
def test_every_rank_in_exactly_one_group_of_each_kind(d, t, p, cp, ep):
    g = Grid(d, t, p, cp, ep)
    assert check_partition(g, g.groups) == []
    for r in range(g.world_size):
        assert g.rank(*g.coord(r)) == r
        for kind in KINDS:
            mine = g.group_of(kind, r)
            assert r in mine or (kind == "embedding" and 0 < g.coord(r).pp < p - 1)


@pytest.mark.parametrize("d, t, p, cp, ep", SHAPES)
def test_strides(d, t, p, cp, ep):
    g = Grid(d, t, p, cp, ep)
    N, S = g.world_size, g.stage_size
    assert g.strides() == {"tp": 1, "cp": t, "dp": t * cp, "pp": t * cp * d}
    step = lambda x: {b - a for a, b in zip(x, x[1:])}
    for kind, stride in (("tp", 1), ("cp", t), ("dp", t * cp), ("pp", S), ("ep", 1), ("edp", ep)):
        assert all(step(x) <= {stride} for x in g.groups(kind)), kind
    # experts: ep consecutive ranks inside one stage; edp the same expert slice of the stage
    for x in g.groups("ep") + g.groups("edp"):
        assert len({r // S for r in x}) == 1
    for r in range(N):
        pp, edp, e = g.expert_coord(r)
        assert r == pp * S + edp * ep + e
        assert g.group_of("ep", r).index(r) == e and g.group_of("edp", r).index(r) == edp


def test_example_by_hand():
    g = Grid(d=2, t=2, p=2, cp=2, ep=4)
    assert g.groups("tp")[:2] == [[0, 1], [2, 3]]
    assert g.groups("cp")[:2] == [[0, 2], [1, 3]]
    assert g.groups("dp")[:2] == [[0, 4], [1, 5]]
    assert g.groups("dp_cp")[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert g.groups("pp")[:2] == [[0, 8], [1, 9]]
    assert g.groups("ep") == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert g.groups("edp")[:4] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g.groups("embedding") == g.groups("pp")
    # folding: ep = 2 does not divide d = 3, but divides the stage's t·cp·d = 6 ranks
    f = Grid(d=3, t=1, p=1, cp=2, ep=2)
    assert f.groups("ep") == [[0, 1], [2, 3], [4, 5]] and f.groups("edp") == [[0, 2, 4], [1, 3, 5]]
    assert Grid(p=3).group_of("embedding", 1) == []


def test_describe_lists_coordinates_and_groups():
    text = Grid(2, 2, 2, 2, 4).describe(gpus_per_node=8)
    assert text.count("\n") == 1 + 16 + len(KINDS)
    assert "rank  pp  dp  cp  tp edp  ep  node" in text
    assert "tp groups:        [0, 1] [2, 3]" in text and "(0 of 8 span more than one node)" in text
    assert "ep × edp = 4 × 2" in str(Grid(2, 2, 2, 2, 4))


def test_bad_grid_names_rule_and_value():
    with pytest.raises(ValueError, match=r"cp \(0\) must be an integer >= 1"):
        Grid(cp=0)
    with pytest.raises(
        ValueError,
        match=r"ep \(4\) must divide the ranks of one pipeline stage, "
        r"t·cp·d = 1·3·2 = 6",
    ):
        Grid(d=2, cp=3, ep=4)
    with pytest.raises(ValueError, match=r"rank \(16\) must be in \[0, 16\)"):
        Grid(2, 2, 2, 2).coord(16)
    with pytest.raises(ValueError, match=r"group kind \('mp'\) must be one of tp, cp"):
        Grid().groups("mp")


def test_negative_control_dp_and_cp_swapped_is_caught():
    """A grid with dp inside cp (stride of cp = t·d) has the right sizes but cp groups that mix
    data-parallel replicas: the coordinate check names it."""
    g = Grid(2, 2, 1, 2)

    def swapped(kind):
        if kind in ("cp", "dp"):
            other = "dp" if kind == "cp" else "cp"
            return g.groups(other)  # same sizes here (d = cp = 2), other ranks
        return g.groups(kind)

    problems = check_partition(g, swapped)
    assert any(p.startswith("cp: rank 0's group [0, 4]") for p in problems), problems


def members_on_rank(rank, world_size, shape):
    """Create all groups; in each of this rank's, all-gather the members' ranks."""
    import torch
    import torch.distributed as dist

    from minipar.grid import Grid, new_groups

    groups = new_groups(Grid(*shape))
    out = {}
    for kind, group in groups.items():
        if group is None:
            continue
        got = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size(group))]
        dist.all_gather(got, torch.tensor([rank]), group=group)
        out[kind] = [int(x) for x in got]
    return out


@pytest.mark.slow
def test_created_groups_hold_the_ranks_the_grid_names():
    shape = (1, 2, 2, 2, 2)
    g = Grid(*shape)
    seen = run(members_on_rank, g.world_size, shape, backend="gloo", timeout=240)
    for r, groups in enumerate(seen):
        for kind in KINDS:
            assert groups.get(kind, []) == g.group_of(kind, r), (r, kind)


def test_new_groups_refuses_a_world_of_the_wrong_size(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "get_world_size", lambda *a: 6)
    monkeypatch.setattr(dist, "get_rank", lambda *a: 0)
    with pytest.raises(ValueError, match=r"world size \(6\) must equal t·cp·d·p \(2·2·1·2 = 8\)"):
        new_groups(Grid(1, 2, 2, 2))
