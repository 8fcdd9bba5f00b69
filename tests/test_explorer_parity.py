"""The explorers' JavaScript cost models equal the Python ones (minipar.cost), run under Node.js.

Each chapter adds a test here with explorer_parity_support.assert_parity: the Python function,
its JavaScript twin and a grid with non-powers of two and impossible settings.
"""

import itertools

import pytest
from explorer_parity_support import assert_parity, js_call, node_available

pytestmark = pytest.mark.skipif(
    not node_available(), reason="Node.js (/usr/bin/node) not installed"
)

NS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 100, 0]
SIZES = [0, 1, 1000, 2**20 + 3, 1e9, -1]
LINKS = [(2e-6, 450e9), (0.0, 1e9), (3e-5, 12.5e9)]


def _collective_cases():
    from minipar.cost.network.collectives import ALGORITHMS, OPS

    algos = sorted({a for v in ALGORITHMS.values() for a in v})
    return [
        dict(op=op, algorithm=al, n=n, nbytes=s, alpha=a, bandwidth=b)
        for op, al, n, s, (a, b) in itertools.product(OPS + ("gather",), algos, NS, SIZES, LINKS)
    ]


def test_collective_time_parity():
    from minipar.cost.network.collectives import collective_time

    counts = assert_parity("collectives", "collectiveTime", collective_time, _collective_cases())
    assert counts["cases"] > 5000 and 0 < counts["errors"] < counts["cases"]


def test_busbw_and_parameter_server_parity():
    from minipar.cost.network.collectives import OPS, busbw, busbw_factor, parameter_server_time

    assert_parity(
        "collectives",
        "busbwFactor",
        busbw_factor,
        [dict(op=op, n=n) for op in OPS + ("gather",) for n in NS],
    )
    assert_parity(
        "collectives",
        "busbw",
        busbw,
        [
            dict(op=op, n=n, nbytes=s, seconds=t)
            for op in OPS
            for n in NS[:-1]
            for s in (1, 1e9)
            for t in (1e-6, 0.3, 0)
        ],
    )
    assert_parity(
        "collectives",
        "parameterServerTime",
        parameter_server_time,
        [dict(n=n, nbytes=s, alpha=a, bandwidth=b) for n in NS for s in SIZES for a, b in LINKS],
    )


def test_hierarchical_all_reduce_parity():
    from minipar.cost.kernels.hardware import LINKS as PRESETS
    from minipar.cost.network.collectives import hierarchical_all_reduce_time

    cases = [
        dict(
            nodes=k,
            gpus_per_node=g,
            nbytes=s,
            intra=PRESETS[i],
            inter=PRESETS[j],
            inter_algorithm=al,
        )
        for k in (1, 2, 3, 8, 0)
        for g in (1, 4, 6, 8)
        for s in (0, 1e6, 1e9)
        for i, j in (("nvlink4-h100", "ib-ndr400"), ("pcie5-x16", "eth-100g"))
        for al in ("ring", "recursive-doubling", "rabenseifner")
    ]
    link = lambda L: {"alpha": L.alpha, "bandwidth": L.bandwidth}
    counts = assert_parity(
        "collectives",
        "hierarchicalAllReduceTime",
        hierarchical_all_reduce_time,
        cases,
        js_args=lambda c: [
            c["nodes"],
            c["gpus_per_node"],
            c["nbytes"],
            link(c["intra"]),
            link(c["inter"]),
            c["inter_algorithm"],
        ],
    )
    assert counts["errors"] > 0


def test_parity_check_catches_the_classic_busbw_bug():
    """Negative control: a Python twin using (n−1)/n for all-reduce busbw (the all-gather
    factor, a classic mix-up) must be reported, with the case that differs."""
    from minipar.cost.network import collectives as cc

    def wrong_busbw_factor(op, n):
        return (n - 1) / n if op == "all-reduce" else cc.busbw_factor(op, n)

    with pytest.raises(
        AssertionError, match=r"(?s)busbwFactor .* differs .* 3 of 18 cases.*'all-reduce', 'n': 3"
    ):
        assert_parity(
            "collectives",
            "busbwFactor",
            wrong_busbw_factor,
            [dict(op=op, n=n) for op in cc.OPS for n in (2, 3, 8)],
        )


