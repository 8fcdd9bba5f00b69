"""The planner on modern published rows (minipar.cost.validation.modern, the rows of
measurements/published_modern.json), split before the model was changed: three calibration
rows (torchtitan's Llama 3.1 8B on 8 GPUs, December 2024) set three constants, each by one fit
(minipar.cost.validation.modern_fit) that the presets must equal; every other row is a
validation row, evaluated only after the model was frozen, or says why it is not priced."""

import sys
from pathlib import Path

import pytest

from minipar.cost.kernels import compute as C
from minipar.cost.kernels import hardware as H
from minipar.cost.planner import three_d as planner
from minipar.cost.validation import modern as mv
from minipar.cost.validation import modern_fit

GLUE = Path(__file__).resolve().parents[1] / "book" / "glue"
sys.path.insert(0, str(GLUE))
import validation_tables as tables  # noqa: E402 (book/glue joins sys.path above: the book's tables)

ROWS = mv.load()["rows"]
REASONS = {
    "precision not published",
    *mv.EXPERIMENT_2.values(),
    "no preset for this shape (MoE, or an architecture the page does not give)",
    "layout (TP, PP, DP) not published",
}


def test_the_presets_are_the_fit_on_the_calibration_rows():
    assert modern_fit.fit() == {
        "POWER_500W": H.POWER_500W,
        "COMPILED_TRAFFIC": C.COMPILED_TRAFFIC,
        "FP8_GEMM_EFFICIENCY": C.FP8_GEMM_EFFICIENCY,
    }
    g, sxm = H.GPUS["H100-HBM2e-500W"], H.GPUS["H100-SXM"]
    assert g.peak_flops["bf16"] == pytest.approx(H.POWER_500W * sxm.peak_flops["bf16"])
    assert g.peak_flops["fp8"] == pytest.approx(H.POWER_500W * sxm.peak_flops["fp8"])


def test_calibration_rows_are_one_source_and_fitted():
    """Three rows of one torchtitan table, one constant each; each within 1 % after its fit
    (the rounding of the constants to two decimals)."""
    cal = [r for r in ROWS if mv.role(r) == "calibration"]
    assert sorted(r["id"] for r in cal) == sorted(mv.CALIBRATION)
    assert {r["source"] for r in cal} == {cal[0]["source"]}
    for r in cal:
        assert abs(mv.evaluate_row(r)["error"]) < 1.0, r["id"]


def test_every_row_is_priced_or_says_why_not():
    s = mv.summary()
    assert s["n"] + len(s["calibration"]) + len(s["not_evaluated"]) == len(ROWS) == 80
    assert len(s["calibration"]) == 3
    assert set(s["not_evaluated"].values()) <= REASONS, s["not_evaluated"]
    assert s["n"] >= 12


def test_mapping_follows_the_stack():
    """torchtitan: SDPA (flash), torchao tensorwise (current) scaling, compiled only when the
    row says so; NVIDIA: Transformer Engine (fa3, delayed unless fp8-cs, fused kernels)."""
    by_id = {r["id"]: r for r in ROWS}
    o = mv.options_for(by_id["tt2412-1-8b-8gpu-fsdp"])
    assert (o.attention, o.fp8, o.compiled) == ("flash", None, False)
    o = mv.options_for(by_id["tt2412-1-8b-8gpu-fsdp-torchcompile-float8"])
    assert (o.attention, o.fp8, o.compiled) == ("flash", "current", True)
    o = mv.options_for(by_id["nemo2407-llama2-7b-h100-8gpu"])
    assert (o.attention, o.fp8, o.compiled) == ("fa3", "delayed", True)
    assert mv.options_for(by_id["mb-25.11-llama3-8b-h100-8gpu"]).fp8 == "current"
    assert mv.gpu_for(by_id["tt2412-1-8b-8gpu-fsdp"]) == "H100-HBM2e-500W"
    assert mv.gpu_for(by_id["nemo2407-llama2-7b-h100-8gpu"]) == "H100-SXM"


