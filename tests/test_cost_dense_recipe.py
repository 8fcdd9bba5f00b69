"""FP8 as it runs, TP overlap at its cost, today's defaults and memory that never refuses a run
that ran: the planner's terms and experiment 3 (the calibration set of these changes)."""

import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from explorer_parity_support import js_call, mismatch, node_available

from minipar.cli import main
from minipar.cost.kernels import compute as C
from minipar.cost.planner import communication_terms as CT
from minipar.cost.planner import compute_terms as KT
from minipar.cost.planner import three_d as P
from minipar.cost.planner.layout import MAIN_GRADS, RECIPES
from minipar.cost.planner.shapes import layer_dense_gemms
from minipar.cost.validation import experiment3 as e3
from minipar.cost.validation import published
from minipar.widgets.three_d import cluster_config

H100 = P.cluster(64, 8, "H100-SXM")
L70 = P.MODELS["llama3-70b"]


def _opt(**kw):
    return P.plan_options(L70, H100, P.Options(**kw))


def test_fp8_weight_casts_are_charged_once_per_step():
    """term_fp8_casts over a step: the inputs' and gradients' casts every micro-batch, the
    weights' once (Transformer Engine's is_first_microbatch). Doubling m doubles the first and
    leaves the second: fails if the weights are cast every micro-batch again."""
    opt = _opt(fp8="delayed")
    per_step = []
    for B in (64, 128):
        lay = P.Layout(B, 8, 1, 8, 1, sp=True, recompute="none")
        c = P.evaluate(L70, H100, lay, opt)
        cast = c.breakdown.values["fp8_casts"] * lay.microbatches  # no bubble: p = 1
        weights = KT.weight_casts_per_microbatch(L70, H100, lay, opt) * lay.microbatches
        per_step.append((cast, weights * L70.layers))
    (c1, w1), (c2, w2) = per_step
    linear = sum(N * K for _, N, K in layer_dense_gemms(L70, lay))
    once = L70.layers * C.fp8_weight_cast_bytes("delayed") * linear / H100.gpu.hbm_bandwidth
    assert w1 == pytest.approx(once) and w2 == pytest.approx(once)
    assert c2 - w2 == pytest.approx(2 * (c1 - w1))  # the activations' casts scale with m
    assert c2 < 2 * c1 - 0.5 * once  # the weights' do not


def test_rowwise_gemms_run_at_their_own_rate():
    """A compute-bound FP8 GEMM's FLOP time under rowwise scaling is the tensorwise one over
    FP8_ROWWISE_GEMM_RATIO; fails if rowwise is priced at the tensorwise rate."""
    g = H100.gpu
    M, N, K = 16384, 8192, 8192
    moved = (M * K + K * N + M * N) / g.hbm_bandwidth + g.gemm_latency_s  # additive rule
    row = C.gpu_gemm_seconds(g, M, N, K, 1, "rowwise") - moved
    cur = C.gpu_gemm_seconds(g, M, N, K, 1, "current") - moved
    assert row / cur == pytest.approx(1 / C.FP8_ROWWISE_GEMM_RATIO)
    assert C.gpu_gemm_seconds(g, M, N, K, 1, True) == C.gpu_gemm_seconds(g, M, N, K, 1, "delayed")
    lay = P.Layout(64, 8, 1, 8, 1, sp=True)
    assert KT.fp8_gemm_delta(L70, H100, lay, _opt(fp8="rowwise")) > KT.fp8_gemm_delta(
        L70, H100, lay, _opt(fp8="current")
    )


def test_tp_overlap_is_charged_what_it_costs_the_gemms():
    """term_tp with overlap: the exposed chunks plus tp_overlap_cost (GEMMs in pieces, SMs
    reserved for the reduce-scatters). A GEMM in one piece on every SM costs nothing more; in
    pieces or on fewer SMs it costs more. Fails if the overlap is credited at no cost."""
    g = H100.gpu
    assert CT.split_gemm_extra(g, 8192, 8192, 8192, 1) == pytest.approx(0.0, abs=1e-15)
    assert CT.split_gemm_extra(g, 8192, 8192, 8192, 8) > 0
    whole = _roofline(g, 8192, 8192, 8192)
    assert CT.split_gemm_extra(g, 8192, 8192, 8192, 1, 24) == pytest.approx(
        whole * g.sms / (g.sms - 24) - whole
    )
    lay = P.Layout(64, 8, 1, 8, 1, sp=True, recompute="none")
    on, off = _opt(tp_overlap=True), _opt(tp_overlap=False)
    cost = CT.tp_overlap_cost(L70, H100, lay, on)
    assert cost > 0 and CT.tp_overlap_cost(L70, H100, lay, off) == 0
    act = lay.micro_batch * L70.seq * L70.hidden * 2
    comm = CT.tp_collectives(8, True, "none") * CT.dp_allreduce_seconds(act, 8, 1, H100)[0]
    exposed = CT.tp_overlap_exposed(comm, KT.layer_gemm_seconds(L70, H100, lay, on), 8)
    assert CT.term_tp(L70, H100, lay, on).value == pytest.approx(L70.layers * (exposed + cost))


