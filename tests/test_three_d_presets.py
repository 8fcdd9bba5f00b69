"""The layout explorer's presets: every model opens on its published layout or the planner's
best, draws the settings it models, shows them in the controls (planLink) and greys out every
control the chart would ignore (planDisabled); the chart's title fits its 520-px chart."""

import re

import pytest
from explorer_parity_support import js_call, node_available

from minipar.cost.planner import three_d as planner
from minipar.widgets.three_d import (
    PLANNER_LAYOUTS,
    PLANNER_PRESETS,
    PRESET_LAYOUTS,
    plan_config,
    planner_layouts,
    planner_preset,
    preset_layout,
    preset_run,
    write_planner_layouts,
)

pytestmark = pytest.mark.skipif(
    not node_available(), reason="Node.js (/usr/bin/node) not installed"
)


LAYOUT = re.compile(
    r"t = (\d+), cp = (\d+), p = (\d+), d = (\d+), ep = (\d+), b = (\d+), m = \d+, B = \d+ "
    r"\(the preset's layout\)"
)
TITLE = re.compile(r"<text[^>]*font-weight=\"600\"[^>]*>([^<]*)</text>")


def test_every_model_opens_on_a_preset_layout():
    """No model falls back to the custom boxes' t = 8, p = 16 when the page opens."""
    assert [k for k in planner.MODELS if preset_layout(k) is None] == []


def test_each_preset_draws_what_it_states_and_fits():
    names = list(planner.MODELS)
    got = js_call(
        "three_d", [("drawExplorer", ["plan", {"model": k}, plan_config()]) for k in names]
    )
    for name, (kind, out) in zip(names, got):
        assert kind == "ok" and out["error"] is None, (name, out["error"])
        html = out["html"]
        assert "<b>does not fit</b>" not in html, name
        t, cp, p, d, ep, b = map(int, LAYOUT.search(html).groups())
        preset = preset_layout(name)
        fixed = preset.get("controls", {})
        assert (t, p) == (preset["t"], preset["p"]), name
        assert (cp, ep, b) == (fixed.get("cp", 1), fixed.get("ep", 1), fixed.get("b", 1)), name
        assert d == preset["gpus"] // (t * cp * p), name
        title = TITLE.search(html).group(1)
        assert len(title) <= 64, (name, title)  # 12-px bold text in a 520-px chart


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
@pytest.mark.parametrize("name", sorted(PLANNER_PRESETS))
def test_planner_presets_are_the_planners_best(name):
    """The stored layout the explorer opens ``name`` on is the search's best today: a change to
    the planner that moves it fails here until the file is written again."""
    fresh = planner_preset(name)  # the search, in this process
    assert planner_layouts()[name] == fresh, (
        f"{name}: the planner's best is now {fresh}, {PLANNER_LAYOUTS.name} says "
        f"{planner_layouts()[name]}: run `python -m minipar.widgets.three_d` and commit the file"
    )


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_the_stored_layouts_are_what_the_writer_writes(tmp_path):
    """:func:`write_planner_layouts` (``python -m minipar.widgets.three_d``) writes the stored
    file byte for byte (from the searches above, cached in this process)."""
    out = tmp_path / "layouts.json"
    write_planner_layouts(out)
    assert out.read_text("utf-8") == PLANNER_LAYOUTS.read_text("utf-8")


def test_mixtral_splits_its_experts_and_llama3_interleaves():
    assert preset_layout("mixtral-8x7b")["controls"]["ep"] > 1
    ((kind, out),) = js_call(
        "three_d", [("drawExplorer", ["plan", {"model": "llama3-405b-128k"}, plan_config()])]
    )
    bubble = float(re.search(r"bubble ([\d.]+) % of the step", out["html"]).group(1))
    assert bubble < 30, bubble  # v = 1 left a 48 % bubble
    assert "nvlink4-h100" in out["html"] and "nvlink3-a100" not in out["html"]


