"""Every modern validation score beside a fair baseline (minipar.cost.validation.baseline: one
constant MFU per precision, of that precision's datasheet peak, fitted on calibration rows only)
and counted by independent layout (rows that differ only in d are one layout), as the three_d
appendix prints them (book/glue/fair_tables.py)."""

import math
import sys
from pathlib import Path

import pytest

from minipar.cost.validation import baseline, experiment3, fair, modern

GLUE = Path(__file__).resolve().parents[1] / "book" / "glue"
sys.path.insert(0, str(GLUE))
import fair_tables as tables  # noqa: E402 (book/glue joins sys.path above: the book's tables)

APPENDIX = Path(__file__).resolve().parents[1] / "book" / "three_d_appendix.md"


def _row(precision, mfu, gpu="H100-SXM", key=("k",)):
    """A made-up evaluated row that implies ``mfu`` of its precision's peak."""
    flops = 1e18
    peak = {"bf16": 989.4e12, "fp8": 1978.9e12}[baseline.family(precision)]
    return dict(precision=precision, gpu=gpu, gpus=8, model_flops=flops, layout_key=key) | dict(
        measured_s=flops / (8 * peak * mfu), error=0.0
    )


def test_the_baseline_fits_one_mfu_per_precision_of_that_precisions_peak():
    """BF16 rows at 40 % and 62.5 % of the BF16 peak: their geometric mean, 50 %; an FP8 row at
    30 % of the FP8 peak: 30 %, not 60 % (the FP8 row priced at the BF16 peak, the old
    baseline's flaw, would fit 0.6)."""
    mfu = baseline.fit([_row("bf16", 0.4), _row("bf16", 0.625), _row("fp8-cs", 0.3)])
    assert mfu["bf16"] == pytest.approx(0.5) and mfu["fp8"] == pytest.approx(0.3)
    assert baseline.peak("H100-HBM2e-500W", "fp8") == baseline.peak("H100-SXM", "fp8") == 1978.9e12
    assert baseline.family("mxfp8") == baseline.family("fp8-cs") == "fp8"
    only_bf16 = baseline.fit([_row("bf16", 0.4)])
    assert only_bf16 == {"bf16": pytest.approx(0.4)}
    with pytest.raises(ValueError, match="no calibration row of precision fp8"):
        baseline.seconds(_row("fp8", 0.3), only_bf16)


def test_rows_that_differ_only_in_d_are_one_layout():
    """A layout is within only when every one of its rows is: two rows of one layout, one
    within and one not, count as no layout within (counted per row it would be one)."""
    rows = [_row("bf16", 0.5, key=("a",)), _row("bf16", 0.5, key=("a",))]
    rows[0]["error"], rows[1]["error"] = 5.0, 20.0
    s = baseline.score(rows, {"bf16": 0.5, "fp8": 0.3})
    assert (s["n"], s["within"], s["layouts"], s["layouts_within"]) == (2, 1, 1, 0)
    recorded = [fair.enrich(e) for e in experiment3.as_evaluated()["rows"]]
    eight_b = {e["layout_key"] for e in recorded if "llama-3-1-8b-bf16" in e["id"]}
    assert len(eight_b) == 1  # 8 to 128 GPUs: one layout
    assert len({e["layout_key"] for e in recorded}) == 10


def test_each_baseline_is_fitted_on_calibration_rows_only():
    """Experiments 1 to 3: the three rows that set the model's constants, none of them scored;
    experiment 4: experiment 3's 60 kept rows (its 50 and the ten GPT-3 175B rows)."""
    for exp in fair.EXPERIMENTS:
        cal = {e["id"] for e in fair.calibration(exp)}
        assert cal == set(modern.CALIBRATION)
        assert not cal & {e["id"] for e in fair.rows(exp)}
    cal4 = [e["id"] for e in fair.calibration("4")]
    assert cal4 == [r["id"] for r in experiment3.kept_rows()] and len(cal4) == 60
    mfu = baseline.fit(fair.calibration("4"))
    assert (round(mfu["bf16"], 3), round(mfu["fp8"], 3)) == (0.549, 0.380)


