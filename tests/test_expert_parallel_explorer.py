"""The expert-parallel explorer's JavaScript equals its Python twins (minipar.cost.chapters.expert_parallel
is the source of truth), invalid inputs included; the default view draws and an impossible
setting shows the rule and the value; a negative control shows the parity check bites."""

import dataclasses
import itertools

import pytest
from explorer_parity_support import assert_parity, js_call, node_available

pytestmark = pytest.mark.skipif(not node_available(), reason="needs Node.js")

SHAPES = [
    (8, 2, 8),
    (8, 2, 3),
    (6, 2, 3),
    (6, 7, 3),
    (256, 8, 64),
    (4, 1, 1),
    (0, 1, 1),
    (4, 1, 0),
    (5, 2, 5),
]  # (experts, top_k, ep)


@pytest.mark.slow
def test_cost_twins():
    from minipar.cost.chapters.expert_parallel import (
        all_to_all_time,
        capacity,
        check_shapes,
        even_dispatch_bytes,
        expert_params_per_rank,
        moe_params,
    )

    assert_parity(
        "expert_parallel",
        "epCheckShapes",
        check_shapes,
        [dict(experts=e, top_k=k, ep=x) for e, k, x in SHAPES],
    )
    counts = assert_parity(
        "expert_parallel",
        "epCapacity",
        capacity,
        [
            dict(tokens=n, experts=e, top_k=k, capacity_factor=c)
            for n in (7, 4096)
            for e, k in ((8, 2), (6, 1), (3, 2))
            for c in (None, 1.0, 1.25, 0.3, 0, -1)
        ],
    )
    assert 0 < counts["errors"] < counts["cases"]
    counts = assert_parity(
        "expert_parallel",
        "evenDispatchBytes",
        even_dispatch_bytes,
        [
            dict(tokens=n, top_k=k, hidden=h, ep=x, bytes_per_elem=2)
            for n in (1, 4096, 0)
            for k in (1, 2)
            for h in (7, 4096)
            for x in (1, 3, 8, 0)
        ],
    )
    assert 0 < counts["errors"] < counts["cases"]
    counts = assert_parity(
        "expert_parallel",
        "allToAllTime",
        all_to_all_time,
        [
            dict(nbytes=s, ep=x, alpha=a, bandwidth=b)
            for s in (0, 1e6, 6.7e7, -1)
            for x in (1, 2, 3, 64, 0)
            for a, b in ((2e-6, 450e9), (5e-6, 50e9), (0.0, 0))
        ],
    )
    assert 0 < counts["errors"] < counts["cases"]
    assert_parity(
        "expert_parallel",
        "expertParamsPerRank",
        expert_params_per_rank,
        [dict(experts=e, hidden=4096, ffn=14336, ep=x, matrices=3) for e, _, x in SHAPES],
    )
    assert_parity(
        "expert_parallel",
        "moeParams",
        moe_params,
        [
            dict(
                hidden=h,
                ffn=f,
                experts=e,
                top_k=k,
                layers=L,
                matrices=m,
                dense_per_layer=dn,
                shared=sh,
            )
            for h, f in ((4096, 14336), (7168, 2048))
            for e, k, _ in SHAPES
            for L, m, dn, sh in ((1, 2, 0, 0), (58, 3, 1000, 1))
        ],
    )


def test_load_and_layer_model_twins():
    from minipar.cost.chapters.expert_parallel import MoELayer, ep_layer_model, skewed_loads

    loads = [
        dict(tokens=n, experts=e, top_k=k, ep=x, hot=hot, capacity_factor=c)
        for n in (5, 4096)
        for e, k, x in SHAPES
        for hot in (0.0, 0.3, 1.0, 1.5)
        for c in (None, 1.0, 1.25)
    ]
    counts = assert_parity("expert_parallel", "skewedLoads", skewed_loads, loads)
    assert 0 < counts["errors"] < counts["cases"]
    cases = [
        dict(
            layer=dict(
                tokens=n,
                hidden=h,
                ffn=14336,
                experts=e,
                top_k=k,
                ep=x,
                matrices=3,
                bytes_per_elem=2,
            ),
            capacity_factor=c,
            hot=hot,
            alpha=a,
            bandwidth=b,
            gpus_per_node=g,
        )
        for n, (e, k, x), h, c, hot, (a, b), g in itertools.product(
            (7, 4096),
            SHAPES,
            (4096, 0),
            (None, 1.25, 0),
            (0.0, 0.5),
            ((2e-6, 450e9), (5e-6, 0)),
            (8, 4),
        )
    ]
    on_layer = lambda layer, **kw: ep_layer_model(MoELayer(**layer), **kw)
    counts = assert_parity("expert_parallel", "epLayerModel", on_layer, cases)
    assert 0 < counts["errors"] < counts["cases"]
    # the defaults (Mixtral 8×7B's layer, NVLink 4) in both languages
    ((_, default),) = js_call("expert_parallel", [("epLayerModel", [])])
    assert default == ep_layer_model()
    assert ep_layer_model() == ep_layer_model(MoELayer(4096, 4096, 14336, 8, 2, 8, 3, 2))