def test_the_controls_show_the_preset_and_grey_out_what_it_fixes():
    base = {"layout": "preset", "zero": 1, "cp": 1}
    calls = [
        ("planLink", [{**base, "model": "llama3-405b-128k"}, "model", plan_config()]),
        ("planDisabled", [{**base, "model": "llama3-405b-128k"}, plan_config()]),
        ("planDisabled", [{**base, "model": "bloom-176b"}, plan_config()]),
        ("planDisabled", [{**base, "model": "gpt3-175b", "layout": "custom"}, plan_config()]),
        (
            "planDisabled",
            [{**base, "model": "gpt3-175b", "layout": "custom", "zero": 3}, plan_config()],
        ),
        ("planDisabled", [{**base, "model": "mixtral-8x7b"}, plan_config()]),
        ("planLink", [{**base, "model": "gpt3-175b", "layout": "custom"}, "model", plan_config()]),
        ("planLink", [{**base, "model": "llama3-405b-128k"}, "price", plan_config()]),
    ]
    (link405, off405, off_bloom, off_custom, off_z3, off_mix, link_custom, link_price) = [
        out for _, out in js_call("three_d", calls)
    ]
    assert link405["gpu"] == "H100-SXM" and link405["v"] == 4 and link405["cp"] == 16
    assert link405["t"] == 8 and link405["p"] == 16 and link405["gpus"] == 16384
    for control in ("gpu", "recompute", "zero", "sp", "t", "p", "gpus", "batch", "ep"):
        assert control in off405, control
    assert "recompute" in off_bloom and "zero" in off_bloom and "gpu" not in off_bloom
    assert not {"t", "p", "gpus", "batch", "gpu", "recompute"} & set(off_custom)
    assert "ep" in off_custom and "z3" in off_custom and "cpalg" in off_custom
    assert "z3" not in off_z3
    assert "ep" in off_mix  # fixed by the preset; a dense model's ep never applies
    assert link_custom == {} and link_price == {}


def disabled_controls(values: dict) -> list:
    ((_, off),) = js_call("three_d", [("planDisabled", [values, plan_config()])])
    return off


def test_deepseek_v3_opens_on_its_published_layout():
    """DeepSeek-V3 opens on its report's layout (16-way PP, 64-way EP across 8 nodes, ZeRO-1
    data parallelism, no TP) on 2048 H800 with FP8 GEMMs and DualPipe's overlapped all-to-alls, its 61
    layers on uneven stages; the controls show it and grey it out; the overlap control is greyed
    out where there is no all-to-all (a dense model, or ep = 1)."""
    base = {"layout": "preset", "model": "deepseek-v3"}
    custom = {"layout": "custom", "zero": 1, "cp": 1}
    (_, out), (_, link), (_, off), (_, dense), (_, ep1), (_, ep8) = js_call(
        "three_d",
        [
            ("drawExplorer", ["plan", {"model": "deepseek-v3"}, plan_config()]),
            ("planLink", [base, "model", plan_config()]),
            ("planDisabled", [base, plan_config()]),
            ("planDisabled", [{**custom, "model": "gpt3-175b", "ep": 1}, plan_config()]),
            ("planDisabled", [{**custom, "model": "deepseek-v3", "ep": 1}, plan_config()]),
            ("planDisabled", [{**custom, "model": "deepseek-v3", "ep": 8}, plan_config()]),
        ],
    )
    assert out["error"] is None, out["error"]
    html = out["html"]
    assert "t = 1, cp = 1, p = 16, d = 128, ep = 64, b = 1, m = 120, B = 15360" in html
    assert "(the preset's layout), uneven stages" in html
    assert "nvlink4-h800" in html and "ib-ndr400" in html
    assert link["gpu"] == "H800" and link["fp8"] == "rowwise" and link["zero"] == 1
    assert link["ep_overlap"] is True and link["dualpipe"] is True
    assert (link["t"], link["p"], link["ep"], link["gpus"]) == (1, 16, 64, 2048)
    for control in ("gpu", "fp8", "ep", "ep_overlap", "dualpipe", "t", "p", "zero"):
        assert control in off, control
    assert "ep_overlap" in dense and "ep_overlap" in ep1 and "ep_overlap" not in ep8
    assert "dualpipe" in ep8  # greyed out until the all-to-alls are overlapped
    assert "dualpipe" not in disabled_controls(
        {**custom, "model": "deepseek-v3", "ep": 8, "ep_overlap": True}
    )


@pytest.mark.parametrize("name", sorted(PRESET_LAYOUTS))
def test_published_preset_draws_what_the_planner_prices(name):
    """The explorer's chart of a published preset and the planner's evaluation of
    :func:`preset_run` (what the book's figures read) give the same MFU: the preset's split,
    FP8 recipe, GPU and links reach both."""
    ((_, out),) = js_call("three_d", [("drawExplorer", ["plan", {"model": name}, plan_config()])])
    c = planner.evaluate(*preset_run(name))
    assert f"MFU <b>{100 * c.mfu:.1f} %</b>" in out["html"], (name, c.mfu)
