"""The planner's model against measured runs (minipar.cost.validation.published).

Published A100 runs: one test per row, ±10 % on the step time, with the inputs as run (Table 1's
micro-batch and interleaving from the paper's reproduction script) and at the micro-batch the
planner picks. The A100's two fitted constants (η and the bytes per attention score) come from
every other Table 1 row at the planner's micro-batch (``validation.fit_a100``); the other five
rows, GPT-3, BLOOM, MT-NLG and §5.2 check them. Where the model misses, the test asserts what it
reaches and the evidence for the missing effect. H200: the validation set (h200_step_times.json) predicted from constants set
on the calibration set only (h200_layer_gemm_times.json), one test per row and quantity.
"""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from minipar.cost.kernels import hardware
from minipar.cost.model import flops_per_iteration
from minipar.cost.validation import published as validation

GLUE = Path(__file__).resolve().parents[1] / "book" / "glue"
sys.path.insert(0, str(GLUE))
import validation_tables as tables  # noqa: E402 (book/glue joins sys.path above: the book's tables)

ROWS = {r.name: r for r in validation.published_runs()}  # as run
PLANNER = {r.name: r for r in validation.published_runs("planner")}
OLD = {r.name: r for r in validation.table1_summary("1", interleaved=False)["rows"]}  # b = v = 1
TABLE1 = [r.name for r in validation.RUNS if r.where == "Table 1"]
OTHERS = [r.name for r in validation.RUNS if r.where != "Table 1" and r.name != "MT-NLG 530B"]


def test_table1_inputs_are_the_ones_that_ran():
    """Micro-batch and interleaving from the paper's reproduction script: v = 3, 2, 2, 3 for
    76 B, 145 B, 310 B, 530 B (§5.1: Table 1 ran the interleaved schedule), PyTorch's DDP for
    the p = 1 rows; each layout fits, B = d·b·m with m a multiple of p where interleaved."""
    runs = {r.name: r for r in validation.RUNS}
    assert [runs[n].micro_batch for n in TABLE1] == [16, 16, 16, 8, 4, 2, 2, 1, 1, 1]
    assert [runs[n].chunks for n in TABLE1] == [1, 1, 1, 1, 1, 3, 2, 2, 3, 1]
    assert [runs[n].dp_overlap for n in TABLE1] == [True] * 4 + [False] * 6
    for n in TABLE1:
        r, row = runs[n], ROWS[n]
        t, p, d = r.layout
        assert row.fits and t * p * d == r.gpus
        m = r.batch // (d * r.micro_batch)
        assert m * d * r.micro_batch == r.batch and (r.chunks == 1 or m % p == 0)
        assert r.model.layers % (p * r.chunks) == 0
    assert runs["BLOOM 176B"].published_tflops == 156
    assert (runs["MT-NLG 530B"].published_step, runs["MT-NLG 530B"].where) == (60.1, "§2.4")


