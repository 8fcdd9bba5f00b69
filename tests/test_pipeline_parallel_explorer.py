"""The pipeline explorer's JavaScript equals its Python twins (schedule, simulate, pp_model);
the default view draws and an impossible setting gives the Python error message."""

import pytest
from explorer_parity_support import assert_parity, js_call, node_available

pytestmark = pytest.mark.skipif(not node_available(), reason="needs Node.js")

GRID = [
    dict(name=n, p=p, m=m, v=v)
    for n, v in (
        ("gpipe", 1),
        ("1f1b", 1),
        ("zb-h1", 1),
        ("interleaved", 2),
        ("interleaved", 3),
        ("gpipe", 2),
        ("interleaved", 1),
    )
    for p in (1, 2, 3, 4)
    for m in (1, 3, 4, 6, 8)
] + [dict(name="zb", p=2, m=2, v=1), dict(name="1f1b", p=0, m=2, v=1)]


def test_schedule_twin():
    from minipar.pipeline_parallel import schedule

    counts = assert_parity("pipeline_parallel", "schedule", schedule, GRID)
    assert 0 < counts["errors"] < counts["cases"]


def test_model_twin():
    from minipar.widgets.pipeline_parallel import pp_model

    cases = [
        dict(g, t_f=tf, t_b=tb, t_w=tw) for g in GRID for tf, tb, tw in ((1, 1, 1), (1, 2, 0.5))
    ]
    # invalid times: the same rule and message in both (t_F = -1 used to draw negative bars)
    cases += [
        dict(name="1f1b", p=2, m=2, v=1, t_f=tf, t_b=tb, t_w=tw)
        for tf, tb, tw in ((-1, 1, 1), (1, -0.5, 1), (1, 1, -2), (0, 0, 0), (0, 1, 0))
    ]
    counts = assert_parity("pipeline_parallel", "ppModel", pp_model, cases)
    assert 0 < counts["errors"] < counts["cases"]


def test_parity_check_catches_a_wrong_warmup():
    """Negative control: a Python twin whose 1F1B warm-up is one forward longer differs."""
    from minipar.pipeline_parallel.schedules import one_f_one_b_schedule

    wrong = lambda name, p, m, v: [one_f_one_b_schedule(r, p + 1, m) for r in range(p)]
    with pytest.raises(AssertionError, match="1 of 1 cases"):
        assert_parity("pipeline_parallel", "schedule", wrong, [dict(name="1f1b", p=3, m=6, v=1)])


def test_default_view_and_message():
    (_, default), (_, bad) = js_call(
        "pipeline_parallel",
        [
            ("drawExplorer", ["pp-schedule", {}, {}]),
            ("drawExplorer", ["pp-schedule", {"schedule": "interleaved", "m": 6, "v": 2}, {}]),
        ],
    )
    assert default["error"] is None and "<svg" in default["html"] and "0.273" in default["html"]
    assert bad["error"] == "interleaved schedule needs microbatches m (6) to be a multiple of p (4)"
    assert "minipar-explorer-message" in bad["html"]


def test_explorer_refuses_what_python_refuses():
    """Each invalid control gives the Python twin's message, naming the rule and the value:
    "interleaved" with the v field at 1 is refused (it used to run silently with v = 2), and so
    is a negative time (it used to draw bars at negative time)."""
    from minipar.widgets.pipeline_parallel import pp_model

    bad = [
        ({"schedule": "interleaved", "v": 1}, dict(name="interleaved", p=4, m=8, v=1)),
        ({"tF": -1}, dict(name="1f1b", p=4, m=8, v=1, t_f=-1)),
        ({"tW": -0.25}, dict(name="1f1b", p=4, m=8, v=1, t_w=-0.25)),
        ({"p": 0}, dict(name="1f1b", p=0, m=8, v=1)),
        ({"schedule": "gpipe", "v": 2}, dict(name="gpipe", p=4, m=8, v=2)),
    ]
    got = js_call("pipeline_parallel", [("drawExplorer", ["pp-schedule", ui, {}]) for ui, _ in bad])
    for (_, out), (ui, kw) in zip(got, bad):
        with pytest.raises(ValueError) as e:
            pp_model(**kw)
        assert out["error"] == str(e.value), ui
    ((_, ok),) = js_call(
        "pipeline_parallel",
        [("drawExplorer", ["pp-schedule", {"schedule": "interleaved", "v": 2}, {}])],
    )
    assert ok["error"] is None and "v = 2" in ok["html"] and "unit of t_F" in ok["html"]


def test_schedule_and_v_change_together():
    """Choosing "interleaved" lifts v to 2 (it accepts only v >= 2) and keeps a v already >= 2;
    any other schedule sets v to 1 and disables its box; changing another control links
    nothing. Every linked setting then draws without an error."""
    cases = [
        ({"schedule": "interleaved", "v": 1}, "schedule", {"v": 2}),
        ({"schedule": "interleaved", "v": 3}, "schedule", {}),
        ({"schedule": "gpipe", "v": 2}, "schedule", {"v": 1}),
        ({"schedule": "zb-h1", "v": 4}, "schedule", {"v": 1}),
        ({"schedule": "gpipe", "v": 2}, "m", {}),
    ]
    got = js_call("pipeline_parallel", [("ppLink", [vals, ch]) for vals, ch, _ in cases])
    assert [out for _, out in got] == [want for *_, want in cases]
    off = js_call(
        "pipeline_parallel",
        [("ppDisabled", [{"schedule": s}]) for s in ("gpipe", "1f1b", "interleaved", "zb-h1")],
    )
    assert [out for _, out in off] == [["v"], ["v"], [], ["v"]]
    linked = [
        ("drawExplorer", ["pp-schedule", {**vals, **want}, {}])
        for vals, ch, want in cases
        if ch == "schedule"
    ]
    assert all(out["error"] is None for _, out in js_call("pipeline_parallel", linked))
