"""Experiment 5 of the planner's validation (minipar.cost.validation.experiment5): the MoE rows of
published_moe.json on the frozen planner, mapped to its inputs before any was evaluated.

The first part holds the data and the mapping only: every row read is recorded, every kept row
has a preset, a GPU and a layout the planner prices, and the mapping's decisions (the GPU per
NVLink domain, FP8 recipe, pipeline chunks, recomputation) are the ones the module states."""

import sys
from collections import Counter
from pathlib import Path

import pytest

from minipar.cost.planner import three_d as planner
from minipar.cost.validation import baseline
from minipar.cost.validation import experiment5 as e5

DATA = e5.load()
ROWS = DATA["rows"]
KEPT = e5.kept_rows()


def test_every_row_read_is_recorded_kept_or_with_its_reason():
    assert len(ROWS) == 55 and len({r["id"] for r in ROWS}) == 55
    assert all(r["source"] in DATA["sources"] for r in ROWS)
    assert all((r["excluded_because"] is None) == r["kept"] for r in ROWS)
    reasons = Counter(r["excluded_because"] for r in ROWS if not r["kept"])
    assert reasons["no planner preset for GB300 (DGX-GB300, NVL72)"] == 17
    assert reasons["no planner preset for B300 (DGX-B300)"] == 7
    assert reasons["NVFP4 (4-bit) precision: the planner prices no FP4 GEMM"] == 3
    assert len(KEPT) == 14
    assert Counter(r["system"] for r in KEPT) == {"GB200-NVL72": 8, "B200": 3, "H100-SXM": 3}
    assert Counter(r["model"] for r in KEPT) == {
        "DeepSeek-V3": 6,
        "Qwen3-30B-A3B": 4,
        "Qwen3-235B-A22B": 4,
    }


def test_kept_rows_have_a_preset_a_gpu_and_a_consistent_layout():
    for r in KEPT:
        m = planner.MODELS[e5.PRESETS[r["model"]]]
        assert m.moe and r["system"] in ("H100-SXM", "B200", "GB200-NVL72"), r["id"]
        assert r["gpus"] == r["tp"] * r["pp"] * (r["cp"] or 1) * r["dp"], r["id"]
        assert r["etp"] in (None, 1), r["id"]  # ETP > 1 would be left out
        assert e5.measured_seconds(r) > 0


def test_the_mapping_decisions():
    """A rack of 72 gives 64 to a 256-GPU job; FP8 without a recipe is MXFP8 on Blackwell and
    delayed scaling on Hopper; DeepSeek-V3's 61 layers take no interleaving at p = 4 or 8, Qwen3
    235B's 94 (+ 2) take v = 3 at p = 8; published recompute modules keep only the priced ones."""
    assert e5.gpus_per_node("GB200-NVL72", 256) == 64 and e5.gpus_per_node("B200", 256) == 8
    assert e5.gpus_per_node("GB200-NVL72", 8) == 8
    by = {r["id"]: r for r in ROWS}
    dsv3, qwen = planner.MODELS["deepseek-v3"], planner.MODELS["qwen3-235b-a22b"]
    assert e5.chunks_for(by["mb-26.04.01-deepseekv3-gb200-256gpu-mxfp8"], dsv3) == 1
    assert e5.chunks_for(by["mb-26.04.01-qwen3-235b-a22b-gb200-256gpu-mxfp8"], qwen) == 3
    assert e5.chunks_for(by["mb-26.04.01-qwen3-235b-a22b-h100-256gpu-fp8"], qwen) == 4
    assert e5.fp8_for(by["mb-26.04.01-qwen3-235b-a22b-h100-256gpu-fp8"], "H100-SXM") == "delayed"
    assert e5.fp8_for(by["mb-26.04.01-deepseekv3-b200-256gpu-mxfp8"], "B200") == "mxfp8"
    assert e5.recompute_modules(by["dgxc-nemo-deepseekv3-gb200-128gpu-bf16"]) == ("core_attn",)
    assert e5.recompute_modules(by["dgxc-nemo-deepseekv3-h100-1024gpu-bf16"]) == ()
    o = e5.options_for(by["mb-26.04.01-qwen3-30b-a3b-h100-16gpu-fp8"], "H100-SXM")
    assert (o.attention, o.compiled, o.ep_overlap, o.moe_capacity) == ("fa3", True, False, None)
    with pytest.raises(KeyError):
        e5.PRESETS["GPT OSS 120B"]