@pytest.mark.parametrize("name", TABLE1)
def test_table1_row_at_the_planners_micro_batch(name):
    """At the micro-batch the planner picks for the published layout and interleaving (as
    ``minipar plan`` would), each Table 1 row is within ±10 % of its measured step; five of the
    rows set the A100's two constants (in-sample), the other five are held out."""
    r = PLANNER[name]
    assert r.fits and r.mode == "planner"
    assert abs(r.error) <= 10, f"{name}: {r.error:+.1f} % at b = {r.micro_batch}"
    # the published TFLOP/s and step time are the same measurement (Eq. 3 FLOPs)
    run = next(x for x in validation.RUNS if x.name == name)
    flops = flops_per_iteration(
        run.batch, run.model.seq, run.model.layers, run.model.hidden, run.model.vocab, "full"
    )
    assert flops / (r.gpus * r.published_step) / 1e12 == pytest.approx(r.published_tflops)


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_a100_constants_are_the_fit_on_the_calibration_half():
    """The preset's η and bytes per score are exactly :func:`validation.fit_a100` on the five
    calibration rows (1.7 B, 7.5 B, 39.1 B, 145.6 B, 529.6 B), whose summed log error is then
    near 0; the five held-out rows are within ±10 % at the planner's micro-batch and the
    ten rows' throughput order follows the published one (Spearman ≥ 0.6)."""
    import math

    g, fit = hardware.GPUS["A100-80GB"], validation.fit_a100()
    assert (g.gemm_efficiency, g.attention_score_bytes) == (fit["eta"], fit["score_bytes"])
    assert g.gemm_rule == "additive"
    x = validation.split_check("planner")
    assert (x["eta"], x["score_bytes"]) == (fit["eta"], fit["score_bytes"])
    names = {r.name for r in x["held_out"]}
    assert len(names) == 5 and not names & set(validation.CALIBRATION_ROWS)
    logs = [math.log(r.predicted_step / r.published_step) for r in x["calibration"]]
    assert abs(sum(logs)) < 0.05 and fit["loss"] == pytest.approx(sum(v * v for v in logs))
    assert x["held_out_within10"] == 5 and x["spearman"] >= 0.6
    # the fit is a minimum: each neighbour on its grid does worse
    for de, db in ((0.005, 0), (-0.005, 0), (0, 1), (0, -1)):
        assert validation.calibration_loss(fit["eta"] + de, fit["score_bytes"] + db) > fit["loss"]
    with pytest.raises(ValueError, match=r"rows \(PTD-P 2B\) must name runs of RUNS"):
        validation.calibration_loss(0.7, 30, rows=("PTD-P 2B",))
    with pytest.raises(ValueError, match=r"rows \(PTD-P 2B\) must name runs of RUNS"):
        validation.settle_eta(rows=("PTD-P 2B",))
    with pytest.raises(ValueError, match=r"fit \('all'\) must be one of both, eta"):
        validation.split_check(fit="all")


def test_table1_throughput_order_at_the_planners_micro_batch():
    s = validation.table1_summary("planner")
    assert s["spearman"] >= 0.6 and s["within10"] == 10


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_the_missing_effect_was_the_score_traffic_not_only_the_tile_rule():
    """Negative controls, each settled the same honest way on the calibration half. The 2021
    model (tile/wave GEMM rule, Megatron's kernel bytes, 20 per score) with η alone fitted
    orders Table 1 wrongly (ρ < 0.6) and misses a held-out row: the evidence that a level
    constant cannot fix a shape error. Fitting the bytes per score as well repairs the order
    under either GEMM rule (the score term is the one that weighs on small models), and the
    tile rule is replaced anyway because the H200's GEMMs contradict it: where it leaves a
    GEMM a fraction q < 0.8 of the rate, the measured ones reach clearly more."""
    old = validation.split_check("planner", "waves", 20, fit="eta")
    assert old["spearman"] < 0.6 and old["held_out_within10"] < 5
    waves_both = validation.split_check("planner", "waves")
    assert waves_both["spearman"] >= 0.6 and waves_both["score_bytes"] > 20
    ev = validation.wave_quantisation_evidence()
    assert ev["n"] >= 5
    assert ev["measured"] > ev["q"] + 0.1, ev
    # under the tile rule a larger micro-batch is >10 % faster per sequence for the rows that
    # ran b >= 8; under the measured rule the gain is smaller
    for name in TABLE1[:4]:
        run = next(x for x in validation.RUNS if x.name == name)
        w = lambda b, rule, run=run: validation.predict(run, b, gemm_rule=rule).predicted_step
        assert w("as run", "waves") < 0.9 * w("1", "waves")
        assert w("as run", "waves") / w("1", "waves") < w("as run", None) / w("1", None)


def test_table1_order_at_b_1_v_1():
    """At b = v = 1 (the inputs the preset was once settled on, no longer used for any
    constant): Spearman ≥ 0.8 and small models slower than the large, as measured."""
    rows = [OLD[n] for n in TABLE1]
    assert (
        validation.spearman([r.predicted_tflops for r in rows], [r.published_tflops for r in rows])
        >= 0.8
    )
    small, large = rows[:4], rows[-2:]
    assert max(r.predicted_tflops for r in small) < min(r.predicted_tflops for r in large)