def test_experiment_2_rows_and_their_mapping():
    """The 15 rows experiment 1 could not price (async TP, FP8 rowwise) are experiment 2's:
    async TP as tp_overlap, rowwise scaling as fp8 "rowwise"; every row of experiment 1 keeps
    tp_overlap off and its scaling, so experiment 1's results cannot move."""
    two = [r for r in ROWS if mv.experiment(r) == 2]
    assert len(two) == 15
    assert all(mv.why_not(r) in mv.EXPERIMENT_2.values() for r in two)
    assert all(mv.why_not(r, 2) is None for r in two)
    assert {r["id"] for r in two if r.get("async_tp")} >= {
        "tt2412-t5-405b-1f1b",
        "tt2412-t6-405b-fsdp1-cp8",
        "tt2506-8b-bf16-asynctp",
    }
    by_id = {r["id"]: r for r in ROWS}
    o = mv.options_for(by_id["tt2506-70b-fp8-rowwise-asynctp"])
    assert (o.fp8, o.tp_overlap, o.compiled) == ("rowwise", True, True)
    o = mv.options_for(by_id["tt2506-8b-fp8-rowwise-tp"])
    assert (o.fp8, o.tp_overlap) == ("rowwise", False)
    o = mv.options_for(by_id["tt2506-8b-bf16-asynctp"])
    assert (o.fp8, o.tp_overlap) == (None, True)
    one = [r for r in ROWS if mv.experiment(r) == 1]
    assert not any(mv.options_for(r).tp_overlap for r in one if r.get("precision"))
    assert not any(mv.options_for(r).fp8 == "rowwise" for r in one if r.get("precision"))
    assert all(mv.why_not(r, 2) == "experiment 1's row" for r in one if r.get("precision"))


# --- after the freeze: the validation rows, recorded (reported, not tuned on) -----------------

FREEZE_COMMIT = "b045cfd"
APPENDIX = Path(__file__).resolve().parents[1] / "book" / "three_d_appendix.md"


def test_the_validation_rows_as_evaluated_after_the_freeze():
    """What the frozen model scored on the 33 validation rows, recorded as evaluated once after
    the freeze commit: 17 within ±15 % (the target was 80 %), the constant-MFU baseline 5. A
    change to the model or the mapping changes these and must be re-frozen and re-reported: the
    record (``mv.as_evaluated``) keeps them."""
    s = mv.as_evaluated(1)
    assert (s["n"], s["within"], s["baseline_within"]) == (33, 17, 5)
    text = APPENDIX.read_text()
    assert tables.experiment_1_table(s) in text
    assert f"freeze commit `{FREEZE_COMMIT}`" in text
    assert f"{s['within']} of the {s['n']} validation rows" in text
    assert f"the constant-MFU baseline {s['baseline_within']}" in text
    tt = [r for r in s["rows"] if r["id"].startswith("tt")]
    assert all(abs(r["error"]) <= 13 for r in tt if "cp4" not in r["id"] and "cp8" not in r["id"])
    assert all(r["error"] < -15 for r in tt if "cp4" in r["id"] or "cp8" in r["id"])
    tp = {r["id"]: r for r in ROWS if r["tp"] and r["tp"] > 1}
    nv = [r for r in s["rows"] if not r["id"].startswith("tt")]
    slow = [r["error"] for r in nv if r["id"] in tp and r["error"] > 15]
    assert (len(slow), len([r for r in nv if r["id"] in tp])) == (14, 16)
    assert (round(min(slow)), round(max(slow))) == (20, 50)
    assert all(abs(r["error"]) <= 15 for r in nv if r["id"] not in tp)
    assert "14 of 16 are too slow by +20 % to\n+50 %" in text