def _roofline(g, M, N, K):
    rate = g.peak_flops["bf16"] * g.gemm_efficiency
    return g.gemm_latency_s + max(
        2 * M * N * K / rate, 2 * (M * K + K * N + M * N) / g.hbm_bandwidth
    )


def test_era_defaults_are_todays_recipe_on_hopper_and_later():
    """On the modern recipes (H100 and later) TP overlap and the overlapped gradient reduction
    are on unless a run says otherwise, off for the 2021 A100 reproductions; a given value
    stays. Fails if either default is off again on Hopper."""
    for gpu in ("H100-SXM", "H200", "H800", "B200"):
        o = P.plan_options(L70, P.cluster(64, 8, gpu), P.Options())
        assert (o.tp_overlap, o.overlap_grad_reduce, o.overlap_param_gather) == (True,) * 3, gpu
    o = P.plan_options(L70, P.cluster(64, 8, "A100-80GB"), P.Options())
    assert (o.tp_overlap, o.overlap_grad_reduce, o.overlap_param_gather) == (False,) * 3
    assert _opt(tp_overlap=False).tp_overlap is False


def test_main_gradient_dtype_is_an_input_with_the_recipes_bytes():
    """main_grad_bytes 2 gives the megatron recipe bf16-grads' bytes (and the reduction's
    default dtype); 4 leaves it; any other is refused naming the rule."""
    bf16 = P.Options(precision="megatron", main_grad_bytes=2)
    assert bf16.recipe == RECIPES["bf16-grads"]
    assert P.Options(precision="megatron", main_grad_bytes=4).recipe == RECIPES["megatron"]
    assert _opt(main_grad_bytes=2).grad_reduce_bytes == 2 == MAIN_GRADS[2]["reduce_bytes"]
    with pytest.raises(ValueError, match=r"main_grad_bytes \(3\) must be one of 4, 2"):
        P.Options(main_grad_bytes=3)
    lay = P.Layout(64, 8, 1, 8, 1, sp=True)
    a, b = (P.evaluate(L70, H100, lay, _opt(main_grad_bytes=x)) for x in (4, 2))
    assert b.model_state_bytes < a.model_state_bytes


def test_recipe_settings_are_read_from_the_recipe_files():
    """The DGX Cloud rows' settings: bf16 main gradients where the recipe sets
    grad_sync_dtype bf16 (Llama 3.1, Nemotron-4 340B, GPT-3 175B), FP8 parameters on FP8 rows,
    none for other sources."""
    rows = {r["id"]: r for r in e3.kept_rows()}
    assert e3.recipe_settings(rows["dgxc2502-llama-3-1-405b-fp8-576gpu"]) == {
        "fp8_params": True,
        "main_grad_bytes": 2,
    }
    assert e3.recipe_settings(rows["dgxc2502-llama-3-1-8b-bf16-8gpu"]) == {
        "fp8_params": False,
        "main_grad_bytes": 2,
    }
    assert e3.recipe_settings(rows["dgxc2502-nemotron4-15b-fp8-16gpu"]) == {"fp8_params": True}
    assert e3.recipe_settings(rows["nemofw2502-gpt3-175b-h100-512gpu"]) == {}


def test_no_run_that_ran_is_refused_on_experiment_3():
    """Every kept row of experiment 3 ran, and each fits as priced today (10 of the 50 recorded
    did not); the 405B FP8 row on 576 H100s (86.4 GiB recorded) fits. Negative control: without
    the recipes' settings the refusals come back."""
    s = e3.calibration_3()
    assert (s["n"], s["not_fit_before"], s["not_fit_after"], s["not_fit_all"]) == (50, 10, 0, 0)
    row = next(r for r in s["rows"] if r["id"] == "dgxc2502-llama-3-1-405b-fp8-576gpu")
    assert row["before_gib"] == pytest.approx(86.4, abs=0.05) and row["fits"]
    plain = e3.recipe_settings
    try:
        e3.recipe_settings = lambda row: {}
        refused = [r["id"] for r in e3.kept_rows() if not e3.config_for(r)[1].fits]
    finally:
        e3.recipe_settings = plain
    assert len(refused) >= 9