def test_parity_check_catches_a_small_relative_error():
    from minipar.cost.network.collectives import collective_time

    off = lambda **kw: collective_time(**kw) * (1 + 1e-7)
    with pytest.raises(AssertionError, match="relative 1.00e-07"):
        assert_parity(
            "collectives",
            "collectiveTime",
            off,
            [dict(op="all-reduce", algorithm="ring", n=3, nbytes=1e6, alpha=1e-6, bandwidth=1e9)],
        )


def test_collectives_explorer_default_view_and_impossible_settings():
    from minipar.widgets.collectives import MACHINE, collectives_config

    cfg = collectives_config()
    calls = [
        ("drawExplorer", ["collectives", {}, cfg]),
        ("drawExplorer", ["collectives", {"op": "all-gather", "algorithm": "rabenseifner"}, cfg]),
        (
            "drawExplorer",
            ["collectives", {"op": "all-gather", "algorithm": "recursive-doubling", "n": 6}, cfg],
        ),
        ("drawExplorer", ["collectives", {"n": 1}, cfg]),
        ("drawExplorer", ["collectives", {"link": MACHINE, "n": 3}, cfg]),
    ]
    (k0, default), (_, rab), (_, rd6), (_, one), (_, machine) = js_call("collectives", calls)
    assert k0 == "ok" and default["error"] is None
    assert default["html"].count("<svg") == 2 and "time (s)" in default["html"]
    assert "S (bytes)" in default["html"] and "GB/s" in default["html"]
    assert rab["error"] == (
        "algorithm ('rabenseifner') is not one for all-gather; choose from ring, recursive-doubling"
    )
    assert "minipar-explorer-message" in rab["html"] and "<svg" not in rab["html"]
    assert rd6["error"] == "recursive-doubling all-gather needs n a power of two, got n (6)"
    assert "ranks n (1)" in one["error"]
    assert machine["error"] is None and "rough default" in machine["html"]


# ---- memory_time.js ------------------------------------------------------------------------

SHAPES = [
    (96, 12288, 96, 51200),
    (80, 8192, 64, 32000),
    (2, 64, 4, 100),
    (5, 96, 6, 7),
    (12, 100, 3, 1000),
]


@pytest.mark.slow
def test_memory_model_parity():
    from minipar.cost.chapters.memory_time import activation_bytes_per_layer, model_state_bytes
    from minipar.cost.model import param_count
    from minipar.cost.planner.breakdown import check_layout, per_gpu_memory

    assert_parity(
        "memory_time",
        "paramCount",
        param_count,
        [dict(L=L, h=h, V=V, s=s) for L, h, _, V in SHAPES for s in (1, 2048, 0)],
    )
    assert_parity(
        "memory_time",
        "modelStateBytes",
        model_state_bytes,
        [
            dict(psi=psi, d=d, t=t, p=p, zero=z, weight_bytes=w, grad_bytes=g, optimizer_bytes=k)
            for psi in (1.3e9, 175e9, 7, 0)
            for d in (1, 3, 64)
            for t in (1, 3, 8)
            for p in (1, 6)
            for z in (0, 1, 2, 3, 4)
            for w, g, k in ((2, 2, 12), (4, 4, 8), (4, 4, 0), (2, -1, 12))
        ],
    )
    acts = [
        dict(s=s, b=b, h=h, a=a, t=t, sp=sp, recompute=rc)
        for _, h, a, _ in SHAPES
        for s in (1, 2048)
        for b in (1, 3)
        for t in (1, 2, 3, 8)
        for sp in (False, True)
        for rc in ("none", "selective", "full", "some")
    ]
    counts = assert_parity(
        "memory_time", "activationBytesPerLayer", activation_bytes_per_layer, acts
    )
    assert 0 < counts["errors"] < counts["cases"]
    layouts = [
        dict(L=L, h=h, a=a, d=d, t=t, p=p, zero=z)
        for L, h, a, _ in SHAPES
        for d in (1, 3)
        for t in (1, 2, 3, 8)
        for p in (1, 2, 3, 5)
        for z in (0, 3, 5)
    ]
    assert_parity("memory_time", "checkLayout", check_layout, layouts)
    counts = assert_parity(
        "memory_time",
        "perGpuMemory",
        per_gpu_memory,
        [
            dict(L=L, h=h, a=a, s=s, V=V, b=b, d=d, t=t, p=p, zero=z, sp=sp, recompute=rc, m=m)
            for L, h, a, V in SHAPES
            for s in (2048,)
            for b in (1, 2)
            for d in (1, 3)
            for t in (1, 3, 8)
            for p in (1, 2, 3)
            for z in (0, 2, 3)
            for sp in (False, True)
            for rc in ("selective", "full")
            for m in (None, 1)
        ],
    )
    assert 0 < counts["errors"] < counts["cases"]


