"""The planner's model against published measured runs (minipar.cost.validation).

One test per published row, tolerance ±10 % on the step time, with one set of A100 constants and
nothing fitted per row. Where the model does not reach ±10 % (MT-NLG; the PTD-P/ZeRO-3 ratio at
±15 %, and its smallest GPU count), the test asserts what it does reach and names the effect that
is missing.
"""
from dataclasses import replace

import pytest

from minipar.cost import hardware, validation
from minipar.cost.model import flops_per_iteration

ROWS = {r.name: r for r in validation.published_runs()}
WITHIN_10 = [r.name for r in validation.RUNS if r.name != "MT-NLG 530B"]


@pytest.mark.parametrize("name", WITHIN_10)
def test_published_run_within_10_percent(name):
    r = ROWS[name]
    assert r.fits, f"{name}: the published layout must fit ({r.config.bytes_per_gpu / 2**30:.1f} GiB)"
    assert abs(r.error) <= 10, f"{name}: predicted {r.predicted_step:.2f} s vs {r.published_step:.2f} s"
    # the published TFLOP/s and step time are the same measurement (Eq. 3 FLOPs)
    run = next(x for x in validation.RUNS if x.name == name)
    flops = flops_per_iteration(run.batch, run.model.seq, run.flops_layers or run.model.layers,
                                run.model.hidden, run.model.vocab, "full")
    assert flops / (r.gpus * r.published_step) / 1e12 == pytest.approx(r.published_tflops)


def test_mt_nlg_60s_reaches_25_percent_and_the_missing_effect_is_the_implementation():
    """MT-NLG measured 60.1 s per iteration (126 TFLOP/s per GPU); the model says ~47 s (−22 %).

    Missing effect: the software. The same model, t = 8, p = 35 and A100 cluster ran at 163
    TFLOP/s per GPU in PTD-P Table 1 (Megatron-LM's own pipeline), which this model reproduces
    within 10 %; MT-NLG ran DeepSpeed's pipeline engine. A model with one set of constants per
    cluster cannot match both without a per-implementation term."""
    r, same = ROWS["MT-NLG 530B"], ROWS["PTD-P 529.6B"]
    assert r.fits and -25 <= r.error <= -15
    assert abs(same.error) <= 10
    assert r.published_tflops / same.published_tflops == pytest.approx(0.77, abs=0.01)


def test_table1_throughput_order_is_right():
    """Spearman between predicted and measured TFLOP/s over Table 1's ten rows, and the small
    models predicted slower than the large ones, as measured (137 vs 163 TFLOP/s)."""
    rows = [ROWS[r.name] for r in validation.RUNS[:10]]
    rho = validation.spearman([r.predicted_tflops for r in rows],
                              [r.published_tflops for r in rows])
    assert rho >= 0.8
    small, large = rows[:4], rows[-2:]
    assert max(r.predicted_tflops for r in small) < min(r.predicted_tflops for r in large)