def test_the_reserve_decides_no_row_of_experiment_3():
    """The memory score's sensitivity to the reserve (an assumption): no row refused at 0, 2.5
    or 5 %; the fullest row needs more than 7 % free before it would be."""
    m = e3.memory_score()
    assert m["not_fit"] == 0 and m["by_reserve"][0.0] == m["by_reserve"][0.05] == 0
    assert m["refused_above"] > 0.07


def test_calibration_rows_within_the_band():
    """Experiment 3 as calibration: the recorded 50 rows within ±15 % before (46) and after
    (47) the changes; GPT-3 175B FP8 on the DGX Cloud tables within +7 %."""
    s = e3.calibration_3()
    assert (s["within_before"], s["within_after"]) == (46, 47)
    gpt = [r["error"] for r in s["rows"] if r["id"].startswith("dgxc2502-gpt3-175b-fp8")]
    assert len(gpt) == 5 and max(gpt) < 7


def test_replacing_the_term_restores_the_old_cast_count():
    """Negative control for the first test: a term that casts weights every micro-batch (the
    old rule) differs from the planner's by (m − 1) casts."""
    opt = _opt(fp8="delayed")
    lay = P.Layout(64, 8, 1, 8, 1, sp=True, recompute="none")
    once = KT.weight_casts_per_microbatch(L70, H100, lay, opt)
    every = replace(lay, global_batch=8)  # m = 1: once per step is once per micro-batch
    assert KT.weight_casts_per_microbatch(L70, H100, every, opt) == pytest.approx(
        once * lay.microbatches
    )


APPENDIX = Path(__file__).resolve().parents[1] / "book" / "three_d_appendix.md"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "glue"))
import validation_tables as tables  # noqa: E402 (book/glue joins sys.path above)


def test_the_appendix_states_the_calibration_as_computed():
    """The appendix's section on experiment 3 as the calibration set: its table, its counts and
    every figure its prose quotes, computed here."""
    text = APPENDIX.read_text()
    flat = " ".join(text.split())
    c, m = e3.calibration_3(), e3.memory_score()
    assert tables.calibration_3_table(c) in text
    assert tables.calibration_3_score(c) in flat
    cast = e3.weight_cast_saving("dgxc2502-gpt3-175b-fp8-512gpu")
    assert f"every micro-batch, {cast:.2f} s of the step of GPT-3 175B in FP8" in flat
    assert f"Rowwise FP8 GEMMs run at {C.FP8_ROWWISE_GEMM_RATIO:.2f} of the tensorwise" in flat
    tpc = e3.tp_overlap_cost_seconds("dgxc2502-llama-3-1-405b-fp8-576gpu")
    assert f"a launch: {tpc:.2f} s of the 405B FP8 step on 576 GPUs" in flat
    assert CT.TP_OVERLAP_PIPELINE == {"proj": (4, 24), "fc2": (4, 8)}
    assert "in 4 pieces on 132 − 24 and 132 − 8 SMs" in flat and H100.gpu.sms == 132
    err = {r["id"]: r["error"] for r in c["rows"]}
    n15 = [e for i, e in err.items() if "nemotron4-15b" in i]
    assert f"too fast ({min(n15):+.1f} % to {max(n15):+.1f} %)" in flat
    gpt = [e for i, e in err.items() if i.startswith("dgxc2502-gpt3-175b-fp8")]
    assert f"is now at {min(gpt):+.1f} % to {max(gpt):+.1f} %" in flat
    gib = {r["id"]: r["predicted_gib"] for r in c["rows"]}["dgxc2502-llama-3-1-405b-fp8-576gpu"]
    assert f"needs {gib:.1f} GiB, recorded at 86.4" in flat
    assert m["by_reserve"][0.0] == m["by_reserve"][0.025] == m["by_reserve"][0.05] == 0
    assert f"the fullest row (`{m['fullest']}`) uses {100 * m['fullest_fraction']:.1f} %" in flat
    assert f"only a reserve above {100 * m['refused_above']:.1f} % would refuse it" in flat
    assert e3.as_evaluated()["rows"][0]["predicted_gib"] > 0  # the record's memory column
    h200 = published.h200_summary()
    assert h200["n"] == 5 and h200["refused"] == []
    assert "The five H200 step rows above are not refused either." in flat