@pytest.mark.parametrize("name", OTHERS)
def test_other_published_run_within_10_percent(name):
    r = ROWS[name]
    assert r.fits, (
        f"{name}: the published layout must fit ({r.config.bytes_per_gpu / 2**30:.1f} GiB)"
    )
    assert abs(r.error) <= 10, (
        f"{name}: predicted {r.predicted_step:.2f} s vs {r.published_step:.2f} s"
    )


def test_mt_nlg_60s_is_10_to_25_percent_slower_and_the_missing_effect_is_the_implementation():
    """MT-NLG measured 60.1 s per iteration (126 TFLOP/s per GPU); the model says ~52 s (−14 %).

    Missing effect: the software. The same model, t = 8, p = 35 and A100 cluster ran at 163
    TFLOP/s per GPU in PTD-P Table 1 (Megatron-LM's own pipeline), which this model reproduces
    within 10 %; MT-NLG ran DeepSpeed's pipeline engine. A model with one set of constants per
    cluster cannot match both without a per-implementation term."""
    r, same = ROWS["MT-NLG 530B"], ROWS["PTD-P 529.6B"]
    assert r.fits and -25 <= r.error <= -10
    assert abs(same.error) <= 10
    assert r.published_tflops / same.published_tflops == pytest.approx(0.77, abs=0.01)


def test_negative_controls_fail_the_tolerance():
    """(1) A constant 50 % of peak (156 TFLOP/s) misses rows by more than 10 %. (2) Without the
    memory-bound kernels (infinite HBM bandwidth) the model predicts the small models too fast
    and loses the order even where η was settled (b = v = 1)."""
    table1 = [ROWS[n] for n in TABLE1]
    const = [100 * (r.published_tflops / 156 - 1) for r in table1]  # step error of 156 TF
    assert max(abs(e) for e in const) > 10
    gpu = hardware.GPUS["A100-80GB"]
    try:
        hardware.GPUS["A100-80GB"] = replace(gpu, hbm_bandwidth=1e30)
        rows = [validation.predict(replace(r, chunks=1), "1") for r in validation.RUNS[:10]]
    finally:
        hardware.GPUS["A100-80GB"] = gpu
    assert max(abs(r.error) for r in rows) > 10
    assert (
        validation.spearman([r.predicted_tflops for r in rows], [r.published_tflops for r in rows])
        < 0.8
    )


def test_micro_batch_choice_is_checked():
    run = validation.RUNS[0]
    assert validation.predict(run, 4).micro_batch == 4
    with pytest.raises(
        ValueError, match=r"micro_batch \('big'\) must be one of as run, 1, planner"
    ):
        validation.predict(run, "big")
    assert validation.planner_micro_batch(run) <= validation.PLANNER_MAX_MICRO_BATCH


def test_zero3_table2_transcription_matches_the_papers_text():
    """§5.2's text states PTD-P ahead of ZeRO-3 by 6 % (175B) and 24 % (530B) at the smallest
    GPU count and by 70 % once the count doubles: Table 2's TFLOP/s as transcribed give that."""
    got = {m: [x[0][2] / x[1][3] for x in v["rows"]] for m, v in validation.ZERO3_TABLE2.items()}
    assert got["gpt3-175b"][0] == pytest.approx(1.06, abs=0.01)
    assert got["mt-nlg-530b"][0] == pytest.approx(1.24, abs=0.01)
    for m in got:
        assert got[m][1] == pytest.approx(validation.ZERO3_PUBLISHED_DOUBLED, abs=0.015)


