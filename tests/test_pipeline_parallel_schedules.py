"""Pipeline schedules as data: structure, deadlock detection, bubble and in-flight activations
of every schedule equal the closed-form model; controls show the simulator catches bad lists."""

import pytest

from minipar.pipeline_parallel import Action, ScheduleError, schedule, simulate, table
from minipar.pipeline_parallel.model_bubble import bubble_fraction, peak_in_flight
from minipar.pipeline_parallel.schedules import one_f_one_b_schedule
from minipar.plotting.pipeline_parallel import text_timeline

CASES = [
    (name, p, m, v)
    for name, v in (("gpipe", 1), ("1f1b", 1), ("zb-h1", 1), ("interleaved", 2), ("interleaved", 3))
    for p in (1, 2, 3, 4, 5)
    for m in (p, 2 * p, 2 * p + 1, 4 * p)
    if not (name == "interleaved" and (m % p or p == 1))
]


def _paper_bubble(name, p, m, v):
    """The papers' closed forms with t_F = t_B = t_W, written out here (independent of
    minipar.cost): GPipe/1F1B (p−1)/(m+p−1), interleaved (p−1)/(v·m+p−1), ZB-H1
    (p−1)(t_F+t_B−t_W)/(m(t_F+t_B+t_W)+(p−1)(t_F+t_B−t_W)) = (p−1)/(3m+p−1)."""
    if name == "zb-h1":
        return (p - 1) / (3 * m + p - 1)
    return (p - 1) / ((v if name == "interleaved" else 1) * m + p - 1)


def _paper_peak(name, r, p, m, v):
    return {
        "gpipe": m,
        "1f1b": min(p - r, m),
        "zb-h1": min(p, m),
        "interleaved": min(v * m, 2 * (p - r - 1) + (v - 1) * p + 1),
    }[name]


@pytest.mark.parametrize("name, p, m, v", CASES)
def test_bubble_and_in_flight_match_the_model(name, p, m, v):
    """The simulator (a schedule run on paper) against the closed forms of the papers, and the
    course's cost model (minipar.cost.chapters.pipeline_parallel) against the same numbers."""
    sim = simulate(schedule(name, p, m, v))
    assert sim.bubble == pytest.approx(_paper_bubble(name, p, m, v), abs=1e-12)
    assert sim.peak_in_flight == [_paper_peak(name, r, p, m, v) for r in range(p)]
    assert bubble_fraction(name, p, m, v) == pytest.approx(_paper_bubble(name, p, m, v), abs=1e-12)
    assert [peak_in_flight(name, r, p, m, v) for r in range(p)] == sim.peak_in_flight


def test_the_model_check_catches_a_wrong_schedule():
    """Negative control: 1F1B with one extra warm-up forward on rank 0 (a classic off-by-one)
    holds one more micro-batch on that rank: the in-flight check sees it."""
    p, m = 4, 8
    acts = schedule("1f1b", p, m)
    ops = acts[0]
    i = next(k for k, a in enumerate(ops) if a.op == "B")
    f = next(k for k, a in enumerate(ops) if k > i and a.op == "F")
    ops.insert(i, ops.pop(f))  # rank 0 runs p forwards before its first B
    sim = simulate(acts)
    assert sim.peak_in_flight[0] == _paper_peak("1f1b", 0, p, m, 1) + 1


def test_1f1b_structure():
    p, m = 4, 6
    acts = schedule("1f1b", p, m)
    for r, lst in enumerate(acts):
        ops = "".join(a.op for a in lst)
        warm = p - r - 1
        assert ops.startswith("F" * warm + "FB")  # warm-up p−r−1, then the first pair
        assert ops == "F" * warm + "FB" * (m - warm) + "B" * warm
        assert {a.stage for a in lst} == {r}
    assert acts[3] == [Action(o, 3, i) for i in range(m) for o in "FB"]
    assert (
        table(schedule("1f1b", 2, 2)) == "rank 0 | F0.0 F0.1 B0.0 B0.1\n"
        "rank 1 | F1.0 B1.0 F1.1 B1.1"
    )