@pytest.mark.slow
def test_the_appendix_plan_of_405b_fp8_is_the_planners(capsys):
    """`minipar plan` for Llama 3.1 405B FP8 at NVIDIA's layout on 1,152 H100s, as the appendix
    quotes it: today's defaults, then the recipe's kernels, then its memory settings."""
    flat = " ".join(APPENDIX.read_text().split())
    argv = ["plan", "--model", "llama3-405b", "--gpus", "1152", "--gpu", "H100-SXM"]
    argv += ["--global-batch", "504", "--fp8", "delayed", "--tp", "8", "--pp", "9", "--cp", "2"]
    argv += ["--micro-batch", "1", "--top", "1", "--json"]
    steps = []
    for extra in ([], ["--attention", "fa3", "--compiled"]):
        for more in ([], ["--fp8-params", "--main-grad-bytes", "2"]) if extra else ([],):
            assert main(argv + extra + more) == 0
            steps.append(json.loads(capsys.readouterr().out)["configs"][0]["step_seconds"])
    default, fused, recipe = steps
    assert f"B = 504) takes {default:.1f} s per step against NVIDIA's 11.1 s" in flat
    assert f"(`--attention fa3 --compiled`: {fused:.1f} s)" in flat
    assert f"ZeRO-1 fits: {recipe:.1f} s)" in flat


@pytest.mark.slow
@pytest.mark.skipif(not node_available(), reason="Node.js (/usr/bin/node) not installed")
def test_the_javascript_twins_price_the_recipe_alike():
    """planTerms in JavaScript equals three_d.terms term by term under the new inputs: FP8
    weight casts once per step (m from 1 to 16), rowwise GEMMs, TP overlap at its cost, bf16 main
    gradients, the era's defaults and their explicit opposites. Fails on a twin that still
    casts per micro-batch or credits the overlap free."""
    cl = P.cluster(64, 8, "H100-SXM")
    cases = []
    for B, t, rc in ((8, 8, "none"), (64, 8, "selective"), (128, 4, "full")):
        lay = P.Layout(B, t, 1, 64 // t, 1, sp=True, recompute=rc)
        for opt in (
            {},
            {"fp8": "delayed", "fp8_params": True, "main_grad_bytes": 2},
            {"fp8": "rowwise"},
            {"fp8": "current", "tp_overlap": False, "overlap_grad_reduce": False},
            {"main_grad_bytes": 4, "precision": "bf16-grads"},
        ):
            cases.append((lay, opt))
    want = [P.terms(L70, cl, lay, P.Options(**o)).as_dict() for lay, o in cases]
    model = {k: v for k, v in asdict(L70).items() if k != "note"}
    got = js_call(
        "three_d",
        [("planTerms", [model, cluster_config(cl), asdict(lay), o]) for lay, o in cases],
    )
    assert all(kind == "ok" for kind, _ in got), [g for g in got if g[0] != "ok"][:2]
    bad = [
        f"{o} B={lay.global_batch} t={lay.tp}: {term} python {x!r}, js {g.get(term)!r}"
        for (lay, o), w, (_, g) in zip(cases, want, got)
        for term, x in w.items()
        if mismatch(x, g.get(term), 1e-12, term)
    ]
    assert not bad, "\n".join(bad[:8])
    assert any(w["fp8_casts"] > 0 for w in want) and any(w["tp"] > 0 for w in want)


def test_fp8_parameters_count_each_linear_weight_once():
    """With FP8 parameters the FP8 weight and its transpose are the linears' only weights (2
    bytes, term_fp8_weights) and the states hold no 16-bit copy: states + FP8 weights equal a
    bf16 run's states. Without them the FP8 copies come on top of the 16-bit weights. Fails if
    the copies are added whether or not FP8 parameters are set."""
    lay = P.Layout(64, 8, 1, 8, 1, sp=True, recompute="selective")
    bf16 = P.evaluate(L70, H100, lay, _opt())
    params = P.evaluate(L70, H100, lay, _opt(fp8="delayed", fp8_params=True))
    copies = P.evaluate(L70, H100, lay, _opt(fp8="delayed"))
    held = params.bytes("states") + params.bytes("fp8_weights")
    assert held == pytest.approx(bf16.bytes("states"))
    assert copies.bytes("states") + copies.bytes("fp8_weights") > held
    assert copies.bytes("fp8_weights") == params.bytes("fp8_weights") > 0