def test_negative_controls_fail_the_tolerance():
    """(1) A constant 50 % of peak (156 TFLOP/s, what the old ±7-point test accepted) misses
    rows by more than 10 %. (2) Without the memory-bound kernels (infinite HBM bandwidth) the
    model predicts the small models too fast and loses the order: the effect that matters."""
    table1 = [ROWS[r.name] for r in validation.RUNS[:10]]
    const = [100 * (r.published_tflops / 156 - 1) for r in table1]     # step error of 156 TF
    assert max(abs(e) for e in const) > 10
    gpu = hardware.GPUS["A100-80GB"]
    try:
        hardware.GPUS["A100-80GB"] = replace(gpu, hbm_bandwidth=1e30)
        rows = validation.published_runs()[:10]
    finally:
        hardware.GPUS["A100-80GB"] = gpu
    assert max(abs(r.error) for r in rows) > 10
    assert validation.spearman([r.predicted_tflops for r in rows],
                               [r.published_tflops for r in rows]) < 0.8


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
    model gets the direction and the ratio within ±15 %, and the gap grows with the GPU count as
    measured. Each layout is the one that ran."""
    rows = validation.zero3_comparison(model)
    t, p = validation.ZERO3_TABLE2[model]["ptdp_layout"]
    for x, ((n_p, _, _), (n_z, _, mb, _)) in zip(rows, validation.ZERO3_TABLE2[model]["rows"]):
        assert (x["ptdp"].tp, x["ptdp"].pp, x["ptdp"].micro_batch, x["ptdp"].zero) == (t, p, 1, 0)
        assert (x["zero3"].tp, x["zero3"].pp, x["zero3"].dp, x["zero3"].micro_batch,
                x["zero3"].zero) == (1, 1, n_z, mb, 3)
        assert x["ptdp"].fits and x["ptdp"].dp * t * p == n_p
        assert x["zero3"].dp_link == "ib-hdr200"
    doubled = rows[1]
    assert doubled["ratio"] > 1 and doubled["zero3"].fits
    assert doubled["ratio"] == pytest.approx(validation.ZERO3_PUBLISHED_DOUBLED, rel=0.15)
    assert rows[2]["ratio"] > rows[1]["ratio"] > rows[0]["ratio"]
    assert rows[2]["ratio"] == pytest.approx(rows[2]["published_ratio"], rel=0.15)
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
    assert all(x["zero3"].zero3_exposed_seconds < 0.05 * x["zero3"].step_seconds for x in hier)
    flat = validation.zero3_comparison(model)
    assert all(f["ratio"] > 1.5 * h["ratio"] for f, h in zip(flat[1:], hier[1:]))


def test_zero3_evidence_achieved_bandwidth_is_one_nic_per_gpu():
    """The measurement behind the flat ring: ZeRO-3's measured step moves 3 all-gathers + 1
    reduce-scatter of the 16-bit weights (one micro-batch per rank) at 16-24 GB/s per GPU,
    0.6-1.0 of one 25 GB/s HDR NIC, 5-8x what the hierarchical algorithm's bytes per NIC
    (1/8 of them) would need at that step time."""
    from minipar.cost import three_d
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
    clause is written from these numbers."""
    e175 = validation.zero3_missing_effect("gpt3-175b")
    e530 = validation.zero3_missing_effect("mt-nlg-530b")
    assert e175["ratios"][0] < 1 < e175["published"][0]
    assert e175["zero3_step"][0] < e175["zero3_step_published"][0] \
        < e175["zero3_step_no_overlap"][0]
    assert e175["zero3_error"][0] > 30                      # the model's ZeRO-3 too fast there
    assert not e530["zero3_fits"][0] and e530["zero3_gib"][0] > e530["limit_gib"]
    assert all(e530["zero3_fits"][1:])
    # PTD-P's side is within 10 % at every count: the misses are ZeRO-3's
    assert max(abs(x) for e in (e175, e530) for x in e["ptdp_error"]) < 10
    text = validation.zero3_sentence([e175, e530])
    assert "puts PTD-P ahead" in text and "hierarchical" in text
    assert f"{e175['ratios'][1]:.2f} for 175B on 768 GPUs" in text
    assert "640 GPUs" in text and f"{e175['zero3_step_published'][0]:.0f} s" in text
    # with Megatron's fp32 reduction instead of DeepSpeed's 16-bit one the direction holds
    fp32 = validation.zero3_comparison("gpt3-175b", zero3_grad_reduce_bytes=4)
    assert fp32[1]["ratio"] > e175["ratios"][1] > 1
    with pytest.raises(ValueError, match=r"model \('llama2-70b'\) must be one of"):
        validation.zero3_comparison("llama2-70b")


def test_table_text_has_every_row():
    text = validation.table()
    assert len(text.splitlines()) == 1 + len(validation.RUNS)
    assert "MT-NLG 530B" in text and "BLOOM 176B" in text