# --- the one evaluation, as recorded ---------------------------------------------------------

GLUE = Path(__file__).resolve().parents[1] / "book" / "glue"
sys.path.insert(0, str(GLUE))
import experiment5_tables as tables  # noqa: E402 (book/glue joins sys.path above)

APPENDIX = Path(__file__).resolve().parents[1] / "book" / "three_d_appendix.md"


def test_the_record_is_the_frozen_model_scored_beside_the_baseline():
    """The record holds every kept row once, evaluated on the frozen model (the planner changed
    after the freeze ended, so the record is read, never recomputed), each error its predicted
    over its measured step, and its counts are baseline.score of its rows with the MFUs fitted
    on experiment 3's rows, none of experiment 5's."""
    s = e5.as_evaluated()
    assert s["freeze"] == "62885ed" and [e["id"] for e in s["rows"]] == [r["id"] for r in KEPT]
    by = {r["id"]: r for r in KEPT}
    for e in s["rows"]:
        assert e["measured_s"] == pytest.approx(e5.measured_seconds(by[e["id"]]), rel=1e-12)
        assert e["error"] == pytest.approx(100 * (e["predicted_s"] / e["measured_s"] - 1))
    cal = e5.calibration()
    assert not {e["id"] for e in cal} & {r["id"] for r in ROWS}
    again = baseline.score(s["rows"], baseline.fit(cal), 15.0)
    for k in ("n", "within", "layouts", "layouts_within", "baseline_within"):
        assert again[k] == s[k], k
    assert (s["n"], s["within"], s["layouts"], s["layouts_within"]) == (14, 5, 11, 2)
    assert s["baseline_within"] == 0 and all(e["baseline_error"] < 0 for e in s["rows"])


def test_the_appendix_prints_experiment_5_as_evaluated():
    """book/three_d_appendix.md: the glue's table and score, the protocol's commits, the rows read
    and left out, and every figure of its account of the errors, from the record."""
    s = e5.as_evaluated()
    text = APPENDIX.read_text()
    flat = " ".join(text.split())
    assert tables.experiment_5_table(s) in text
    assert tables.experiment_5_score(s) in flat
    assert "(freeze commit `62885ed`)" in flat and "(commit `fc4a405`)" in flat
    reasons = Counter(r["excluded_because"] for r in ROWS if not r["kept"])
    no_gpu = sum(
        n for k, n in reasons.items() if k.startswith("no planner preset for G") or "B300" in k
    )
    no_model = sum(n for k, n in reasons.items() if k.startswith("no planner preset for the model"))
    assert (len(ROWS), no_gpu, no_model, len(KEPT)) == (55, 24, 13, 14)
    assert (
        "Read: 55 rows" in flat
        and "no preset (24), models without a preset (13), NVFP4 (3)" in flat
    )
    err = [e["error"] for e in s["rows"]]
    base = [e["baseline_error"] for e in s["rows"]]

    def pct(x):
        return f"{x:+.1f} %".replace("-", "−")

    assert f"from {pct(min(err))} to {pct(max(err))}" in flat
    assert f"({pct(max(base))} to {pct(min(base))})" in flat
    m = {e["id"]: e for e in s["rows"]}
    old, new = (
        m[f"mb-{v}-deepseekv3-gb200-256gpu-mxfp8"]["measured_s"] for v in ("26.04.01", "26.08")
    )
    assert f"took {old:.2f} s in 26.04.01 and {new:.2f} s in 26.08" in flat
    q_old, q_new = (
        m[f"mb-{v}-qwen3-30b-a3b-gb200-8gpu-mxfp8"]["measured_s"] for v in ("26.04.01", "26.08")
    )
    assert f"{q_old:.2f} s and {q_new:.2f} s" in flat
    worst = m["dgxc-nemo-deepseekv3-gb200-128gpu-bf16"]
    assert 2.9 < worst["measured_s"] / worst["predicted_s"] < 3.1  # "at a third"
    assert m["mb-26.04.01-deepseekv3-b200-256gpu-mxfp8"]["error"] == max(err)