def test_moe_layer_twin():
    """MoELayer checks a layer once, in the same words in both languages; its defaults agree."""
    from minipar.cost.chapters.expert_parallel import MoELayer

    cases = [
        dict(tokens=n, hidden=h, ffn=f, experts=e, top_k=k, ep=x, matrices=m, bytes_per_elem=2)
        for n, h, f, (e, k, x), m in itertools.product(
            (7, 0), (4096, 0), (14336, 0), SHAPES, (2, 3, 0)
        )
    ]
    counts = assert_parity(
        "expert_parallel", "moeLayer", MoELayer, cases, js_args=lambda case: [case]
    )
    assert 0 < counts["errors"] < counts["cases"]
    ((_, default),) = js_call("expert_parallel", [("moeLayer", [])])
    assert default == dataclasses.asdict(MoELayer())
    with pytest.raises(ValueError, match=r"routed ranks \(2\) must equal ep \(8\)"):
        MoELayer().check_ranks(2)


def test_off_node_fraction_twin():
    """Leaving the node is set by the EP degree x and the node size, never by E."""
    from minipar.cost.chapters.expert_parallel import off_node_fraction

    cases = [dict(ep=x, gpus_per_node=g) for x in (1, 3, 8, 12, 16, 64, 0) for g in (4, 8, 0)]
    counts = assert_parity("expert_parallel", "offNodeFraction", off_node_fraction, cases)
    assert 0 < counts["errors"] < counts["cases"]
    assert off_node_fraction(8, 8) == 0 and off_node_fraction(64, 8) == 7 / 8


def test_parity_check_catches_capacity_without_top_k():
    """Negative control: a twin whose capacity forgets the K (c_f·n/E, Switch's top-1 formula
    used for top-2) differs wherever K > 1."""
    from minipar.cost.chapters.expert_parallel import capacity

    wrong = lambda tokens, experts, top_k, capacity_factor: capacity(
        tokens, experts, 1, capacity_factor
    )
    with pytest.raises(AssertionError, match="1 of 2 cases"):
        assert_parity(
            "expert_parallel",
            "epCapacity",
            wrong,
            [dict(tokens=4096, experts=8, top_k=k, capacity_factor=1.0) for k in (1, 2)],
        )


def test_default_view_and_messages():
    from minipar.widgets.expert_parallel import ep_config

    cfg = ep_config()
    calls = [
        ("drawExplorer", ["ep-layer", {}, cfg]),
        ("drawExplorer", ["ep-layer", {"hot": 0.5, "capacity_factor": 1.25, "ep": 4}, cfg]),
        ("drawExplorer", ["ep-layer", {"ep": 3}, cfg]),
        ("drawExplorer", ["ep-layer", {"top_k": 9}, cfg]),
        ("drawExplorer", ["ep-layer", {"experts": 24, "ep": 12}, cfg]),
    ]
    (_, default), (_, skew), (_, bad), (_, bad_k), (_, bad_node) = js_call("expert_parallel", calls)
    assert default["error"] is None and "<svg" in default["html"] and "</svg>" in default["html"]
    assert "minipar-explorer-output" in default["html"] or "<svg" in default["html"]
    assert skew["error"] is None and "dropped" in skew["html"]
    # the messages name the boxes as the page labels them, not the code's variables
    assert bad["error"] == "experts E (8) must be divisible by expert-parallel ranks x (3)"
    assert bad_k["error"] == "top-K (9) must be at most experts E (8)"
    assert bad_node["error"] == (
        "expert-parallel ranks x (12) larger than a node must be a multiple of GPUs per node (8)"
    )
    assert "minipar-explorer-message" in bad["html"]
