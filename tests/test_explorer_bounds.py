"""No explorer input can freeze the page: every number box has a finite upper bound (the shared
code refuses to register one without it, and says why the bound is where it is in the box's
tooltip), and a chart's size stays bounded at the largest values (the timeline bins its
segments above TIMELINE_SEGMENTS). The browser side (typing the largest value into every box)
is tests/test_explorers_in_browser.py."""

import pytest
from explorer_parity_support import js_call, node_available

from minipar import chapters
from minipar.widgets.inputs import MAX_INPUT

pytestmark = pytest.mark.skipif(not node_available(), reason="needs Node.js")


def _number_controls():
    out = []
    for slug in chapters.SLUGS:
        ((_, names),) = js_call(slug, [("explorerNames", [])])
        for name, (_, spec) in zip(names, js_call(slug, [("explorerInputs", [n]) for n in names])):
            out += [(slug, name, c) for c in spec["controls"] if c["type"] == "number"]
    return out


@pytest.mark.slow
def test_every_number_box_has_a_finite_upper_bound():
    controls = _number_controls()
    assert len(controls) > 40
    unbounded = [(n, c["name"], c.get("max")) for _, n, c in controls if c.get("max") is None]
    assert not unbounded
    assert all(0 < c["max"] <= MAX_INPUT for _, _, c in controls)


def test_a_number_box_without_max_is_refused_and_the_tooltip_gives_the_range():
    spec = {
        "title": "x",
        "controls": [{"name": "n", "label": "ranks n", "type": "number", "min": 1}],
    }
    ((kind, msg),) = js_call("collectives", [("registerExplorer", ["x", spec])])
    assert (
        kind == "error"
        and msg == "explorer x: number control n needs a finite max (the largest value it accepts)"
    )
    boxes = [
        {"name": "n", "label": "ranks n", "type": "number", "min": 2, "max": 65536, "step": 1},
        {
            "name": "c",
            "label": "cp (ranks)",
            "type": "number",
            "min": 1,
            "max": 16,
            "step": 1,
            "why": "a, b",
        },
        {"name": "t", "label": "t_F", "type": "number", "min": 0, "max": 1000, "step": 0.25},
    ]
    got = [out for _, out in js_call("collectives", [("boundText", [c]) for c in boxes])]
    assert got == [
        "ranks n: from 2 to 65536, whole",
        "cp: from 1 to 16, whole (a, b)",
        "t_F: from 0 to 1000",
    ]


def _timeline(n_rows, per_row):
    rows = [
        {
            "label": f"r{r}",
            "segments": [
                {"start": k, "end": k + 0.5, "color": ["#111", "#222"][k % 2], "name": f"s{k}"}
                for k in range(per_row)
            ],
        }
        for r in range(n_rows)
    ]
    ((_, svg),) = js_call(
        "collectives", [("timeline", [{"title": "t", "xlabel": "time", "rows": rows}])]
    )
    return svg


@pytest.mark.slow
def test_a_timeline_draws_every_segment_up_to_the_limit_then_bins():
    limit, cells = 1500, 4000  # TIMELINE_SEGMENTS, TIMELINE_CELLS in explorer.js
    small = _timeline(4, 100)
    assert small.count("<rect") >= 400 and small.count("<title>") == 400
    big = _timeline(64, 4096 // 64 * 40)  # 163,840 segments
    assert "<title>" not in big and "columns per row, by share" in big
    assert big.count("<path") <= 2 and len(big) < 60 * cells
    assert limit < 64 * 4096 // 64 * 40


def test_pipeline_chart_size_is_bounded_at_its_largest_values():
    cases = [
        {"schedule": "1f1b", "p": 64, "m": 64},
        {"schedule": "zb-h1", "p": 64, "m": 64},
        {"schedule": "interleaved", "p": 8, "m": 64, "v": 8},
        {"schedule": "gpipe", "p": 8, "m": 512},
    ]
    got = js_call("pipeline_parallel", [("drawExplorer", ["pp-schedule", c, {}]) for c in cases])
    for c, (_, out) in zip(cases, got):
        assert out["error"] is None, c
        assert len(out["html"]) < 100_000, (c, len(out["html"]))


@pytest.mark.slow
def test_leaving_any_preset_for_custom_draws():
    """Choosing "custom" keeps the preset's layout where the model's own layers allow it, and
    otherwise moves p to the nearest divisor of the layers (bloom-176b: p = 12 over 70 layers
    was refused, and every other control then changed nothing)."""
    from minipar.widgets.three_d import plan_config

    config = plan_config()
    models = [m for m, shape in config["models"].items() if shape.get("layout")]
    ((_, defaults),) = js_call("three_d", [("defaultValues", ["plan", {}])])
    opened = js_call(
        "three_d", [("planLink", [{**defaults, "model": m}, "model", config]) for m in models]
    )
    custom = [
        {**defaults, "model": m, **link, "layout": "custom"} for m, (_, link) in zip(models, opened)
    ]
    links = js_call("three_d", [("planLink", [v, "layout", config]) for v in custom])
    drawn = js_call(
        "three_d",
        [
            ("drawExplorer", ["plan", {**v, **link}, config, "layout"])
            for v, (_, link) in zip(custom, links)
        ],
    )
    assert [(m, out["error"]) for m, (_, out) in zip(models, drawn) if out["error"]] == []
    bloom = dict(zip(models, [link for _, link in links]))["bloom-176b"]
    assert bloom == {"p": 10, "gpus": 320}  # d = 8 and t = 4 kept; 2048 / (8 * 2) micro-batches
    # DeepSeek-V3's 61 layers take p = 1 evenly: its DualPipe schedule (p even) goes off
    deepseek = dict(zip(models, [link for _, link in links]))["deepseek-v3"]
    assert deepseek == {"p": 1, "gpus": 128, "dualpipe": False}


def test_a_long_chart_title_is_squeezed_to_the_chart():
    long_title = "llama3-405b-128k, 16384 GPUs, t = 8, cp = 16, ep = 1: step per p at every depth"
    calls = [
        (
            "stackedBars",
            [{"title": t, "categories": ["a"], "stacks": [{"name": "x", "values": [1]}]}],
        )
        for t in ("short", long_title)
    ]
    (_, short), (_, long) = js_call("collectives", calls)
    assert "textLength" not in short
    assert 'textLength="508" lengthAdjust="spacingAndGlyphs"' in long