def test_the_appendix_quotes_the_constants_as_set():
    text = " ".join(APPENDIX.read_text().split())
    assert f"over the SXM's ({H.POWER_500W:.2f})" in text
    assert f"still moves ({C.COMPILED_TRAFFIC:.2f})" in text
    assert f"FP8 peak × η ({C.FP8_GEMM_EFFICIENCY:.2f})" in text
    assert f"FlashAttention-3's rate ({C.FA3_EFFICIENCY:.2f} of the bf16 peak)" in text
    nv, ib = (H.LINKS[k].bus_efficiency for k in ("nvlink4-h100", "ib-ndr400"))
    assert f"({nv:.2f} of NVLink 4, {ib:.2f} of NDR 400)" in text


# --- experiment 2: after the second freeze, the 15 rows with async TP or FP8 rowwise ----------

FREEZE_2_COMMIT = "5364c6d"
BY_ID = {r["id"]: r for r in ROWS}


def test_experiment_2_as_evaluated_after_the_second_freeze():
    """What the model of the second freeze scored on experiment 2's 15 rows, evaluated once
    after that freeze commit: 6 within ±15 % (the constant-MFU baseline 2). Too fast: every
    rowwise row (the GEMM rate assumed equal to tensorwise), the 8B async-TP rows (the overlap
    credited beyond what the rows gain) and CP at 2 to 8 ranks. Recorded, not tuned on."""
    s = mv.as_evaluated(2)
    assert (s["n"], s["within"], s["baseline_within"]) == (15, 6, 2)
    assert not s["calibration"] and all(r["fits"] for r in s["rows"])
    text = APPENDIX.read_text()
    flat = " ".join(text.split())
    assert tables.experiment_2_table(s) in text
    assert f"freeze commit `{FREEZE_2_COMMIT}`" in flat
    assert f"{s['within']} of the {s['n']} rows of experiment 2" in flat
    assert f"the constant-MFU baseline {s['baseline_within']}." in flat
    readme = " ".join((Path(mv.DATA).parent / "README.md").read_text().split())
    assert f"{s['within']} of the {s['n']} rows within ±15 %, the constant-MFU baseline" in readme
    err = {r["id"]: r["error"] for r in s["rows"]}
    rowwise = [e for i, e in err.items() if "rowwise" in i]
    assert len(rowwise) == 4 and all(e < -15 for e in rowwise)
    assert all(e < -15 for i, e in err.items() if i.startswith("tt2506-8b"))
    assert all(err[f"tt2412-t6-405b-fsdp{8 // c}-cp{c}"] < -15 for c in (2, 4, 8))
    within = {i for i, e in err.items() if abs(e) <= 15}
    assert within == {
        "tt2412-t4-70b-asynctp",
        "tt2412-t5-405b-1f1b",
        "tt2412-t5-405b-interleaved-1f1b",
        "tt2412-t6-405b-fsdp8-cp1",
        "tt2506-70b-bf16-asynctp",
        "tt2506-70b-fp8-tensorwise-asynctp",
    }


def test_experiment_2_prose_takes_its_figures_from_the_rows():
    """The appendix's account of the misses: rowwise rows 35 % and 37 % slower than tensorwise
    at the same layout (published), async TP shortening the 8B step by 9 % (published) and by
    21 % in the model."""
    flat = " ".join(APPENDIX.read_text().split())
    m = lambda i: mv.evaluate_row(BY_ID[i])
    slower = [
        m(f"tt2506-{n}-fp8-rowwise-tp")["measured_s"]
        / m(f"tt2506-{n}-fp8-tensorwise-tp")["measured_s"]
        for n in ("70b", "8b")
    ]
    assert [round(100 * (x - 1)) for x in slower] == [35, 37]
    assert "rows take 35 % to 37 % longer than its tensorwise rows" in flat
    plain, over = m("tt2506-8b-bf16-tp"), m("tt2506-8b-bf16-asynctp")
    gain = 1 - over["measured_s"] / plain["measured_s"]
    model_gain = 1 - over["predicted_s"] / plain["predicted_s"]
    assert (round(100 * gain), round(100 * model_gain)) == (9, 21)
    assert "shortens torchtitan's 8B step by 9 %, the model by 21 %" in flat