@pytest.mark.parametrize("model", list(validation.ZERO3_TABLE2))
def test_zero3_behind_ptdp_once_the_gpu_count_doubles(model):
    """Narayanan et al. 2021 §5.2: PTD-P ~1.7x ZeRO-3's TFLOP/s per GPU once the GPU count
    doubles at a fixed batch (175B and 530B). With ZeRO-3's collectives across nodes as a flat
    ring (each GPU's share through its own NIC) and re-gathered for the recomputed forward, the
    model gets the direction, and the gap grows with the GPU count as measured. The ratio's
    error splits into its two sides: PTD-P's step within ±10 % of its measurement at every count,
    ZeRO-3's within ±20 % at the doubled and largest counts (too fast: the model drives each
    NIC at its full 25 GB/s, the runs achieved 0.6-1.0 of it,
    test_zero3_evidence_achieved_bandwidth_is_one_nic_per_gpu), so the ratio is within ±20 %
    (175B doubled: 1.43 against 1.69). Each layout is the one that ran."""
    rows = validation.zero3_comparison(model)
    t, p = validation.ZERO3_TABLE2[model]["ptdp_layout"]
    for x, ((n_p, _, _), (n_z, _, mb, _)) in zip(rows, validation.ZERO3_TABLE2[model]["rows"]):
        assert (x["ptdp"].tp, x["ptdp"].pp, x["ptdp"].micro_batch, x["ptdp"].zero) == (t, p, 1, 0)
        assert (
            x["zero3"].tp,
            x["zero3"].pp,
            x["zero3"].dp,
            x["zero3"].micro_batch,
            x["zero3"].zero,
        ) == (1, 1, n_z, mb, 3)
        assert x["ptdp"].fits and x["ptdp"].dp * t * p == n_p
        assert x["zero3"].dp_link == "ib-hdr200"
    doubled = rows[1]
    assert doubled["ratio"] > 1 and doubled["zero3"].fits
    e = validation.zero3_missing_effect(model)
    assert max(abs(x) for x in e["ptdp_error"]) < 10
    assert max(abs(x) for x in e["zero3_error"][1:]) < 20
    assert doubled["ratio"] == pytest.approx(validation.ZERO3_PUBLISHED_DOUBLED, rel=0.2)
    assert rows[2]["ratio"] > rows[1]["ratio"] > rows[0]["ratio"]
    assert rows[2]["ratio"] == pytest.approx(rows[2]["published_ratio"], rel=0.2)
    # ZeRO-3's step hardly moves from the doubled to the largest count, as measured
    assert rows[2]["zero3"].step_seconds == pytest.approx(rows[1]["zero3"].step_seconds, rel=0.05)


@pytest.mark.parametrize("model", list(validation.ZERO3_TABLE2))
def test_zero3_negative_control_hierarchical_collectives_go_the_wrong_way(model):
    """With the NCCL-ideal hierarchical algorithm (1/8 of the bytes per NIC, the model before)
    the collectives hide under one layer's compute and ZeRO-3 comes out ahead at every count,
    the wrong direction; without the re-gather for the recomputed forward the doubled-count
    ratio is lower than with it."""
    hier = validation.zero3_comparison(model, zero3_collectives="hierarchical")
    assert all(x["ratio"] < 1 for x in hier)
    assert all(x["zero3"].seconds("zero3_exposed") < 0.05 * x["zero3"].step_seconds for x in hier)
    flat = validation.zero3_comparison(model)
    assert all(f["ratio"] > 1.5 * h["ratio"] for f, h in zip(flat[1:], hier[1:]))


def test_zero3_evidence_achieved_bandwidth_is_one_nic_per_gpu():
    """The measurement behind the flat ring: ZeRO-3's measured step moves 3 all-gathers + 1
    reduce-scatter of the 16-bit weights (one micro-batch per rank) at 16-24 GB/s per GPU,
    0.6-1.0 of one 25 GB/s HDR NIC, 5-8x what the hierarchical algorithm's bytes per NIC
    (1/8 of them) would need at that step time."""
    from minipar.cost.planner import three_d

    nic = three_d.cluster(8, 8, "A100-80GB").inter.bandwidth
    for model in validation.ZERO3_TABLE2:
        e = validation.zero3_missing_effect(model)
        psi = three_d.MODELS[model].params
        for n, step in zip(e["gpus"], e["zero3_step_published"]):
            rate = 4 * 2 * psi * (n - 1) / n / step
            assert 0.6 * nic < rate < 1.0 * nic, (model, n, rate / 1e9)
            assert rate / 8 < 0.2 * nic


