"""The tensor-parallel explorer's JavaScript equals its Python twins (minipar.cost is the source
of truth); the default view draws and an impossible setting gives the Python error message."""

import pytest
from explorer_parity_support import assert_parity, js_call, node_available

pytestmark = pytest.mark.skipif(not node_available(), reason="needs Node.js")


def test_cost_twins():
    from minipar.cost.chapters.tensor_parallel import (
        comm_compute_ratio,
        layer_comm_fraction,
        layer_forward_flops,
        tp_sent_bytes_per_layer,
    )

    grid = [
        dict(b=b, s=s, h=h, t=t)
        for b in (1, 3)
        for s in (7, 2048)
        for h in (48, 12288)
        for t in (1, 2, 3, 8, 0)
    ]
    assert_parity("tensor_parallel", "layerForwardFlops", layer_forward_flops, grid)
    hw = [
        dict(flops=f, bandwidth=bw, alpha=al)
        for f, bw, al in ((989.4e12, 450e9, 2e-6), (312e12, 50e9, 5e-6), (1e12, 0, 0))
    ]
    cases = [dict(g, **w) for g in grid if g["t"] > 0 for w in hw]
    for name, fn in (
        ("commComputeRatio", comm_compute_ratio),
        ("layerCommFraction", layer_comm_fraction),
    ):
        counts = assert_parity("tensor_parallel", name, fn, cases)
        assert 0 < counts["errors"] < counts["cases"]
    assert_parity(
        "tensor_parallel",
        "tpSentBytesPerLayer",
        tp_sent_bytes_per_layer,
        [dict(g, bytes_per_elem=2, sp=sp) for g in grid for sp in (False, True)],
    )


def test_layer_model_twin():
    from minipar.widgets.tensor_parallel import tp_layer_model

    cases = [
        dict(h=h, a=a, s=s, b=b, t=t, flops=989.4e12, bandwidth=bw, alpha=2e-6, sp=sp)
        for h, a in ((12288, 96), (48, 12))
        for s in (12, 2048)
        for b in (1, 4)
        for t in (1, 3, 8, 7)
        for bw in (450e9, 50e9)
        for sp in (False, True)
    ]
    counts = assert_parity("tensor_parallel", "tpLayerModel", tp_layer_model, cases)
    assert 0 < counts["errors"] < counts["cases"]  # t = 7 does not divide the heads


def test_parity_check_catches_a_model_that_amortises_with_batch():
    """Negative control: a twin that divides the traffic by b ('larger batches amortise
    communication') differs from the JavaScript wherever b > 1."""
    from minipar.cost.chapters.tensor_parallel import comm_compute_ratio

    wrong = lambda b, **kw: comm_compute_ratio(b, **kw) / b
    with pytest.raises(AssertionError, match="1 of 2 cases"):
        assert_parity(
            "tensor_parallel",
            "commComputeRatio",
            wrong,
            [
                dict(b=b, s=2048, h=12288, t=8, flops=989.4e12, bandwidth=450e9, alpha=0.0)
                for b in (1, 4)
            ],
        )


def test_default_view_and_message():
    from minipar.widgets.tensor_parallel import tp_config

    cfg = tp_config()
    (_, default), (_, bad) = js_call(
        "tensor_parallel",
        [("drawExplorer", ["tp-layer", {}, cfg]), ("drawExplorer", ["tp-layer", {"t": 7}, cfg])],
    )
    assert default["error"] is None and "<svg" in default["html"] and "</svg>" in default["html"]
    assert bad["error"] == "heads (96) must be divisible by t (7)"
    assert "minipar-explorer-message" in bad["html"]


def test_sequence_parallel_checkbox_changes_the_view():
    """The checkbox used to change nothing: now it picks the activation curve that is marked,
    the number in bold and the collectives named."""
    from minipar.widgets.tensor_parallel import tp_config, tp_layer_model

    cfg = tp_config()
    (_, off), (_, on) = js_call(
        "tensor_parallel",
        [
            ("drawExplorer", ["tp-layer", {"sp": False}, cfg]),
            ("drawExplorer", ["tp-layer", {"sp": True}, cfg]),
        ],
    )
    assert off["error"] is None and on["error"] is None and off["html"] != on["html"]
    assert "all-gathers" in on["html"] and "all-gathers" not in off["html"]
    act = {sp: tp_layer_model(sp=sp)["activation_bytes"] for sp in (False, True)}
    assert act[True] < act[False]
    assert "with TP + SP: <b>" in on["html"] and "with TP alone: <b>" in off["html"]


def test_explorer_refuses_what_python_refuses():
    """Each invalid control gives the Python twin's message, naming the rule and the value."""
    from minipar.widgets.tensor_parallel import tp_config, tp_layer_model

    cfg = tp_config()
    bad = [{"t": 0}, {"t": -2}, {"b": 0}, {"a": 0}, {"t": 5}, {"a": 7}, {"t": 2.5}]
    got = js_call("tensor_parallel", [("drawExplorer", ["tp-layer", ui, cfg]) for ui in bad])
    for (_, out), ui in zip(got, bad):
        with pytest.raises(ValueError) as e:
            tp_layer_model(**ui)
        assert out["error"] == str(e.value), ui


def test_link_and_sp_are_disabled_at_t_1_where_they_change_nothing():
    from minipar.widgets.tensor_parallel import tp_layer_model

    calls = [("tpDisabled", [{"t": t}]) for t in (1, 2, 8)]
    assert [out for _, out in js_call("tensor_parallel", calls)] == [["link", "sp"], [], []]
    slow = tp_layer_model(t=1, bandwidth=1e9, sp=True)
    fast = tp_layer_model(t=1, bandwidth=900e9, sp=False)
    assert slow == fast  # at t = 1 neither the link nor SP changes the layer
