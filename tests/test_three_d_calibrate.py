"""The reader's machine: calibration fits (pure Python) and the predicted-vs-measured benchmark
of the tiny 3D GPT on 4 gloo ranks (a benchmark: numbers produced and the rank order checked,
never a timed assertion)."""
import math

import pytest

from minipar.cost import calibrate as cal


def _machine(**kw):
    base = dict(ranks=4, layer_overhead=1e-3, flop_rate=2e9,
                links={2: (1e-4, 1e8), 4: (2e-4, 1e8)}, p2p=(5e-5, 1e9))
    return cal.Machine(**(base | kw))


def test_fits_recover_known_lines():
    c0, rate = cal.fit_compute([1e6, 2e6, 4e6, 8e6], [1e-3 + 3 * f / 2e9 for f in
                                                      (1e6, 2e6, 4e6, 8e6)])
    assert c0 == pytest.approx(1e-3) and rate == pytest.approx(2e9)
    from minipar.cost.collectives import collective_time
    sizes = [1e3, 6e4, 5e5, 2e6]
    alpha, bw = cal.fit_link(sizes, [collective_time("all-reduce", "ring", 4, s, 3e-4, 2e8)
                                     for s in sizes], 4)
    assert alpha == pytest.approx(3e-4) and bw == pytest.approx(2e8)
    # a noisy machine whose times shrink with size still yields alpha >= 0, bandwidth > 0
    alpha, bw = cal.fit_link(sizes, [5e-3, 1e-3, 1.5e-3, 4e-3], 2)
    assert alpha >= 0 and bw > 0
    with pytest.raises(ValueError, match="must be > 0"):
        cal.fit_compute([1, 2], [2.0, 1.0])
    # noise that pulls the intercept below zero: refit through the origin, not a clipped c0
    # with the steeper slope (which would predict every layer too slow)
    c0, rate = cal.fit_compute([1e6, 2e6, 4e6], [1.0e-3, 3.2e-3, 6.0e-3])
    assert c0 == 0 and 3 * 4e6 / rate == pytest.approx(6.0e-3, rel=0.2)
    steep = cal.fit_line([3e6, 6e6, 12e6], [1.0e-3, 3.2e-3, 6.0e-3])[1]
    assert 1 / rate < steep


def test_layouts_and_prediction_terms():
    assert sorted(cal.layouts(4)) == [(1, 1, 4), (1, 2, 2), (1, 4, 1), (2, 1, 2), (2, 2, 1),
                                      (4, 1, 1)]
    assert len(cal.layouts(6)) == 9                                    # non-power of two
    shape = dict(L=4, h=128, a=4, s=32, V=64, B=16)
    mach = _machine()
    pure_dp = cal.predict_tiny_step(mach, **shape, d=4, t=1, p=1, b=2)
    assert pure_dp.tp_s == 0 and pure_dp.pp_s == 0 and pure_dp.bubble_s == 0 and pure_dp.dp_s > 0
    tp = cal.predict_tiny_step(mach, **shape, d=1, t=4, p=1, b=2)
    assert tp.tp_s > 0 and tp.compute_s < 4 * pure_dp.compute_s     # FLOPs / t, more batches
    pp = cal.predict_tiny_step(mach, **shape, d=1, t=1, p=4, b=2)
    assert pp.bubble_s == pytest.approx(3 * (pp.compute_s + pp.pp_s) / pp.m)
    # negative control: without the per-collective latency, TP's 8 collectives per layer and
    # micro-batch cost almost nothing: the alpha term is what makes t = 4 slow on gloo
    free = cal.predict_tiny_step(_machine(links={2: (0.0, 1e8), 4: (0.0, 1e8)}), **shape,
                                 d=1, t=4, p=1, b=2)
    assert free.tp_s < 0.5 * tp.tp_s
    with pytest.raises(ValueError, match="breaks a rule"):
        cal.predict_tiny_step(mach, **shape, d=1, t=3, p=1, b=2)


@pytest.mark.slow
def test_bench_predicts_and_measures_every_layout_of_4_ranks():
    """One launch of 4 ranks: the calibration and one timed step per (d, t, p) (~13 s wall at
    load 7 on 2 cores, was 160 s with a launch per layout).
    Asserted: every number is produced and finite, and the layout predicted slowest (t = 4:
    eight collectives per layer and micro-batch) is measured slower than the one predicted
    fastest. Spearman and the per-layout errors are reported, not asserted (a shared machine)."""
    from minipar.three_d.calibrate import bench
    r = bench(4, steps=1, reps=3)
    rows = r["layouts"]
    assert len(rows) == 6
    for x in rows:
        assert x["predicted_s"] > 0 and x["measured_s"] > 0 and math.isfinite(x["error"])
    slow = max(rows, key=lambda x: x["predicted_s"])
    fast = min(rows, key=lambda x: x["predicted_s"])
    assert (slow["t"], slow["p"]) == (4, 1)
    assert slow["measured_s"] > fast["measured_s"]
    assert -1 <= r["spearman"] <= 1
    print(f"spearman {r['spearman']:.2f}; errors "
          + ", ".join(f"{x['d']}{x['t']}{x['p']}: {x['error']:+.0f}%" for x in rows))