def test_pipeline_activation_parity():
    from minipar.cost.chapters.memory_time import pipeline_first_stage_activation_bytes as f

    counts = assert_parity(
        "memory_time",
        "pipelineFirstStageActivationBytes",
        f,
        [
            dict(
                s=512,
                b=2,
                h=h,
                a=a,
                L=L,
                p=p,
                m=m,
                t=t,
                sp=True,
                recompute="none",
                schedule=sc,
                v=v,
            )
            for L, h, a, _ in SHAPES[:3]
            for p in (1, 2, 3, 4)
            for m in (None, 1, 2, 8, 0)
            for t in (1, 2)
            for sc in ("gpipe", "1f1b", "interleaved", "zb")
            for v in (1, 2, 3)
        ],
    )
    assert 0 < counts["errors"] < counts["cases"]


# ---- data_parallel.js ----------------------------------------------------------------------


@pytest.mark.slow
def test_data_parallel_model_parity():
    from minipar.cost.chapters.data_parallel import bucket_sizes
    from minipar.widgets.data_parallel import dp_step_model, zero_memory_model

    assert_parity(
        "data_parallel",
        "bucketSizes",
        bucket_sizes,
        [
            dict(total_bytes=t, bucket_bytes=b)
            for t in (1, 1e6, 2.6e9, 0)
            for b in (7, 3e5, 25 * 2**20, 1e12, -1)
            if t / b < 1e6
        ],
    )
    links = {name: {"alpha": L.alpha, "bandwidth": L.bandwidth} for name, L in LINKS_()}
    cases = [
        dict(params_m=pm, ranks=n, intra=i, inter=o, bucket_mb=bm, overlap=ov, compute_ms=c)
        for pm in (1, 1300, 70000, 0)
        for n in (1, 2, 3, 8, 12, 16, 64, 24)
        for i, o in (("nvlink4-h100", "ib-ndr400"), ("pcie5-x16", "eth-100g"))
        for bm in (0.01, 1, 25, 1e4)
        for ov in (True, False)
        for c in (5, 300)
    ]
    counts = assert_parity(
        "data_parallel",
        "dpStepModel",
        dp_step_model,
        cases,
        js_args=lambda c: [
            c["params_m"],
            c["ranks"],
            links[c["intra"]],
            links[c["inter"]],
            c["bucket_mb"],
            c["overlap"],
            c["compute_ms"],
        ],
    )
    assert 0 < counts["errors"] < counts["cases"]
    assert_parity(
        "data_parallel",
        "zeroMemoryModel",
        zero_memory_model,
        [
            dict(params_b=p, d=d, optimizer=o)
            for p in (0.1, 7.5, 175)
            for d in (1, 3, 64)
            for o in ("adam-mixed", "adam-fp32", "sgd-fp32", "lion")
        ],
    )


def LINKS_():
    from minipar.cost.kernels.hardware import LINKS

    return LINKS.items()


def test_parity_check_catches_a_dp_model_that_ignores_overlap():
    """Negative control: a Python twin that never overlaps (the classic 'all-reduce after
    backward') differs from the JavaScript model exactly where overlap is on."""
    from minipar.widgets.data_parallel import dp_step_model

    no_overlap = lambda **kw: dp_step_model(**{**kw, "overlap": False})
    with pytest.raises(AssertionError, match="1 of 2 cases"):
        assert_parity(
            "data_parallel",
            "dpStepModel",
            no_overlap,
            [
                dict(params_m=1300, ranks=64, bucket_mb=25, overlap=ov, compute_ms=300)
                for ov in (True, False)
            ],
            js_args=lambda c: [
                c["params_m"],
                c["ranks"],
                {"alpha": 2e-6, "bandwidth": 450e9},
                {"alpha": 5e-6, "bandwidth": 50e9},
                c["bucket_mb"],
                c["overlap"],
                c["compute_ms"],
            ],
        )


