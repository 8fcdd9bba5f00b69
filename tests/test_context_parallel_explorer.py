"""The context-parallel explorer's JavaScript equals its Python twins (minipar.cost is the source
of truth), including the error messages of impossible inputs; the default view draws and an
impossible setting gives the Python error message."""

import pytest

from minipar.widgets.parity import assert_parity, js_call, node_available

pytestmark = pytest.mark.skipif(not node_available(), reason="needs Node.js")

CPS = (1, 2, 3, 4, 16, 0)
LAYOUTS = ("contiguous", "zigzag", "striped", "diagonal")


def test_cost_twins():
    from minipar.cost import context_parallel as C

    shapes = [
        dict(s=s, cp=cp, layout=lay) for s in (8, 24, 131072, 10) for cp in CPS for lay in LAYOUTS
    ]
    counts = assert_parity(
        "context_parallel", "checkShape", lambda **kw: C.check_shape(**kw) or None, shapes
    )
    assert 0 < counts["errors"] < counts["cases"]
    grid = [
        dict(b=b, s=s, h_kv=h, cp=cp, bytes_per_elem=2)
        for b in (1, 3)
        for s in (24, 131072)
        for h in (48, 1024)
        for cp in CPS
    ]
    assert_parity("context_parallel", "kvBlockBytes", C.kv_block_bytes, grid)
    acc = [dict(g, accum_bytes_per_elem=e) for g in grid for e in (None, 2, 4, 0)]
    for name, fn in (
        ("ringSentBytesPerLayer", C.ring_sent_bytes_per_layer),
        ("allgatherCollectivesPerLayer", C.allgather_collectives_per_layer),
        ("allgatherSentBytesPerLayer", C.allgather_sent_bytes_per_layer),
    ):
        counts = assert_parity("context_parallel", name, fn, acc)
        assert 0 < counts["errors"] < counts["cases"]
    assert_parity(
        "context_parallel",
        "accumBytes",
        C.accum_bytes,
        [
            dict(bytes_per_elem=e, accum_bytes_per_elem=a)
            for e in (2, 4, 8)
            for a in (None, 2, 4, -1)
        ],
    )
    assert_parity(
        "context_parallel", "ringSendsPerLayer", C.ring_sends_per_layer, [dict(cp=cp) for cp in CPS]
    )
    uly = [
        dict(b=b, s=s, h=h, cp=cp, bytes_per_elem=2, h_kv=kv, a_kv=akv)
        for b in (1, 2)
        for s in (24, 4096)
        for h in (48, 16384)
        for cp in CPS
        for kv in (None, 16, 0)
        for akv in (None, 1, 2, 8, 3)
    ]
    for name, fn in (
        ("ulyssesAllToAllsPerLayer", C.ulysses_all_to_alls_per_layer),
        ("ulyssesSentBytesPerLayer", C.ulysses_sent_bytes_per_layer),
    ):
        counts = assert_parity("context_parallel", name, fn, uly)
        assert 0 < counts["errors"] < counts["cases"]
    pairs = [
        dict(cp=cp, layout=lay, causal=c, diagonal=dg)
        for cp in CPS
        for lay in LAYOUTS
        for c in (True, False)
        for dg in ("half", "whole", "skip")
    ]
    for name, fn in (("pairsPerRank", C.pairs_per_rank), ("imbalance", C.imbalance)):
        counts = assert_parity("context_parallel", name, fn, pairs)
        assert 0 < counts["errors"] < counts["cases"]
    steps = [
        dict(rank=r, cp=cp, layout=lay, causal=c, diagonal=dg)
        for cp in (1, 2, 3, 5)
        for r in range(cp)
        for lay in LAYOUTS
        for c in (True, False)
        for dg in ("half", "whole")
    ]
    assert_parity("context_parallel", "stepPairs", C.step_pairs, steps)
    flops = [
        dict(b=b, s=s, h=h, cp=cp, layout=lay, causal=c, diagonal=dg)
        for b in (1, 0)
        for s in (48, 1152)
        for h in (16, 128)
        for cp in CPS
        for lay in LAYOUTS
        for c in (True, False)
        for dg in ("half", "whole")
    ]
    assert_parity("context_parallel", "attentionFlopsPerRank", C.attention_flops_per_rank, flops)
    assert_parity(
        "context_parallel",
        "minTokensPerRankForOverlap",
        C.min_tokens_per_rank_for_overlap,
        [
            dict(flops=f, bandwidth=w, bytes_per_elem=2, kv_fraction=k, causal=c, layout=lay)
            for f in (989.4e12, 0)
            for w in (50e9, 450e9, -1)
            for k in (1.0, 0.0625)
            for c in (True, False)
            for lay in LAYOUTS
        ],
    )
    assert_parity(
        "context_parallel",
        "ringTimeFromSteps",
        C.ring_time_from_steps,
        [
            dict(step_compute=sc, step_comm=m)
            for sc in ([1.0], [1.0, 0.5, 0.5], [0.1, 2.0])
            for m in (0.0, 0.7)
        ],
    )
    assert_parity(
        "context_parallel",
        "activationBytesPerRank",
        C.activation_bytes_per_rank,
        [
            dict(s=s, b=1, h=h, a=a, cp=cp, blockwise=bw)
            for s in (4096, 131072)
            for h, a in ((4096, 32), (16384, 0))
            for cp in CPS
            for bw in (True, False)
        ],
    )


