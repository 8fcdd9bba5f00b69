"""DeepSeek-V3's DualPipe schedule in the planner (Options.dualpipe): its bubble from the report's
Table 2, its rules (v = 1, p and m even, the all-to-alls overlapped), its second copy of each
stage's model states and the DeepSeek-V3 preset with it. Each test names the bug it catches."""

from dataclasses import replace
from pathlib import Path

import pytest

from minipar.cost.planner import moe_terms
from minipar.cost.planner import three_d as planner
from minipar.cost.planner.layout import term_bubble
from minipar.widgets.three_d import preset_run


def _lay(**kw):
    base = dict(global_batch=15360, tp=1, pp=16, dp=128, micro_batch=1, zero=1, ep=64)
    return planner.Layout(**(base | {"split": "units"} | kw))


def test_bubble_is_table_2s_against_1f1b():
    """With F = 1, B = 2, W = 1 and F&B = F + B = 3 (per micro-batch and stage), Table 2 gives
    DualPipe (p/2 − 1)(F&B + B − 3W) = 7 × 2 = 14 units at p = 16 and 1F1B (p − 1)(F + B) =
    15 × 3 = 45: the DualPipe bubble is 14/45 of 1F1B's at any m. Catches: (p − 1) kept, or
    the 3W left out."""
    lay = _lay()
    r, f = moe_terms.dualpipe_bubble(lay)
    r1, _ = term_bubble(lay)
    assert r1 == pytest.approx(15 / 120)
    assert r / r1 == pytest.approx(14 / 45, rel=1e-12)
    assert f == pytest.approx(r / (1 + r), rel=1e-12)
    assert (
        moe_terms.dualpipe_bubble(_lay(pp=2, dp=1024, global_batch=16384))[0] == 0.0
    )  # p/2 - 1 = 0


@pytest.mark.parametrize(
    "kw, rule",
    [
        (dict(pp=16, dp=128, global_batch=15360 - 128), "microbatches m (119) even"),
        (dict(pp=1, dp=2048, global_batch=16384), "p (1)"),
        (dict(chunks=2), "v (2) = 1"),
    ],
)
def test_dualpipe_refuses_odd_p_odd_m_and_interleaving(kw, rule):
    """DualPipe feeds micro-batches from both ends: p and m even (the report), and its chunks
    are not the interleaved schedule's. Catches: a layout priced that DualPipe cannot run."""
    with pytest.raises(ValueError, match=rule.replace("(", r"\(").replace(")", r"\)")):
        moe_terms.dualpipe_bubble(_lay(**kw))


def test_dualpipe_needs_the_all_to_all_overlap():
    """Catches: DualPipe's bubble priced with its all-to-alls left exposed."""
    with pytest.raises(ValueError, match="needs ep_overlap"):
        planner.Options(dualpipe=True)


def test_deepseek_v3_preset_with_dualpipe():
    """The published DeepSeek-V3 layout on 2048 H800 (PP 16, EP 64, ZeRO-1, FP8, the all-to-alls
    overlapped): DualPipe's bubble is 14/45 of 1F1B's, the step falls from about 21.9 s to
    20.2 s, and the second copy of each stage's states (and its FP8 weights, 1/16 more
    activations) takes the stage from about 53.5 GiB to 74.5 GiB, still within the H800's 78 GiB
    limit, as the report says a large EP allows. Catches: the second copy not counted, or the
    bubble not replaced."""
    m, cl, lay, opt = preset_run("deepseek-v3")
    one = planner.evaluate(m, cl, lay, replace(opt, ep_overlap=True, dualpipe=False))
    dual = planner.evaluate(m, cl, lay, replace(opt, ep_overlap=True, dualpipe=True))
    br, b1 = dual.breakdown, one.breakdown
    assert br.bubble_relative / b1.bubble_relative == pytest.approx(14 / 45, rel=1e-12)
    assert br.dualpipe == pytest.approx(
        b1.states + b1.fp8_weights + b1.activations / lay.pp, rel=1e-12
    )
    assert dual.bytes_per_gpu == pytest.approx(one.bytes_per_gpu + br.dualpipe, rel=1e-12)
    assert one.step_seconds == pytest.approx(21.9, abs=0.05)
    assert dual.step_seconds == pytest.approx(20.2, abs=0.05)
    assert one.bytes_per_gpu / 2**30 == pytest.approx(53.5, abs=0.05)
    assert dual.bytes_per_gpu / 2**30 == pytest.approx(74.5, abs=0.05) and dual.fits


def test_plan_flag_dualpipe(capsys):
    """`minipar plan --ep-overlap --dualpipe` prices DualPipe: a smaller bubble, the second copy
    in memory, only v = 1 layouts. Catches: the flag parsed and dropped."""
    from test_cli_cost import run_json

    argv = ["plan", "--model", "deepseek-v3", "--gpu", "H800", "--gpus", "2048"]
    argv += ["--global-batch", "15360", "--tp", "1", "--pp", "16", "--ep", "64", "--zero", "1"]
    argv += ["--micro-batch", "1", "--recompute", "selective", "--ep-overlap"]
    plain = run_json(capsys, *argv, "--top", "0")["configs"]
    dual = run_json(capsys, *argv, "--dualpipe", "--top", "0")["configs"]
    assert dual and all(c["chunks"] == 1 and c["dualpipe_bytes"] > 0 for c in dual)
    flat = next(c for c in plain if c["chunks"] == 1)
    assert dual[0]["bubble_relative"] < flat["bubble_relative"]


def test_appendix_states_the_dualpipe_numbers():
    """The expert-parallel appendix's DualPipe sentence quotes the planner's step and memory at
    the published layout. Catches: the prose left behind a change of the model."""
    text = " ".join(
        (Path(__file__).parents[1] / "book" / "expert_parallel_appendix.md").read_text().split()
    )
    m, cl, lay, opt = preset_run("deepseek-v3")
    one = planner.evaluate(m, cl, lay, replace(opt, ep_overlap=True, dualpipe=False))
    dual = planner.evaluate(m, cl, lay, replace(opt, ep_overlap=True, dualpipe=True))
    gib = 2**30
    assert f"step from {one.step_seconds:.1f} s to {dual.step_seconds:.1f} s" in text
    assert f"from {one.bytes_per_gpu / gib:.1f} GiB to {dual.bytes_per_gpu / gib:.1f} GiB" in text
    assert f"inside the {dual.breakdown.memory_limit / gib:.0f} GiB" in text
    r = dual.breakdown.bubble_relative / one.breakdown.bubble_relative
    assert "is 14/45 of" in text and r == pytest.approx(14 / 45)