def test_the_scores_beside_their_baselines_as_recorded():
    """The records of experiments 1 to 3 (and 3 with the ten GPT-3 175B rows as the frozen
    model priced them): (rows within, rows, layouts within, layouts) for the model, the
    baseline and the in-sample constant."""
    got = {
        s["experiment"]: (
            (s["within"], s["n"], s["layouts_within"], s["layouts"]),
            (s["baseline_within"], s["baseline_layouts_within"]),
            (s["in_sample_within"], s["in_sample_layouts_within"]),
            round(s["median"], 1),
            round(s["baseline_median"], 1),
            round(s["in_sample_median"], 1),
        )
        for s in fair.scores()
    }
    assert got == {
        "1": ((17, 33, 16, 27), (3, 3), (5, 5), 14.2, 51.7, 25.7),
        "2": ((6, 15, 5, 14), (3, 2), (7, 7), 16.6, 41.6, 17.9),
        "3": ((46, 50, 8, 10), (0, 0), (48, 8), 6.3, 50.3, 2.9),
        "3+": ((51, 60, 9, 12), (0, 0), (58, 10), 9.6, 50.1, 2.4),
    }
    late = fair.late_175b()
    assert [e["id"] for e in late] == [
        f"dgxc2502-gpt3-175b-{p}-{g}gpu"
        for p in ("bf16", "fp8")
        for g in (128, 256, 512, 1024, 2048)
    ]
    for e in late:  # the record's error is its predicted step over the published one
        r = next(r for r in experiment3.load()["rows"] if r["id"] == e["id"])
        assert e["measured_s"] == experiment3.measured_seconds(r)
        assert e["error"] == pytest.approx(100 * (e["predicted_s"] / e["measured_s"] - 1))


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_the_a100_check_beside_a_constant_fitted_on_its_calibration_rows():
    a = fair.a100()
    assert round(a["tflops"]) == 145 and math.isclose(a["band"], 10.0)
    assert (a["within"], a["baseline_within"], a["n"]) == (5, 4, 5)


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_the_appendix_prints_every_score_beside_its_baseline():
    text = APPENDIX.read_text()
    flat = " ".join(text.split())
    assert tables.fair_score_table() in text
    for exp in ("3", "3+"):
        assert tables.fair_score_sentence(exp) in flat
    assert tables.a100_sentence() in flat
    s = fair.score("3+")
    mfu = s["in_sample_mfu"]
    assert f"({100 * mfu['bf16']:.0f} % of the BF16 peak and {100 * mfu['fp8']:.0f} % of" in flat
    assert s["in_sample_within"] > s["within"]  # "two numbers fitted to the rows do better"
    assert "Experiment 3's 50 rows are 10 independent checks, not 50." in flat
    late = fair.late_175b()
    bf = [e["error"] for e in late if "-bf16-" in e["id"]]
    fp = [e["error"] for e in late if "-fp8-" in e["id"]]
    assert f"the BF16 rows are {min(bf):+.1f} % to {max(bf):+.1f} %" in flat
    assert f"the FP8 rows {min(fp):+.1f} % to {max(fp):+.1f} %" in flat
    bf6 = [e["error_recipe_vp6"] for e in late if "-bf16-" in e["id"]]
    fp6 = [e["error_recipe_vp6"] for e in late if "-fp8-" in e["id"]]
    six = f"{min(bf6):+.1f} % to {max(bf6):+.1f} % and {min(fp6):+.1f} % to {max(fp6):+.1f} %"
    assert f"in place of the table's 12, {six})" in flat


def test_the_presets_table_sets_the_baseline_beside_each_score():
    """The H100 presets' table (book/glue/validation_tables.py) carries the fitted baseline's
    median and count beside the model's, and the prose's claim holds on every line."""
    import validation_tables as vt

    rows = vt.preset_errors()
    assert all(r["base_median"] > r["median"] for r in rows)
    assert [r["base_within"] for r in rows] == [0, 0, 3, 3]
    flat = " ".join(APPENDIX.read_text().split())
    assert "on every preset and experiment it misses by more than the model." in flat
    assert vt.preset_error_table() in APPENDIX.read_text()
