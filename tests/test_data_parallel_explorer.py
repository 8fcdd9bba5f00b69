"""The data-parallel step explorer: every position of its two sliders is a step the model
accepts, its title counts GPUs in words a reader can read, and it draws a bounded number of
boxes however many buckets the step has."""

import pytest
from explorer_parity_support import js_call, node_available

from minipar.widgets.data_parallel import MAX_BUCKETS, dp_config, dp_step_model

pytestmark = pytest.mark.skipif(not node_available(), reason="needs Node.js")


def _sliders():
    ((_, sliders),) = js_call("data_parallel", [("dpStepSliders", [])])
    return sliders["params_m"], sliders["bucket_mb"]


@pytest.mark.slow
def test_every_slider_pair_is_accepted_by_the_model():
    params, buckets = _sliders()
    worst = max(params) * 1e6 * 2 / (min(buckets) * 2**20)  # bf16 gradients, bytes / bucket
    assert worst <= MAX_BUCKETS, f"{max(params)} M params in {min(buckets)} MiB buckets"
    for pm in (min(params), max(params)):
        for bm in (min(buckets), max(buckets)):
            dp_step_model(params_m=pm, bucket_mb=bm, ranks=64)  # the Python twin accepts it
    calls = [
        ("drawExplorer", ["dp-step", {"params_m": pm, "bucket_mb": bm}, dp_config(), "bucket_mb"])
        for pm in params
        for bm in buckets
    ]
    refused = [
        (c[1][1], out["error"])
        for c, (_, out) in zip(calls, js_call("data_parallel", calls))
        if out["error"]
    ]
    assert not refused, refused[:3]


def test_title_counts_gpus_in_words_and_boxes_are_bounded():
    cfg = dp_config()
    calls = [
        ("drawExplorer", ["dp-step", {"ranks": 1, "params_m": 1000, "bucket_mb": 1}, cfg, "ranks"]),
        ("drawExplorer", ["dp-step", {"ranks": 64, "params_m": 10000, "bucket_mb": 1}, cfg, None]),
        ("drawnIntervals", [[[i, i + 1] for i in range(19074)], 200]),
    ]
    (_, one), (_, many), (_, drawn) = js_call("data_parallel", calls)
    assert not one["error"] and "1 GPU, nothing to all-reduce" in one["html"]
    assert "1 GPUs" not in one["html"]
    assert not many["error"] and "19074 buckets on 64 GPUs" in many["html"]
    assert many["html"].count("buckets ") <= 2 * 200 + 10  # merged boxes, not 19,074
    assert len(drawn) <= 200 and drawn[0] == [0, 96, 1, 96]  # ceil(19074 / 200) = 96 per box
    assert drawn[-1][1] == 19074 and drawn[-1][3] == 19074
    assert sum(last - first + 1 for _, _, first, last in drawn) == 19074  # every bucket, once


def test_controls_that_do_not_apply_are_disabled():
    """One GPU: nothing to all-reduce; up to one 8-GPU node: nothing crosses between nodes."""
    calls = [("dpDisabled", [{"ranks": n}]) for n in (1, 2, 8, 16, 64)]
    got = [out for _, out in js_call("data_parallel", calls)]
    assert got == [["intra", "inter", "bucket_mb", "overlap"], ["inter"], ["inter"], [], []]
    # and what is greyed out really does not change the step
    cfg = dp_config()
    base = {"ranks": 8, "params_m": 1000, "bucket_mb": 25}
    draws = js_call(
        "data_parallel",
        [
            ("drawExplorer", ["dp-step", {**base, "inter": inter}, cfg, "inter"])
            for inter in ("ib-ndr400", "eth-100g")
        ],
    )
    (_, a), (_, b) = draws
    assert a["html"].replace("ib-ndr400", "eth-100g") == b["html"]