def test_post_hoc_column_is_apart_and_recorded():
    """NVIDIA's 16 rows with TP, seen in experiment 1, again with tp_overlap: 12 within ±15 %
    (2 in experiment 1), printed as a post-hoc column and counted in neither experiment."""
    s, one = mv.as_evaluated(2), mv.as_evaluated(1)
    p = s["post_hoc"]
    assert (p["n"], p["within"]) == (16, 12)
    assert {r["id"] for r in p["rows"]}.isdisjoint(r["id"] for r in s["rows"])
    assert {r["id"] for r in p["rows"]} <= {r["id"] for r in one["rows"]}
    assert sum(abs(r["error"]) <= 15 for r in p["rows"]) == 2
    assert all(r["post_hoc_s"] < r["predicted_s"] for r in p["rows"])
    text = APPENDIX.read_text()
    assert tables.post_hoc_table(p) in text
    flat = " ".join(text.split())
    assert f"post hoc, not counted: {p['within']} of these {p['n']} rows" in flat
    assert "(2 of them within ±15 % there)" in flat


def test_the_cp_misses_are_set_beside_attentions_share_of_the_flops():
    """The appendix's account of the CP rows: attention's share of the FLOPs of Llama 3.1 8B's
    step (8sh per token and layer with full recomputation, against 8 per dense weight) at each
    row's sequence, and the model's experiment-1 errors there, which jump instead of following
    it."""
    from minipar.cost.model import param_count_llama

    ids = [f"tt2412-t2-8b-fsdp{8 // c}-cp{c}" for c in (1, 2, 4, 8)]
    seqs = [BY_ID[i]["seq_len"] for i in ids]
    assert seqs == [32768, 65536, 131072, 262144]
    m = planner.MODELS["llama3-8b"]  # the rows' preset
    L, h, V = m.layers, m.hidden, m.vocab
    dense = param_count_llama(L, h, V, m.heads, m.kv_heads, m.ffn) - V * h
    share = [round(100 * L * s * h / (dense + L * s * h)) for s in seqs]
    errors = [round(mv.evaluate_row(BY_ID[i])["error"]) for i in ids]
    assert (share, errors) == ([36, 53, 70, 82], [-3, 3, -24, -27])
    flat = " ".join(APPENDIX.read_text().split())
    assert "FLOPs with it: 36, 53, 70 and 82 %" in flat
    assert "in experiment 1 go −3, +3, −24 and −27 %" in flat


def test_the_appendix_says_what_error_to_expect_on_each_h100_preset():
    """The table of each preset's errors per experiment and the figures its prose quotes."""
    rows = {(r["gpu"], r["exp"]): r for r in tables.preset_errors()}
    assert sorted(rows) == [
        ("H100-HBM2e-500W", 1),
        ("H100-HBM2e-500W", 2),
        ("H100-SXM", 1),
        ("H100-SXM", 3),
    ]
    assert [rows[k]["n"] for k in sorted(rows)] == [12, 15, 21, 50]
    assert (rows[("H100-SXM", 3)]["within"], rows[("H100-HBM2e-500W", 1)]["within"]) == (46, 10)
    text = APPENDIX.read_text()
    flat = " ".join(text.split())
    assert tables.preset_error_table() in text
    for key, words in (
        (("H100-SXM", 3), "(experiment 3), have a median error of {}"),
        (
            ("H100-SXM", 1),
            "with every TP collective exposed, {} (14 of its 16 rows with TP too slow)",
        ),
        (("H100-HBM2e-500W", 1), "tensorwise FP8 rows (experiment 1) have {}"),
        (("H100-HBM2e-500W", 2), "which the model prices too fast, {}."),
    ):
        assert words.format(f"{rows[key]['median']:.1f} %") in flat, words
