"""The planner's model against published measured runs (minipar.cost.validation).

One test per published row, tolerance ±10 % on the step time, with one set of A100 constants and
nothing fitted per row. Where the model does not reach ±10 % (MT-NLG; the PTD-P/ZeRO-3 ratio),
the test asserts the tolerance it does reach and names the effect that is missing.
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


def test_zero3_comparison_direction_not_reproduced_documented():
    """Narayanan et al. 2021 §5.2: PTD-P ahead of ZeRO-3 (no model parallelism), by ~70 % once
    the GPU count doubles at fixed batch. With the paper's settings (full recomputation, no SP)
    the model puts ZeRO-3 ~20 % ahead: its ZeRO-3 collectives run at the NCCL-ideal hierarchical
    bandwidth (S/8 per NIC) and one layer's compute at t = 1 hides them. Asserted: the ratio we
    reach, that the planner's ZeRO-3 pays for its gathered layers in memory, and the evidence
    for what is missing (zero3_missing_effect): the first-principles candidates do not close it.
    (1) Overlap: with none of ZeRO-3's collectives hidden the ratio stays below the measured
    1.7 at every N. (2) Latency: even a flat ring over all N ranks, α(N−1) per collective and 3
    collectives per layer, costs a small fraction of one layer's compute. (3) Bandwidth: only an
    achieved bandwidth several times below the α-β model's brings the doubled-N ratio to 1.7."""
    from minipar.cost import three_d
    rows = validation.zero3_comparison()
    for x in rows:
        assert x["ptdp"] is not None and x["zero3"] is not None
        assert 0.75 <= x["ratio"] <= 1.1, x
        z = x["zero3"]
        assert z.zero == 3 and z.tp == 1 and z.pp == 1 and z.fits
    e = validation.zero3_missing_effect()
    assert e["ratios"] == pytest.approx([x["ratio"] for x in rows])
    # (1) no overlap moves the direction at doubled N but not to the measured gap
    assert all(n > r for n, r in zip(e["no_overlap"], e["ratios"]))
    assert max(e["no_overlap"]) < validation.ZERO3_PUBLISHED_DOUBLED
    # (2) flat-ring latency per layer at the largest N against one layer's compute
    z = rows[-1]["zero3"]
    alpha = three_d.cluster(z.dp, 8, "A100-80GB").inter.alpha
    latency_layer = 3 * (z.dp - 1) * alpha
    layers = three_d.MODELS["gpt3-175b"].layers
    compute_layer = z.compute_seconds / (z.microbatches * layers)
    assert latency_layer < 0.2 * compute_layer, (latency_layer, compute_layer)
    # (3) the bandwidth deficit that would be needed: finite and well above 1
    assert 3 < e["bandwidth_factor"] < 10
    again = validation.zero3_comparison(gpus=(768,), bandwidth_factor=e["bandwidth_factor"])
    assert again[0]["ratio"] == pytest.approx(validation.ZERO3_PUBLISHED_DOUBLED, rel=0.02)
    # the chapter's clause is written from these numbers
    text = validation.zero3_sentence(e)
    assert "disagrees" in text and f"{e['bandwidth_factor']:.1f} times" in text


def test_table_text_has_every_row():
    text = validation.table()
    assert len(text.splitlines()) == 1 + len(validation.RUNS)
    assert "MT-NLG 530B" in text and "BLOOM 176B" in text