def test_zero3_what_is_still_missing_at_the_smallest_count():
    """At the smallest count the model misses: (175B, 384 GPUs, 4 sequences per GPU) one layer's
    compute can hide the flat ring's collectives and the model hides them all, so it puts
    ZeRO-3 ahead where the measured step (82 s) lies between the perfect-overlap prediction and
    the no-overlap one; (530B, 640 GPUs) its memory rejects the ZeRO-3 layout that ran (two whole
    gathered layers and a layer gradient; DeepSpeed gathers per sub-module). The chapter's
    clause is written from these numbers, in the book's glue (tests/test_three_d_chapter.py)."""
    e175 = validation.zero3_missing_effect("gpt3-175b")
    e530 = validation.zero3_missing_effect("mt-nlg-530b")
    assert e175["ratios"][0] < 1 < e175["published"][0]
    assert (
        e175["zero3_step"][0] < e175["zero3_step_published"][0] < e175["zero3_step_no_overlap"][0]
    )
    assert e175["zero3_error"][0] > 30  # the model's ZeRO-3 too fast there
    assert not e530["zero3_fits"][0] and e530["zero3_gib"][0] > e530["limit_gib"]
    assert all(e530["zero3_fits"][1:])
    # PTD-P's side is within 10 % at every count: the misses are ZeRO-3's
    assert max(abs(x) for e in (e175, e530) for x in e["ptdp_error"]) < 10
    assert e530["limit_gib"] == pytest.approx(0.9 * e530["gpu_gib"])  # 80 GiB less 10 %
    # with Megatron's fp32 reduction instead of DeepSpeed's 16-bit one the direction holds
    fp32 = validation.zero3_comparison("gpt3-175b", zero3_grad_reduce_bytes=4)
    assert fp32[1]["ratio"] > e175["ratios"][1] > 1
    with pytest.raises(ValueError, match=r"model \('llama2-70b'\) must be one of"):
        validation.zero3_comparison("llama2-70b")


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_table_text_has_every_row():
    text = tables.table()
    assert len(text.splitlines()) == 1 + len(validation.RUNS)
    assert "MT-NLG 530B" in text and "BLOOM 176B" in text
    modes = tables.table_modes()
    assert len(modes.splitlines()) == 1 + len(validation.RUNS) + 7
    assert "Spearman" not in modes  # the run page prints it: the reader's words, not a statistic's
    assert len(tables.h200_table().splitlines()) == 1 + len(validation.h200_runs())