@pytest.mark.parametrize(
    "slug,name,config,impossible,message",
    [
        (
            "memory_time",
            "memory",
            "memory_config",
            {"t": 7},
            "heads (96) must be divisible by t (7)",
        ),
        (
            "memory_time",
            "memory",
            "memory_config",
            {"preset": "custom", "p": 5},
            "layers (96) must be divisible by p (5)",
        ),
        (
            "data_parallel",
            "dp-step",
            "dp_config",
            {"ranks": 12},
            "ranks n (12) must be a multiple of gpus_per_node (8) beyond one node",
        ),
        ("data_parallel", "zero-memory", None, {"d": 0}, "d (0) must be at least 1"),
        ("data_parallel", "zero-memory", None, {"d": 2.5}, "d (2.5) must be a whole number"),
        ("memory_time", "memory", "memory_config", {"s": 2.5}, "s (2.5) must be a whole number"),
        ("memory_time", "memory", "memory_config", {"b": 0}, "b (0) must be at least 1"),
        (
            "memory_time",
            "memory",
            "memory_config",
            {"preset": "custom", "V": -1},
            "V (-1) must be at least 1",
        ),
    ],
)
def test_explorer_default_views_and_messages(slug, name, config, impossible, message):
    import importlib

    mod = importlib.import_module(f"minipar.widgets.{slug}")
    cfg = getattr(mod, config)() if config else {}
    (k1, default), (k2, bad) = js_call(
        slug, [("drawExplorer", [name, {}, cfg]), ("drawExplorer", [name, impossible, cfg])]
    )
    assert default["error"] is None and "<svg" in default["html"] and "</svg>" in default["html"]
    assert bad["error"] == message and "minipar-explorer-message" in bad["html"]


def test_explorer_input_rules_are_the_python_twins():
    """The memory calculator's s, b, V and the ZeRO explorer's d: the JavaScript refuses what
    the Python twin refuses, with the same message (invalid inputs included)."""
    from minipar.widgets.data_parallel import zero_memory_model
    from minipar.widgets.memory_time import check_inputs

    cases = [dict(s=s, b=b, V=V) for s in (2048, 0, 2.5) for b in (1, 3, -1) for V in (51200, 0)]
    counts = assert_parity("memory_time", "checkInputs", check_inputs, cases)
    assert 0 < counts["errors"] < counts["cases"]
    cases = [dict(params_b=7.5, d=d, optimizer="adam-mixed") for d in (1, 3, 64, 0, -2, 2.5)]
    counts = assert_parity("data_parallel", "zeroMemoryModel", zero_memory_model, cases)
    assert 0 < counts["errors"] < counts["cases"]