def test_time_twins():
    from minipar.cost import context_parallel as C

    cases = [
        dict(
            b=1,
            s=s,
            h=h,
            cp=cp,
            flops=f,
            bandwidth=w,
            alpha=al,
            layout=lay,
            causal=c,
            bytes_per_elem=2,
            h_kv=kv,
            diagonal=dg,
        )
        for s in (4096, 131072)
        for h, kv in ((16384, 1024), (4096, None))
        for cp in (1, 2, 3, 16)
        for f, w, al in ((989.4e12, 50e9, 5e-6), (312e12, 450e9, 2e-6), (1e12, 0, 0), (0, 1e9, 0))
        for lay in ("contiguous", "zigzag", "striped")
        for c in (True, False)
        for dg in ("half", "whole")
    ]
    counts = assert_parity("context_parallel", "ringAttentionTime", C.ring_attention_time, cases)
    assert 0 < counts["errors"] < counts["cases"]
    ag = [
        dict(c, algorithm=alg) for c in cases[::3] for alg in ("ring", "recursive-doubling", "tree")
    ]
    counts = assert_parity(
        "context_parallel", "allgatherAttentionTime", C.allgather_attention_time, ag
    )
    assert 0 < counts["errors"] < counts["cases"]
    uly = [
        dict(b=1, s=s, h=h, cp=cp, alpha=al, bandwidth=w, bytes_per_elem=2, h_kv=kv, a_kv=akv)
        for s in (4096, 131072)
        for h, kv in ((16384, 1024), (4096, None))
        for cp in (1, 2, 8, 0)
        for al, w in ((5e-6, 50e9), (0, 0), (-1, 1e9))
        for akv in (None, 4, 8, 3)
    ]
    counts = assert_parity("context_parallel", "ulyssesTime", C.ulysses_time, uly)
    assert 0 < counts["errors"] < counts["cases"]


def test_layer_model_twin():
    from minipar.widgets.context_parallel import cp_layer_model

    cases = [
        dict(
            s=s, cp=cp, layout=lay, h=h, a=a, a_kv=kv, b=b, flops=989.4e12, bandwidth=w, alpha=5e-6
        )
        for s in (131072, 24, 1000)
        for cp in (1, 2, 3, 8, 16)
        for lay in ("zigzag", "contiguous")
        for h, a, kv in ((16384, 128, 8), (48, 12, 12), (4096, 32, 5))
        for b in (1, 2)
        for w in (50e9, 450e9)
    ]
    counts = assert_parity("context_parallel", "cpLayerModel", cp_layer_model, cases)
    assert 0 < counts["errors"] < counts["cases"]


def test_parity_check_catches_the_wrong_imbalance():
    """Negative control: a twin that uses cp/(cp+1) (forgetting that the mean is (cp+1)/2 pairs,
    not cp+1) is reported."""
    from minipar.cost import context_parallel as C

    wrong = lambda cp, layout, causal, diagonal: (
        C.imbalance(cp, layout, causal, diagonal)
        / (2 if layout == "contiguous" and causal and cp > 1 else 1)
    )
    with pytest.raises(AssertionError, match="differs"):
        assert_parity(
            "context_parallel",
            "imbalance",
            wrong,
            [dict(cp=cp, layout="contiguous", causal=True, diagonal="half") for cp in (1, 2, 3)],
        )


def test_parity_check_catches_bf16_accumulators():
    """Negative control: a twin that sends the dK/dV accumulators at the activations' 2 bytes
    (the under-count real float32 accumulators correct) is reported."""
    from minipar.cost import context_parallel as C

    wrong = lambda b, s, h_kv, cp, bytes_per_elem, accum_bytes_per_elem: (
        C.ring_sent_bytes_per_layer(b, s, h_kv, cp, bytes_per_elem, bytes_per_elem)
    )
    with pytest.raises(AssertionError, match="differs"):
        assert_parity(
            "context_parallel",
            "ringSentBytesPerLayer",
            wrong,
            [dict(b=1, s=131072, h_kv=1024, cp=16, bytes_per_elem=2, accum_bytes_per_elem=None)],
        )


def test_default_view_and_messages():
    from minipar.widgets.context_parallel import cp_config

    cfg = cp_config()
    calls = [
        ("drawExplorer", ["cp-layer", {}, cfg]),
        ("drawExplorer", ["cp-layer", {"cp": 5, "s": 131072, "layout": "zigzag"}, cfg]),
        ("drawExplorer", ["cp-layer", {"a_kv": 5}, cfg]),
        ("drawExplorer", ["cp-layer", {"cp": 0}, cfg]),
    ]
    (_, default), (_, bad_s), (_, bad_kv), (_, bad_cp) = js_call("context_parallel", calls)
    assert default["error"] is None and "<svg" in default["html"] and "</svg>" in default["html"]
    assert "Ulysses sends" in default["html"]  # 8 K/V heads, cp = 16: replicated
    assert "All-gather CP" in default["html"] and "float32" in default["html"]
    assert bad_s["error"] == "sequence length s (131072) must be divisible by 2·cp (10)"
    assert bad_kv["error"] == "a (128) must be divisible by K/V heads (5)"  # the input contract
    assert bad_cp["error"] in ("cp (0) must be an integer >= 1", "cp (0) must be at least 1")
    assert "minipar-explorer-message" in bad_s["html"]


def test_widget_has_a_self_contained_static_copy():
    from minipar.widgets import classic_script
    from minipar.widgets.context_parallel import cp_explorer

    assert 'registerExplorer("cp-layer"' in classic_script("context_parallel")
    w = cp_explorer(cp=8)
    html = w._repr_mimebundle_()[0]["text/html"]
    assert (
        'registerExplorer("cp-layer"' in html and "mountExplorer(document.getElementById(" in html
    )
    assert (
        "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
        and "https://" not in html
    )  # works offline: nothing is fetched