@pytest.mark.slow
def test_the_books_glue_prints_every_table():
    """`python book/glue/validation_tables.py`, as the appendix names it: the published runs,
    the H200 set, the three experiments (experiment 3's score) and the presets' errors last."""
    import subprocess

    out = subprocess.run(
        [sys.executable, str(GLUE / "validation_tables.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    assert "PTD-P 1.7B" in out and "GPT 350M" in out and "err(planner)" in out
    for title in ("Experiment 1:", "Experiment 2:", "Experiment 3:"):
        assert title in out
    assert tables.experiment_3_score() + "." in out
    assert out.strip().endswith(tables.preset_error_table())


# --- one H200: the validation set, constants from the calibration set only -----------------

H200 = validation.h200_runs()
H200_IDS = [f"{r.name} {r.attention}" for r in H200]
# What the planner misses, each with its measured numbers, marked strict (a fix that makes a row
# pass fails until its mark is removed; nothing passes or fails silently). Empty since the
# planner took the attention kernel and the precision recipe as inputs.
MISSING_TODAY: dict[tuple[str, str], str] = {}


def _h200_case(quantity):
    return [
        pytest.param(
            r, id=i, marks=pytest.mark.xfail(strict=True, reason=MISSING_TODAY[(i, quantity)])
        )
        if (i, quantity) in MISSING_TODAY
        else pytest.param(r, id=i)
        for r, i in zip(H200, H200_IDS)
    ]


def test_h200_constants_come_from_the_calibration_set_only():
    """The preset's η and HBM rate are the calibration file's 8192³ matmul (775 of 989 TFLOP/s)
    and 2 GiB copy (4.22 TB/s), to their rounding; the step-time file sets nothing. Negative
    control: the datasheet's 4.8 TB/s is not the measured rate."""
    c = validation.h200_calibration_check()
    assert c["eta"] == pytest.approx(c["eta_measured"], rel=0.005)
    assert c["hbm"] == pytest.approx(c["hbm_measured"], rel=0.001)
    datasheet = replace(validation.h200_gpu(), hbm_bandwidth=4.8e12)
    assert validation.h200_calibration_check(datasheet)["hbm"] != pytest.approx(
        c["hbm_measured"], rel=0.05
    )
    assert len(H200) == 5


@pytest.mark.parametrize("row", _h200_case("time"))
def test_h200_step_time(row):
    """Every row that ran is admitted, and its step time is within ±15 % (SDPA) or ±25 %
    (unfused attention) of the measured one."""
    assert row.fits, (
        f"{row.name}: refused ({row.predicted_gib:.0f} GiB), ran at {row.measured_gib:.0f}"
    )
    tol, _ = validation.h200_targets(row)
    assert abs(row.time_error) <= tol, f"{row.name}: {row.time_error:+.1f} %"


@pytest.mark.parametrize("row", _h200_case("memory"))
def test_h200_peak_memory(row):
    _, tol = validation.h200_targets(row)
    assert abs(row.memory_error) <= tol, (
        f"{row.name}: {row.predicted_gib:.1f} GiB vs {row.measured_gib:.1f} ({row.memory_error:+.0f} %)"
    )


def test_h200_negative_control_unfused_attention_on_the_sdpa_rows():
    """Pricing PyTorch's fused attention as the unfused kernels (s² scores through HBM and kept
    for the backward) misses the SDPA rows: their memory by far more than 15 %."""
    forced = validation.h200_runs(attention="unfused")
    sdpa = [r for r in forced if r.attention == "sdpa"]
    assert all(r.memory_error > 15 or not r.fits for r in sdpa)


def test_h200_summary_counts():
    s = validation.h200_summary(H200)
    assert s["n"] == 5 and s["time_ok"] + len(s["refused"]) <= s["n"]
    assert s["refused"] == [r.name for r in H200 if not r.fits]


def test_h200_negative_control_the_2021_recipe_misses_the_memory():
    """The A100 reproductions' recipe (16 bytes per parameter, no fp32 logits) on the H200 rows,
    which trained with Megatron's 18-byte recipe and an fp32 loss: the 350M run's memory misses
    by more than 15 % and fewer rows meet their target."""
    old = validation.h200_runs(precision="2021")
    assert old[0].name == "GPT 350M" and old[0].memory_error < -15
    ok = lambda rows: sum(abs(r.memory_error) <= validation.h200_targets(r)[1] for r in rows)
    assert ok(old) < ok(H200)


def test_h200_memory_never_over_and_unfused_attention_overshoots():
    """No H200 row's memory is predicted above its target, while forcing the unfused kernel on
    the fused rows overshoots each of them (the negative control)."""
    for r in H200:
        assert r.memory_error <= validation.h200_targets(r)[1], (r.name, r.memory_error)
    forced = {r.name: r for r in validation.h200_runs(attention="unfused")}
    assert all(
        forced[r.name].predicted_gib > r.predicted_gib for r in H200 if r.attention == "sdpa"
    )


def test_the_2021_runs_pass_the_2021_inputs():
    """Attention kernel and precision recipe are explicit for the published A100 runs (unfused,
    "2021"): today's inputs (flash attention, the 18-byte recipe) predict them differently, so
    leaving them to a default would silently change the reproduction."""
    today = {r.name: r for r in validation.published_runs(attention="flash", precision="megatron")}
    assert validation.ERA_2021 == {"attention": "unfused", "precision": "2021"}
    assert all(ROWS[n].config.step_seconds != today[n].config.step_seconds for n in TABLE1)