def test_three_d_zero3_collectives_parity():
    """The 3D explorer's ZeRO-3 collectives equal minipar.cost.planner.three_d's: one all-gather per
    algorithm (flat ring across nodes, hierarchical, a ring inside a node), and whole layouts
    with ``zero3_collectives`` set, an unknown algorithm refused with the same message."""
    from minipar.cost.planner import three_d as planner
    from minipar.widgets.three_d import cluster_config as js_cluster

    clusters = [
        planner.cluster(64, 8),
        planner.cluster(96, 6, "H100-SXM"),
        planner.cluster(384, 8, inter="opa-jean-zay"),
        planner.cluster(64, 8, "H100-SXM", intra="ib-hdr200"),  # intra slower
        planner.cluster(64, 8, intra="ib-hdr200", inter="ib-hdr200"),
    ]  # a tie
    cases = [
        dict(nbytes=s, n=n, t=t, cluster=cl, algorithm=al)
        for cl in clusters
        for n in (1, 2, 6, 8, 16)
        for t in (1, 2, 4)
        for s in (0, 3e8)
        for al in ("flat-ring", "hierarchical", "tree")
        if t * n <= cl.gpus
    ]
    counts = assert_parity(
        "three_d",
        "zero3CollectiveSeconds",
        planner.zero3_collective_seconds,
        cases,
        js_args=lambda c: [c["nbytes"], c["n"], c["t"], js_cluster(c["cluster"]), c["algorithm"]],
    )
    assert 0 < counts["errors"] < counts["cases"]

    gpt = planner.ModelShape(12, 768, 12, 1024, 50304)
    cl = planner.cluster(64, 8)

    def evaluate(tp, dp, recompute, algorithm):
        return planner.evaluate(
            gpt,
            cl,
            planner.Layout(128, tp=tp, pp=1, dp=dp, micro_batch=1, recompute=recompute, zero=3),
            planner.Options(zero3_collectives=algorithm),
        ).as_dict()

    model = {"layers": 12, "hidden": 768, "heads": 12, "seq": 1024, "vocab": 50304}
    layouts = [
        dict(tp=t, dp=64 // t, recompute=rc, algorithm=al)
        for t in (1, 2, 4)
        for rc in ("full", "selective")
        for al in ("flat-ring", "hierarchical", "tree")
    ]
    counts = assert_parity(
        "three_d",
        "planEvaluate",
        evaluate,
        layouts,
        js_args=lambda c: [
            model,
            js_cluster(cl),
            dict(
                global_batch=128,
                tp=c["tp"],
                pp=1,
                dp=c["dp"],
                micro_batch=1,
                chunks=1,
                recompute=c["recompute"],
                sp=False,
                zero=3,
            ),
            dict(
                grad_reduce_bytes=4,
                dp_overlap=True,
                headroom=0.1,
                zero3_collectives=c["algorithm"],
            ),
        ],
    )
    assert 0 < counts["errors"] < counts["cases"]


def test_three_d_plan_check_cp_ep_rules_say_what_python_says():
    """planCheck's context- and expert-parallel rules equal minipar.cost.planner.three_d.check's, message
    for message (assert_parity compares only that both refuse, so the messages are compared here):
    cp and ep integers >= 1, seq divisible by 2·cp, ep only on an MoE model whose experts and d it
    divides, gpus = t·cp·p·d; valid MoE layouts pass in both."""
    from dataclasses import asdict

    from minipar.cost.planner import three_d as planner

    moe = planner.MODELS["mixtral-8x7b"]
    dense = planner.ModelShape(12, 768, 12, 1020, 50304)  # 1020 % 2·cp fails at cp 4
    cl = planner.cluster(64, 8)
    cases = [
        (m, t, p, d, cp, ep)
        for m in (moe, dense)
        for t, p in ((1, 1), (2, 2), (4, 1))
        for cp in (1, 2, 4, 0)
        for ep in (1, 2, 4, 3)
        for d in {max(1, 64 // (t * p * max(cp, 1))), 3}
    ]
    want = []
    for m, t, p, d, cp, ep in cases:
        try:
            planner.check(m, cl, planner.Layout(48, t, p, d, 1, sp=t > 1, cp=cp, ep=ep))
            want.append(("ok", None))
        except ValueError as e:
            want.append(("error", str(e)))
    link = lambda L: {"name": L.name, "alpha": L.alpha, "bandwidth": L.bandwidth}
    js_cl = {
        "gpus": cl.gpus,
        "gpus_per_node": cl.gpus_per_node,
        "intra": link(cl.intra),
        "inter": link(cl.inter),
    }
    got = js_call(
        "three_d",
        [
            (
                "planCheck",
                [
                    {k: v for k, v in asdict(m).items() if k != "note"},
                    js_cl,
                    asdict(planner.Layout(48, t, p, d, 1, sp=t > 1, cp=cp, ep=ep)),
                ],
            )
            for m, t, p, d, cp, ep in cases
        ],
    )
    assert got == want
    rules = {w.split(" (")[0] for k, w in want if k == "error"}
    assert {"cp", "seq", "ep", "gpus"} <= rules and sum(k == "ok" for k, _ in want) >= 10


def test_parity_compares_the_words_of_a_refusal():
    """assert_parity fails when both sides refuse an input with different messages (a whole
    float's trailing .0, the one difference between the languages, is folded)."""
    from explorer_parity_support import _message, assert_parity

    from minipar.cost.planner import three_d as planner

    def other_words(**case):
        raise ValueError("zero3_collectives must be something else")

    case = dict(nbytes=1.0, n=2, t=1, cl=planner.cluster(16, 8), algorithm="tree")
    js = lambda c: [1.0, 2, 1, {"gpus": 16, "gpus_per_node": 8, "intra": {}, "inter": {}}, "tree"]
    with pytest.raises(AssertionError, match="python says"):
        assert_parity("three_d", "zero3CollectiveSeconds", other_words, [case], js_args=js)
    assert _message("gradient bytes (1000000.0) and (0.5)") == "gradient bytes (1000000) and (0.5)"