def test_gpipe_and_1f1b_same_bubble_different_memory():
    g, o = simulate(schedule("gpipe", 4, 8)), simulate(schedule("1f1b", 4, 8))
    assert g.makespan == o.makespan
    assert g.peak_in_flight == [8] * 4 and o.peak_in_flight == [4, 3, 2, 1]


def test_interleaved_order_is_megatrons():
    acts = schedule("interleaved", 2, 4, v=2)
    # rank 0 owns stages 0 and 2; groups of p = 2 micro-batches per chunk
    assert [str(a) for a in acts[0][:6]] == ["F0.0", "F0.1", "F2.0", "F2.1", "F0.2", "B2.0"]
    assert {a.stage for a in acts[1]} == {1, 3}
    # chunk units in flight in stage units: (1 + (p−1)/(p·v)) × 1F1B's p on rank 0 for large m
    sim = simulate(schedule("interleaved", 4, 16, v=2))
    assert sim.peak_in_flight_stages[0] == pytest.approx(4 * (1 + 3 / 8))


def test_zb_h1_splits_backward_and_beats_1f1b():
    p, m = 4, 8
    acts = schedule("zb-h1", p, m)
    for r, lst in enumerate(acts):
        assert sum(a.op == "W" for a in lst) == m
        for i in range(m):  # W after its B
            assert lst.index(Action("W", r, i)) > lst.index(Action("B", r, i))
    zb, ofob = simulate(acts), simulate(schedule("1f1b", p, m))
    assert zb.makespan == 3 * m + (p - 1)  # (p−1)(t_F + t_B − t_W) of idle
    assert ofob.makespan == 3 * m + 3 * (p - 1)  # (p−1)(t_F + t_B + t_W)


def test_text_timeline():
    sim = simulate(schedule("gpipe", 2, 2), t_f=1, t_b=1, t_w=1)
    assert text_timeline(sim.timeline, 2) == "rank 0 |01...aabb|\nrank 1 |.01aabb..|"


# ------------------------------------------------------------------ negative controls
def _one_f_one_b_mirrored(p, m):
    """Bug: warm-up of r forwards (counted from the wrong end) instead of p−r−1."""
    out = []
    for r in range(p):
        w = min(r, m)
        lst = [Action("F", r, i) for i in range(w)]
        for i in range(m - w):
            lst += [Action("F", r, w + i), Action("B", r, i)]
        out.append(lst + [Action("B", r, i) for i in range(m - w, m)])
    return out


def test_simulator_catches_bad_schedules():
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate(_one_f_one_b_mirrored(3, 6))
    wrong_owner = schedule("1f1b", 2, 2)
    wrong_owner[0][0] = Action("F", 1, 0)
    with pytest.raises(ScheduleError, match=r"stage 1 belongs to rank 1"):
        simulate(wrong_owner)
    missing = schedule("gpipe", 2, 3)
    missing[1].pop()
    with pytest.raises(ScheduleError, match="missing"):
        simulate(missing)


def test_off_by_one_warmup_changes_memory_not_correctness():
    # one extra warm-up forward: still runs, but rank r holds p−r+1 micro-batches
    p, m = 4, 8
    lists = [one_f_one_b_schedule(r, p + 1, m) for r in range(p)]
    sim = simulate(lists)
    assert sim.peak_in_flight == [p - r + 1 for r in range(p)]


@pytest.mark.parametrize(
    "args, match",
    [
        (("zb", 2, 4), "schedule"),
        (("1f1b", 0, 4), r"p \(0\)"),
        (("interleaved", 4, 6, 2), r"m \(6\) to be a multiple of p \(4\)"),
        (("interleaved", 2, 4, 1), r"chunks v \(1\) >= 2"),
        (("gpipe", 2, 4, 2), r"chunks v \(2\)"),
    ],
)
def test_schedule_errors(args, match):
    with pytest.raises(ValueError, match=match):
        schedule(*args)
