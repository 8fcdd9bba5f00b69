"""The layout explorer's JavaScript equals minipar.cost.planner.three_d (evaluate, cluster, the compute
roofline, the cost per token), run under Node.js, on valid and invalid inputs alike."""

import itertools
import re
from dataclasses import asdict

import pytest
from explorer_parity_support import assert_parity, js_call, mismatch, node_available

from minipar.cost.kernels import compute
from minipar.cost.kernels.hardware import GPUS
from minipar.cost.planner import three_d as planner
from minipar.cost.planner.term_table import TERMS, TIME_GROUPS
from minipar.cost.planner.three_d_terms import options
from minipar.widgets.three_d import PRESET_LAYOUTS, cluster_config, gpu_config, plan_config

pytestmark = pytest.mark.skipif(
    not node_available(), reason="Node.js (/usr/bin/node) not installed"
)


def _js_model(m):
    """Every ModelShape field the planner reads (MoE, SwiGLU and GQA ones included)."""
    return {k: v for k, v in asdict(m).items() if k != "note"}


def _evaluate(
    m,
    cl,
    global_batch,
    tp,
    pp,
    dp,
    micro_batch,
    chunks,
    recompute,
    sp,
    zero,
    grb,
    overlap,
    headroom,
):
    lay = planner.Layout(global_batch, tp, pp, dp, micro_batch, chunks, recompute, sp, zero)
    planner.check(m, cl, lay)  # the layout's rules first, as planEvaluate checks them
    opt = planner.Options(grad_reduce_bytes=grb, dp_overlap=overlap, headroom=headroom)
    return planner.evaluate(m, cl, lay, opt).as_dict()


def _cases():
    small = planner.ModelShape(12, 768, 12, 1024, 50304)  # non-powers of two: t = 3, p = 3
    gpt3 = planner.MODELS["gpt3-175b"]
    clusters = [
        planner.cluster(24, 8),
        planner.cluster(24, 6, "H100-SXM", intra="pcie5-x16"),
        planner.cluster(1024, 8),
        planner.cluster(96, 8, "H200", inter="eth-100g"),
        planner.cluster(384, 8, inter="opa-jean-zay", gemm_efficiency=0.5),
    ]
    out = []
    for cl in clusters:
        for m in (small, gpt3):
            for t, p in itertools.product((1, 2, 3, 4, 8, 16), (1, 2, 3, 4, 6, 8)):
                d = max(1, cl.gpus // (t * p))
                for b, v, rc, sp, z, grb, ov, hr in (
                    (1, 1, "selective", True, 1, 4, True, 0.1),
                    (2, 2, "none", False, 0, 2, False, 0.0),
                    (1, 1, "full", False, 3, 4, True, 0.1),
                    (1, 2, "full", True, 3, 2, False, 0.2),
                    (4, 4, "selective", True, 2, 4, True, 0.1),
                    (1, 1, "none", False, 0, 0, True, 1.5),
                ):  # invalid options
                    out.append(
                        dict(
                            m=m,
                            cl=cl,
                            global_batch=48 if cl.gpus < 100 else 1536,
                            tp=t,
                            pp=p,
                            dp=d,
                            micro_batch=b,
                            chunks=v,
                            recompute=rc,
                            sp=sp,
                            zero=z,
                            grb=grb,
                            overlap=ov,
                            headroom=hr,
                        )
                    )
    return out


@pytest.mark.slow
def test_plan_evaluate_parity():
    cases = _cases()
    counts = assert_parity(
        "three_d",
        "planEvaluate",
        _evaluate,
        cases,
        js_args=lambda c: [
            _js_model(c["m"]),
            cluster_config(c["cl"]),
            {
                "global_batch": c["global_batch"],
                **{k: c[k] for k in ("tp", "pp", "dp", "micro_batch", "chunks")},
                **{k: c[k] for k in ("recompute", "sp", "zero")},
            },
            {"grad_reduce_bytes": c["grb"], "dp_overlap": c["overlap"], "headroom": c["headroom"]},
        ],
    )
    assert counts["cases"] > 1000 and 100 < counts["errors"] < counts["cases"] - 300


def test_compute_roofline_parity():
    g = GPUS["A100-80GB"]
    kw = dict(
        peak=g.peak_flops["bf16"], efficiency=g.gemm_efficiency, hbm=g.hbm_bandwidth, sms=g.sms
    )
    cases = [
        dict(M=M, N=N, K=K, batch=n)
        for M in (1, 300, 2048)
        for N in (64, 2304, 6912)
        for K in (96, 12288)
        for n in (1, 48)
    ] + [dict(M=0, N=1, K=1, batch=1)]
    assert_parity(
        "three_d",
        "gemmSeconds",
        lambda M, N, K, batch: compute.gemm_seconds(M, N, K, batch=batch, **kw),
        cases,
        js_args=lambda c: [
            c["M"],
            c["N"],
            c["K"],
            kw["peak"],
            kw["efficiency"],
            kw["hbm"],
            kw["sms"],
            c["batch"],
        ],
    )
    layer = [
        dict(b=b, s=s, h=h, a=a, t=t, sp=sp, rc=rc)
        for b in (1, 3)
        for s in (128, 2048)
        for h, a in ((768, 12), (12288, 96))
        for t in (1, 3, 4)
        for sp in (False, True)
        for rc in ("none", "selective", "full", "x")
    ]
    counts = assert_parity(
        "three_d",
        "layerSeconds",
        lambda b, s, h, a, t, sp, rc: (
            compute.layer_seconds(b, s, h, a, g, t, sp=sp, recompute=rc)._asdict()
            | {"total_s": compute.layer_seconds(b, s, h, a, g, t, sp=sp, recompute=rc).total_s}
        ),
        layer,
        js_args=lambda c: [c["b"], c["s"], c["h"], c["a"], gpu_config(g), c["t"], c["sp"], c["rc"]],
    )
    assert counts["errors"] > 0
    assert_parity(
        "three_d",
        "logitsSeconds",
        lambda b, s, h, V, t: compute.logits_seconds(b, s, h, V, g, t),
        [
            dict(b=b, s=2048, h=h, V=V, t=t)
            for b in (1, 2)
            for h in (2304, 12288)
            for V in (51200, 250880)
            for t in (1, 3, 8)
        ],
        js_args=lambda c: [c["b"], c["s"], c["h"], c["V"], gpu_config(g), c["t"]],
    )


def test_cluster_and_price_parity_with_messages():
    """planCluster and dollarsPerMillionTokens follow the Python rules and say the same thing
    for the same bad value (0 GPUs per node, a negative price, a non-multiple of the node)."""
    links = plan_config()["links"]
    cases = [
        (8, 8, "A100-80GB", None, None, None),
        (1024, 8, "H100-SXM", None, "eth-100g", 0.5),
        (12, 8, "A100-80GB", None, None, None),
        (8, 0, "A100-80GB", None, None, None),
        (0, 8, "H200", None, None, None),
        (16, 8, "A100-80GB", "x", None, None),
        (16, 8, "A100-80GB", None, None, 1.5),
    ]
    js = js_call(
        "three_d",
        [
            ("planCluster", [n, g, plan_config()["gpus"][name], links, i, e, eff])
            for n, g, name, i, e, eff in cases
        ],
    )
    for (n, g, name, i, e, eff), (kind, got) in zip(cases, js):
        try:
            cl = planner.cluster(n, g, name, i, e, gemm_efficiency=eff)
        except ValueError as err:
            assert (kind, got) == ("error", str(err))
            continue
        assert kind == "ok"
        assert (got["intra"]["name"], got["inter"]["name"], got["gpu"]["gemm_efficiency"]) == (
            cl.intra.name,
            cl.inter.name,
            cl.gpu.gemm_efficiency,
        )
    prices = [(10.0, 8, 16384, 2.0), (10.0, 8, 16384, -1.0), (0.0, 8, 16384, 2.0)]
    js = js_call("three_d", [("dollarsPerMillionTokens", list(c)) for c in prices])
    for c, (kind, got) in zip(prices, js):
        try:
            want = ("ok", planner.dollars_per_million_tokens(*c))
        except ValueError as err:
            want = ("error", str(err))
        assert (kind, got) == want


def test_dp_allreduce_and_bubble_parity():
    from minipar.cost.chapters.pipeline_parallel import (
        bubble_fraction_of_total,
        bubble_relative_to_ideal,
    )

    cases = [
        dict(schedule=s, p=p, m=m, v=v)
        for s in ("gpipe", "1f1b", "interleaved", "x")
        for p in (1, 2, 3, 5)
        for m in (1, 3, 6, 10)
        for v in (1, 2, 3)
    ]
    assert_parity("three_d", "bubbleRelativeToIdeal", bubble_relative_to_ideal, cases)
    assert_parity("three_d", "bubbleFractionOfTotal", bubble_fraction_of_total, cases)
    cl = planner.cluster(96, 8)
    assert_parity(
        "three_d",
        "dpAllreduceSeconds",
        lambda nbytes, d, t: planner.dp_allreduce_seconds(nbytes, d, t, cl),
        [
            dict(nbytes=s, d=d, t=t)
            for s in (1e6, 3e9)
            for d in (1, 2, 3, 4, 12, 24)
            for t in (1, 2, 4, 8)
        ],
        js_args=lambda c: [c["nbytes"], c["d"], c["t"], cluster_config(cl)],
    )


def test_every_preset_draws_its_layout_and_bad_input_says_why():
    """Each preset opens on a valid layout (BLOOM and MT-NLG used to open on an error); A100
    shows NVLink 3 and HDR 200; invalid inputs name the rule and the value."""
    calls = [("drawExplorer", ["plan", {"model": k}, plan_config()]) for k in PRESET_LAYOUTS]
    bad = [
        ({"layout": "custom", "t": 5}, "gpus (1024) must be divisible by t·p (5·16)"),
        ({"layout": "custom", "t": 0}, "t (0) must be at least 1"),
        ({"layout": "custom", "p": 0}, "p (0) must be at least 1"),
        ({"price": -1}, "$ per GPU-hour (-1) must be at least 0"),
        ({"gpn": 0}, "GPUs per node (0) must be at least 1"),
        ({"layout": "custom", "gpus": 1001}, "gpus (1001) must be a multiple of gpus_per_node (8)"),
        (
            {"zero": 2},
            "ZeRO stage (2) needs p = 1 (its sharded gradients would be reduced "
            "every micro-batch under PP; use ZeRO-1 or ZeRO-3), got p (16)",
        ),
    ]
    calls += [("drawExplorer", ["plan", v, plan_config()]) for v, _ in bad]
    got = js_call("three_d", calls)
    for (kind, out), name in zip(got[: len(PRESET_LAYOUTS)], PRESET_LAYOUTS):
        assert kind == "ok" and out["error"] is None, (name, out["error"])
        assert "<svg" in out["html"] and "MFU" in out["html"]
    assert "nvlink3-a100 300.00 GB/s per direction" in got[0][1]["html"]
    assert "ib-hdr200 25.00 GB/s per direction" in got[0][1]["html"]
    for (kind, out), (_, message) in zip(got[len(PRESET_LAYOUTS) :], bad):
        assert kind == "ok" and out["error"] == message
        assert "minipar-explorer-message" in out["html"]
    # the Python rules say the same for the same values
    with pytest.raises(ValueError, match=r"gpus \(1024\) and gpus_per_node \(0\)"):
        planner.cluster(1024, 0)
    with pytest.raises(ValueError, match="the price >= 0"):
        planner.dollars_per_million_tokens(1.0, 8, 100, -1)


def test_zero3_collectives_control_changes_the_zero3_layout_only():
    """The explorer's "ZeRO-3 collectives across nodes" control reaches the model: a ZeRO-3
    layout spanning nodes draws differently with the flat ring and the hierarchical algorithm,
    a ZeRO-1 layout draws the same, and an unknown algorithm is refused by name."""
    z3 = {
        "layout": "custom",
        "gpus": 768,
        "t": 1,
        "p": 1,
        "b": 2,
        "zero": 3,
        "recompute": "full",
        "sp": False,
    }
    z1 = {"zero": 1}
    calls = [
        ("drawExplorer", ["plan", dict(v, z3=a), plan_config()])
        for v in (z3, z1)
        for a in ("flat-ring", "hierarchical")
    ]
    calls.append(("drawExplorer", ["plan", dict(z3, z3="tree"), plan_config()]))
    got = js_call("three_d", calls)
    assert all(kind == "ok" for kind, _ in got), got
    (_, f3), (_, h3), (_, f1), (_, h1), (_, bad) = got
    assert f3["error"] is None and h3["error"] is None and f3["html"] != h3["html"]
    assert f1["html"] == h1["html"]
    assert bad["error"] == "zero3_collectives ('tree') must be one of hierarchical, flat-ring"


def test_fp8_and_compiled_controls_reach_the_explorers_plan():
    """The explorer's FP8 and compiled-step controls change the chosen step like the planner's
    options (a shorter step on an H100), and FP8 on an A100 is refused by its rule."""
    step = re.compile(r"step <b>([\d.]+) (m?s)</b>")
    h100 = {"layout": "custom", "gpus": 64, "gpu": "H100-SXM", "t": 1, "p": 1, "batch": 512}
    h100 |= {"model": "llama3-8b", "b": 1, "zero": 1, "recompute": "full"}
    calls = [
        ("drawExplorer", ["plan", h100, plan_config()]),
        ("drawExplorer", ["plan", dict(h100, fp8="delayed", compiled=True), plan_config()]),
        ("drawExplorer", ["plan", dict(h100, gpu="A100-80GB", fp8="current"), plan_config()]),
    ]
    (_, bf16), (_, fp8), (_, a100) = js_call("three_d", calls)
    assert bf16["error"] is None and fp8["error"] is None, (bf16["error"], fp8["error"])

    def seconds(html):
        value, unit = step.search(html).groups()
        return float(value) / (1000 if unit == "ms" else 1)

    assert seconds(fp8["html"]) < 0.8 * seconds(bf16["html"])
    assert "fp8 needs a GPU with FP8 tensor cores" in (a100["error"] or a100["html"])


def test_tp_overlap_control_reaches_the_explorers_plan():
    """The explorer's TP-overlap control shortens a TP-8 step with SP as the planner's
    tp_overlap does ("the era's" is on for an H100, "off" exposes every collective), and its
    rowwise choice is accepted."""
    step = re.compile(r"step <b>([\d.]+) (m?s)</b>")
    lay = {"layout": "custom", "gpus": 64, "gpu": "H100-SXM", "t": 8, "p": 1, "batch": 64}
    lay |= {"model": "llama3-70b", "b": 1, "zero": 1, "recompute": "full", "sp": True}
    calls = [
        ("drawExplorer", ["plan", dict(lay, tp_overlap="off"), plan_config()]),
        ("drawExplorer", ["plan", dict(lay, tp_overlap="on"), plan_config()]),
        ("drawExplorer", ["plan", dict(lay, tp_overlap="on", fp8="rowwise"), plan_config()]),
        ("drawExplorer", ["plan", lay, plan_config()]),
    ]
    got = [r for _, r in js_call("three_d", calls)]
    assert all(r["error"] is None for r in got), [r["error"] for r in got]
    plain, over, rowwise, era = (float(step.search(r["html"]).group(1)) for r in got)
    assert over < plain and rowwise < over and era == over


# cp/ep shapes: a dense GPT, a dense SwiGLU + GQA one (Llama-style), a small MoE and Mixtral, and a
# sequence (1020) that 2·cp = 8 does not divide
_DENSE = planner.ModelShape(12, 768, 12, 1024, 50304)
_SWIGLU_GQA = planner.ModelShape(8, 768, 12, 1020, 32000, ffn=2048, mlp_matrices=3, kv_heads=4)
_MOE = planner.ModelShape(
    8, 768, 12, 1024, 50304, experts=8, top_k=2, ffn=2048, mlp_matrices=3, kv_heads=4
)
_MIXTRAL = planner.MODELS["mixtral-8x7b"]
_DSV3_SMALL = planner.ModelShape(  # DeepSeek-V3's form at toy size: every MoE field set
    8,
    768,
    12,
    1024,
    32000,
    experts=16,
    top_k=4,
    ffn=256,
    mlp_matrices=3,
    norm="rmsnorm",
    bias=False,
    positions="rope",
    tied=False,
    dropout=0.0,
    shared_experts=1,
    dense_layers=1,
    dense_ffn=1024,
    node_limit=2,
    q_lora=96,
    kv_lora=64,
    qk_rope_dim=16,
    qk_nope_dim=32,
    v_head_dim=32,
    mtp_depth=1,
)
_GQA2 = planner.ModelShape(8, 768, 12, 1024, 32000, ffn=2048, mlp_matrices=3, kv_heads=2)  # t > kv
_LLAMA_SMALL = planner.ModelShape(
    8,
    768,
    12,
    1024,
    32000,
    ffn=2048,
    mlp_matrices=3,
    kv_heads=4,
    norm="rmsnorm",
    bias=False,
    positions="rope",
    tied=False,
)
_CP_EP_OPTIONS = (
    (1, 1, "selective", True, 1),
    (1, 1, "none", False, 0),
    (2, 2, "full", True, 3),
    (1, 1, "full", False, 2),
)  # b, v, recompute, sp, zero


def _cp_ep_cases():
    """Dense and MoE shapes, cp and ep in 1, 2, 4, t in 1, 2, 4, p in 1, 2, on one node's ring
    and across nodes (4 GPUs per node: cp and ep groups leave the node), plus broken inputs."""
    clusters = [planner.cluster(64, 8), planner.cluster(64, 4, "H100-SXM")]
    out = []
    for cl, m in itertools.product(
        clusters, (_DENSE, _SWIGLU_GQA, _MOE, _MIXTRAL, _GQA2, _LLAMA_SMALL, _DSV3_SMALL)
    ):
        for t, cp, ep, p in itertools.product((1, 2, 4), (1, 2, 4), (1, 2, 4), (1, 2)):
            for b, v, rc, sp, z in _CP_EP_OPTIONS:
                out.append(
                    dict(
                        m=m,
                        cl=cl,
                        tp=t,
                        pp=p,
                        dp=cl.gpus // (t * cp * p),
                        cp=cp,
                        ep=ep,
                        micro_batch=b,
                        chunks=v,
                        recompute=rc,
                        sp=sp or (m.experts > 1 and t > 1),  # Megatron: MoE + TP needs SP
                        zero=z,
                    )
                )
    cl = clusters[0]
    for cp, ep, d in ((0, 1, 8), (2, 0, 8), (-1, 2, 8), (2, 1, 32), (1, 2, 6), (1, 3, 8)):
        out.append(
            dict(
                m=_MOE,
                cl=cl,
                tp=2,
                pp=2,
                dp=d,
                cp=cp,
                ep=ep,
                micro_batch=1,
                chunks=1,
                recompute="selective",
                sp=True,
                zero=1,
            )
        )  # cp/ep rules, gpus ≠ t·cp·p·d
    for z, c, m in itertools.product((0, 1, 3), (cl, clusters[1]), (_MOE, _DSV3_SMALL)):
        out.append(  # folding: ep = 8 over t·d; on 4-GPU nodes node-limited for _DSV3_SMALL
            dict(
                m=m,
                cl=c,
                tp=4,
                pp=8,
                dp=2,
                cp=1,
                ep=8,
                micro_batch=1,
                chunks=1,
                recompute="selective",
                sp=True,
                zero=z,
            )
        )  # 8 ranks, d = 2; 2 nodes of 4
    return out


def _evaluate_cp_ep(c):
    return planner.evaluate(
        c["m"],
        c["cl"],
        planner.Layout(
            64,
            tp=c["tp"],
            pp=c["pp"],
            dp=c["dp"],
            micro_batch=c["micro_batch"],
            chunks=c["chunks"],
            recompute=c["recompute"],
            sp=c["sp"],
            zero=c["zero"],
            cp=c["cp"],
            ep=c["ep"],
        ),
    ).as_dict()


def _js_evaluate_cp_ep(c, model=None):
    return (
        "planEvaluate",
        [model or _js_model(c["m"]), cluster_config(c["cl"]), asdict(_lay(c)), {}],
    )


def _expected(cases):
    out = []
    for c in cases:
        try:
            out.append(("ok", _evaluate_cp_ep(c)))
        except ValueError as e:
            out.append(("error", str(e)))
    return out


@pytest.mark.slow
def test_plan_evaluate_cp_ep_moe_parity_with_messages():
    """planEvaluate equals evaluate(...).as_dict() with context and expert parallelism on dense,
    SwiGLU + GQA and MoE shapes (every field: memory split into dense and expert states, the
    cp−1 key blocks, the ring's exposed K/V, the all-to-alls, the two DP groups, MFU with the
    active MLP), and refuses what Python refuses with the same message."""
    cases = _cp_ep_cases()
    want = _expected(cases)
    got = js_call("three_d", [_js_evaluate_cp_ep(c) for c in cases])
    bad = []
    for c, (wk, wv), (gk, gv) in zip(cases, want, got):
        if (wk, gk) == ("error", "error"):
            if wv != gv:
                bad.append(f"{c}: python {wv!r} != js {gv!r}")
        elif wk != gk or mismatch(wv, gv, 1e-9, "planEvaluate"):
            bad.append(f"{c}: python {wk} {wv!r}, js {gk} {gv!r}")
    assert not bad, f"{len(bad)} of {len(cases)} differ:\n" + "\n".join(bad[:5])
    ok = [w for k, w in want if k == "ok"]
    errors = {w for k, w in want if k == "error"}
    assert len(cases) > 1700 and len(ok) >= 800
    # the grid reaches every new term, and every new rule's message
    assert any(w["cp_seconds"] > 0 for w in ok) and any(w["ep_seconds"] > 0 for w in ok)
    assert {(w["cp"], w["ep"]) for w in ok} >= {(c, e) for c in (1, 2, 4) for e in (1, 2, 4)}
    for rule in (
        "must be integers >= 1",
        "must be divisible by 2·cp",
        "needs an MoE model whose experts",
        "must equal t·cp·p·d",
    ):
        assert any(rule in e for e in errors), rule


def test_moe_priced_as_dense_fails_the_parity_check():
    """Negative control for the bug this port fixed: the JavaScript given Mixtral without its
    MoE, SwiGLU and GQA fields (what the explorer computed before) differs from Python in every
    field that prices the experts, so the parity check above would catch it."""
    cases = [c for c in _cp_ep_cases() if c["m"] is _MIXTRAL and c["ep"] == 1 and c["cp"] == 2]
    want = _expected(cases)
    dense = {k: _js_model(_MIXTRAL)[k] for k in ("layers", "hidden", "heads", "seq", "vocab")}
    got = js_call("three_d", [_js_evaluate_cp_ep(c, dense) for c in cases])
    pairs = [(w, g) for (wk, w), (gk, g) in zip(want, got) if wk == gk == "ok"]
    assert len(pairs) > 20
    for w, g in pairs:
        for field in ("model_state_bytes", "compute_seconds", "step_seconds", "mfu"):
            assert mismatch(w[field], g[field], 1e-9, field), field


def test_moe_and_long_context_presets_draw_with_ep_and_cp():
    """Mixtral draws with ep = 2 and differently from ep = 1 (expert weights ÷ 2, all-to-alls);
    Llama 3 405B at 128K draws with cp = 2; ep on a dense model and a cp the GPUs do not
    allow are refused with the rule and the values, as Python refuses them."""
    mix = {"model": "mixtral-8x7b", "layout": "custom", "gpus": 64, "t": 4, "p": 2, "batch": 64}
    calls = [("drawExplorer", ["plan", dict(mix, ep=e), plan_config()]) for e in (1, 2)]
    calls.append(
        (
            "drawExplorer",
            [
                "plan",
                {
                    "model": "llama3-405b-128k",
                    "layout": "custom",
                    "gpus": 1024,
                    "t": 8,
                    "p": 16,
                    "batch": 32,
                    "cp": 2,
                },
                plan_config(),
            ],
        )
    )
    bad = [
        ({"ep": 2}, "ep (2) needs an MoE model whose experts (1) it divides"),
        ({"cp": 3}, "gpus (1024) must be divisible by t·cp·p (8·3·16)"),
        (
            {"cp": 3, "layout": "custom", "gpus": 1152},
            "seq (2048) must be divisible by 2·cp (6): zigzag chunks",
        ),
    ]
    calls += [("drawExplorer", ["plan", v, plan_config()]) for v, _ in bad]
    got = js_call("three_d", calls)
    (_, ep1), (_, ep2), (_, llama) = got[:3]
    for out in (ep1, ep2, llama):
        assert out["error"] is None and "<svg" in out["html"], out["error"]
    assert ep1["html"] != ep2["html"] and "ep = 2" in ep2["html"] and "ep = 1" in ep1["html"]
    assert "cp = 2" in llama["html"]
    for (kind, out), (_, message) in zip(got[3:], bad):
        assert kind == "ok" and out["error"] == message
    cl = planner.cluster(1024, 8)
    with pytest.raises(ValueError) as e:
        planner.check(planner.MODELS["gpt3-175b"], cl, planner.Layout(1536, 8, 16, 8, 1, ep=2))
    assert str(e.value) == bad[0][1]


# --- the named terms, one by one -----------------------------------------------------------


def _lay(c, global_batch=64):
    return planner.Layout(
        global_batch,
        c["tp"],
        c["pp"],
        c["dp"],
        c["micro_batch"],
        c["chunks"],
        c["recompute"],
        c["sp"],
        c["zero"],
        c["cp"],
        c["ep"],
    )


def _term_cases():
    """The cp/ep grid with ZeRO-3's options varied (flat ring or hierarchical, prefetch or not),
    FP8 (all three scalings), compiled steps, FlashAttention-3 (refused on the A100 alike) and
    TP overlapped with the GEMMs, DualPipe: every term is non-zero somewhere in it."""
    out = []
    for i, c in enumerate(_cp_ep_cases()):
        opt = [
            dict(),
            dict(zero3_collectives="flat-ring", zero3_ac_inside_unit=True),
            dict(zero3_overlap=False, overlap_grad_reduce=True),
            dict(dp_overlap=False, grad_reduce_bytes=2, moe_imbalance=1.3, moe_capacity=1.1),
            dict(precision="bf16-grads", attention="unfused"),
            dict(precision="megatron", attention="flash", headroom=0.05, cp_algorithm="all-gather"),
            dict(fp8="delayed", compiled=True, attention="fa3"),  # refused on the A100
            dict(fp8="current", precision="megatron", overlap_grad_reduce=True),
            dict(
                tp_overlap=True,
                precision="megatron",
                moe_imbalance=1.7,
                ep_overlap=True,
                dualpipe=True,
            ),
            dict(fp8="rowwise", tp_overlap=True, compiled=True),
        ][i % 10]
        out.append((c, opt))
    return out


def _python_terms(cases, term_fns=None):
    """(kind, the StepBreakdown as a dict, or the message) per case."""

    out = []
    for c, opt in cases:
        try:
            out.append(
                ("ok", planner.terms(c["m"], c["cl"], _lay(c), planner.Options(**opt)).as_dict())
            )
        except ValueError as e:
            out.append(("error", str(e)))
    return out


def _term_differences(cases, want, got):
    """One line per differing term: the case, the term's name, both values."""
    bad = []
    for (c, opt), (wk, wv), (gk, gv) in zip(cases, want, got):
        if wk != gk or (wk == "error" and wv != gv):
            bad.append(
                f"{c['m'].layers}L t={c['tp']} cp={c['cp']} ep={c['ep']}: python {wk} "
                f"{wv!r}, js {gk} {gv!r}"
            )
            continue
        if wk == "ok":
            for term, x in wv.items():
                if mismatch(x, gv.get(term), 1e-12, term):
                    bad.append(
                        f"term {term} (t={c['tp']} p={c['pp']} cp={c['cp']} ep={c['ep']} "
                        f"z={c['zero']} {opt}): python {x!r}, js {gv.get(term)!r}"
                    )
    return bad


@pytest.mark.slow
def test_plan_terms_parity_term_by_term():
    """Each named term of three_d_terms.breakdown (compute, tp, pp, cp, ep, zero3_exposed, the
    bubble, dp, dp_exposed, edp_exposed, embedding, optimizer, states, activations, the links)
    equals its JavaScript twin's (planTerms: termCompute, termTp, ...), compared term by term so
    a failure names the term; refusals compare word for word."""
    cases = _term_cases()
    want = _python_terms(cases)
    got = js_call(
        "three_d",
        [
            ("planTerms", [_js_model(c["m"]), cluster_config(c["cl"]), asdict(_lay(c)), opt])
            for c, opt in cases
        ],
    )
    bad = _term_differences(cases, want, got)
    assert not bad, f"{len(bad)} terms differ:\n" + "\n".join(bad[:8])
    ok = [w for k, w in want if k == "ok"]
    assert len(ok) >= 800
    for term in (
        "compute",
        "tp",
        "pp",
        "cp",
        "ep",
        "ep_overlap",
        "router",
        "permute",
        "grouped_gemm",
        "zero3_exposed",
        "bubble_relative",
        "dp",
        "dp_exposed",
        "edp_exposed",
        "embedding",
        "optimizer",
        "states",
        "activations",
        "dualpipe",
    ):
        assert any(w[term] > 0 for w in ok), term


def test_evaluate_is_the_sum_of_its_terms():
    """Config's fields are the breakdown's terms: per-step slot terms are m·(1 + r)·term, the
    step is m·slot·(1 + r) + exposed DP and EDP + embedding + optimizer, memory the memory terms'
    sum (states, FP8 weight copies, activations, DualPipe's second copy)."""
    for c, opt in _term_cases()[::37]:
        try:
            br = planner.terms(c["m"], c["cl"], _lay(c), planner.Options(**opt))
        except ValueError:
            continue
        cfg = planner.evaluate(c["m"], c["cl"], _lay(c), planner.Options(**opt))
        m, r = br.microbatches, br.bubble_relative
        assert cfg.seconds("tp") == m * (1 + r) * br.tp and cfg.seconds("compute") == m * br.compute
        assert cfg.step_seconds == pytest.approx(
            m * br.slot
            + br.bubble_seconds
            + br.dp_exposed
            + br.edp_exposed
            + br.embedding
            + br.optimizer,
            rel=1e-12,
        )
        memory = sum(br.values[t.name] for t in TERMS if t.where == "memory")
        assert memory == br.states + br.fp8_weights + br.activations + br.dualpipe
        assert cfg.bytes_per_gpu == memory and cfg.fits == br.fits


def test_a_wrong_term_is_named_by_the_parity_check():
    """Negative control: a Python twin whose embedding term forgets the ÷ t (the vocabulary-
    parallel split) differs from the JavaScript in that term, and the report names it."""
    from minipar.cost.planner import three_d_terms as terms_mod

    cases = [(c, opt) for c, opt in _term_cases() if c["pp"] == 2 and c["tp"] == 2][:40]
    got = js_call(
        "three_d",
        [
            ("planTerms", [_js_model(c["m"]), cluster_config(c["cl"]), asdict(_lay(c)), opt])
            for c, opt in cases
        ],
    )
    right = terms_mod.term_embedding

    def wrong(m_, cl, lay, opt):
        return right(m_, cl, planner.Layout(**{**asdict(lay), "tp": 1}), opt)

    terms_mod.term_embedding = wrong
    try:
        want = _python_terms(cases)
    finally:
        terms_mod.term_embedding = right
    bad = _term_differences(cases, want, got)
    assert bad and all(line.startswith("term embedding ") for line in bad), bad[:3]


def test_options_are_one_config_and_unknown_ones_are_named():
    """Options are three_d_terms.Options fields, the only way into evaluate; an unknown one (a
    typo) is refused by name in Python and JavaScript alike, as are the options' own rules."""
    m, cl = _DENSE, planner.cluster(8, 8)
    lay = planner.Layout(8, tp=2, pp=1, dp=4, micro_batch=1)
    for bad, message in (
        (
            dict(zero3_colectives="flat-ring"),
            "option ('zero3_colectives') must "
            "be one of grad_reduce_bytes, dp_overlap, headroom, zero3_overlap, "
            "zero3_collectives, attention, precision, zero3_ac_inside_unit, "
            "overlap_grad_reduce, cp_algorithm",
        ),
        (dict(headroom=1.5), "headroom (1.5) in [0, 1)"),
    ):
        with pytest.raises(ValueError) as e:
            planner.evaluate(m, cl, lay, options(**bad))
        assert message in str(e.value)
        ((kind, got),) = js_call(
            "three_d",
            [
                (
                    "planTerms",
                    [_js_model(m), cluster_config(cl), asdict(planner.Layout(8, 2, 1, 4, 1)), bad],
                )
            ],
        )
        assert kind == "error" and got == str(e.value)
    assert planner.evaluate(m, cl, lay) == planner.evaluate(m, cl, lay, planner.Options())
    with pytest.raises(TypeError, match="options .* must be an Options"):
        planner.evaluate(m, cl, lay, {"headroom": 0.1})
    with pytest.raises(TypeError, match="layout .* must be a Layout"):
        planner.evaluate(m, cl, 8)


def test_published_presets_open_on_their_layouts_and_fit():
    """BLOOM opens on its published (d, t, p) = (8, 4, 12) (72 pipeline units, b = 2, full
    recomputation, Jean Zay's Omni-Path) and Llama 3 405B at 128K on t = 8, cp = 16, p = 16,
    d = 8 of 16384 H100, which fits (flash attention and Megatron's recipe, the H100 era's); the
    same layout in Python fits too, and so does today's selective recomputation (norms and the
    MLP's activation recomputed). Negative controls: no recomputation does not fit, nor the 2021
    selective recomputation (the attention core only, nothing to drop under flash)."""
    calls = [
        ("drawExplorer", ["plan", {"model": k}, plan_config()])
        for k in ("bloom-176b", "llama3-405b-128k")
    ]
    (k1, bloom), (k2, llama) = js_call("three_d", calls)
    assert bloom["error"] is None and llama["error"] is None, (bloom["error"], llama["error"])
    assert "t = 4, cp = 1, p = 12, d = 8" in bloom["html"]
    assert "t = 8, cp = 16, p = 16, d = 8" in llama["html"] and "(fits in" in llama["html"]
    assert "flash attention, megatron precision" in llama["html"]
    m, cl = planner.MODELS["llama3-405b-128k"], planner.cluster(16384, 8, "H100-SXM")
    kw = dict(tp=8, pp=16, dp=8, cp=16, micro_batch=1, sp=True, zero=1)
    assert planner.evaluate(m, cl, planner.Layout(128, recompute="full", **kw)).fits
    assert planner.evaluate(m, cl, planner.Layout(128, recompute="selective", **kw)).fits
    assert not planner.evaluate(m, cl, planner.Layout(128, recompute="none", **kw)).fits
    core_only = planner.Options(recompute_modules=("core_attn",))
    assert not planner.evaluate(
        m, cl, planner.Layout(128, recompute="selective", **kw), core_only
    ).fits


def test_attention_precision_and_shape_controls_reach_the_model():
    """The attention, precision, KV-heads, MLP-width and MLP controls change the draw; a KV-head
    count that does not divide the heads is refused with Python's words."""
    base = {"model": "llama2-70b", "gpu": "H100-SXM"}
    variants = [
        {},
        {"attention": "unfused"},
        {"precision": "bf16-grads"},
        {"kv": 64},
        {"ffn": 22016},
        {"mlp": "gelu"},
    ]
    got = js_call(
        "three_d",
        [
            ("drawExplorer", ["plan", dict(base, **x), plan_config()])
            for x in variants + [{"kv": 5}]
        ],
    )
    htmls = [out["html"] for _, out in got[:-1]]
    assert all(out["error"] is None for _, out in got[:-1])
    assert len(set(htmls)) == len(htmls)  # each control changes the result
    assert "unfused attention" in htmls[1] and "bf16-grads precision" in htmls[2]
    with pytest.raises(ValueError) as e:
        replace_ = __import__("dataclasses").replace
        planner.check(
            replace_(planner.MODELS["llama2-70b"], kv_heads=5),
            planner.cluster(256, 8),
            planner.Layout(512, 8, 4, 8, 1),
        )
    assert got[-1][1]["error"] == str(e.value) == "heads (64) must be divisible by kv heads (5)"
    llama = {"model": "llama3-405b-128k"}
    (_, ring), (_, ag), (_, bad) = js_call(
        "three_d",
        [
            ("drawExplorer", ["plan", dict(llama, cpalg=a), plan_config()])
            for a in ("ring", "all-gather", "tree")
        ],
    )
    assert ring["error"] is None and ag["error"] is None and ring["html"] != ag["html"]
    assert bad["error"] == "cp_algorithm ('tree') must be one of ring, all-gather"


def test_measured_kernel_model_parity_h200():
    """The JavaScript compute twin follows the measured H200 kernel model of minipar.cost.kernels.compute
    (the additive GEMM rule with its per-call latency, the batched attention GEMMs at their own
    bandwidth, the flash kernel at its rate, the fixed per-layer overhead, Adam's bandwidth), for
    both attention kernels; an unknown kernel is refused with the same words."""
    g = GPUS["H200"]
    assert g.gemm_rule == "additive" and g.bmm_bandwidth
    layer = [
        dict(b=b, s=s, h=h, a=a, t=t, sp=sp, rc=rc, att=att)
        for b in (1, 4)
        for s in (2048, 8192)
        for h, a in ((2048, 16), (8192, 64))
        for t in (1, 8)
        for sp in (False, True)
        for rc in ("none", "selective", "full")
        for att in ("unfused", "flash", "fused")
    ]

    def py(b, s, h, a, t, sp, rc, att):
        lt = compute.layer_seconds(b, s, h, a, g, t, sp=sp, recompute=rc, attention=att)
        return lt._asdict() | {"total_s": lt.total_s}

    counts = assert_parity(
        "three_d",
        "layerSeconds",
        py,
        layer,
        js_args=lambda c: [
            c["b"],
            c["s"],
            c["h"],
            c["a"],
            gpu_config(g),
            c["t"],
            c["sp"],
            c["rc"],
            c["att"],
        ],
    )
    assert 0 < counts["errors"] < counts["cases"]
    assert_parity(
        "three_d",
        "attentionCoreAndMlpSeconds",
        lambda b, s, h, a, t, att: compute.attention_core_and_mlp_seconds(
            b, s, h, a, g, t, attention=att
        ),
        [
            dict(b=1, s=s, h=4096, a=32, t=t, att=att)
            for s in (1024, 8192)
            for t in (1, 4)
            for att in ("unfused", "flash")
        ],
        js_args=lambda c: [c["b"], c["s"], c["h"], c["a"], gpu_config(g), c["t"], c["att"]],
    )
    assert_parity(
        "three_d",
        "optimizerSeconds",
        lambda params: compute.optimizer_seconds(params, g),
        [dict(params=p) for p in (0, 1e9, -1)],
        js_args=lambda c: [c["params"], gpu_config(g)],
    )


def test_a_calibrated_gpu_profile_reaches_the_explorer(tmp_path):
    """plan_config(gpu_profile) adds the measured GPU under its name, and the explorer draws a
    layout on it; a profile that is not JSON is refused naming the file."""
    import json

    from minipar.cost.kernels.hardware import gpu_profile

    profile = tmp_path / "gpu.json"
    g = GPUS["H200"]
    profile.write_text(json.dumps(gpu_profile(g) | {"name": "my H200"}))
    config = plan_config(str(profile))
    assert config["gpus"]["my H200"]["hbm_bandwidth"] == g.hbm_bandwidth
    ((kind, out),) = js_call(
        "three_d", [("drawExplorer", ["plan", {"model": "gpt3-175b", "gpu": "my H200"}, config])]
    )
    assert out["error"] is None and "fits" in out["html"]
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        plan_config(str(bad))


def _every_term_cases():
    """Layouts on which, together, every time term of the table is above zero."""
    P, L = planner, planner.Layout
    h100 = planner.cluster(64, 8, "H100-SXM")
    return [
        P.evaluate(
            P.MODELS["llama3-70b"], h100, L(128, 8, 2, 4, 1, sp=True), P.Options(fp8="delayed")
        ),
        P.evaluate(P.MODELS["gpt3-175b"], P.cluster(1024, 8), L(1536, 8, 4, 32, 1, zero=3)),
        P.evaluate(
            P.MODELS["llama3-405b-128k"],
            P.cluster(16384, 8, "H100-SXM"),
            L(128, 8, 16, 8, 1, recompute="full", sp=True, cp=16),
            P.Options(cp_algorithm="all-gather"),
        ),
        P.evaluate(P.MODELS["mixtral-8x7b"], h100, L(256, 1, 1, 64, 1, zero=2, ep=8)),
        P.evaluate(  # all-to-alls overlapped at the SMs they take; 32 experts a rank, K = 8
            P.MODELS["deepseek-v3"],
            P.cluster(2048, 8, "H800"),
            L(16384, 1, 1, 2048, 1, ep=8),
            P.Options(ep_overlap=True),
        ),
    ]


@pytest.mark.slow
def test_chart_bars_sum_to_the_step_for_every_term():
    """The explorer's stacked chart (planStacks) has one stack per part of the step, read from
    the term table's group column, so each bar is its layout's step time with every term in it
    (the hand-listed chart dropped fp8_casts: 23.70 s of bars for a 24.56 s step), and its parts
    are Python's Config.group_seconds. Negative control: the cases make every time term count,
    so a bar without any one term would fall short of its step."""
    configs = _every_term_cases()
    ((kind, stacks),) = js_call("three_d", [("planStacks", [[c.as_dict() for c in configs]])])
    assert kind == "ok", stacks
    assert [s["name"] for s in stacks] == list(TIME_GROUPS)
    for i, c in enumerate(configs):
        bars = [s["values"][i] for s in stacks]
        assert sum(bars) == pytest.approx(c.step_seconds, rel=1e-12)
        assert bars == pytest.approx(list(c.group_seconds().values()), rel=1e-12)
    for t in TERMS:
        if t.where != "memory":  # dropping this term leaves some bar short of its step
            assert any(c.seconds(t.name) > 1e-6 * c.step_seconds for c in configs), t.name


@pytest.mark.slow
def test_fp8_params_parity():
    """fp8_params in JavaScript: the same states (no 16-bit copy of the FP8 linears) at ZeRO-1
    and ZeRO-3, and the same refusal without FP8 GEMMs."""
    m, cl = planner.MODELS["llama3-70b"], planner.cluster(64, 8, "H100-SXM")
    cases = [
        (planner.Layout(128, 8, 1, 8, 1, recompute="none", sp=True, zero=z), opt)
        for z in (1, 3)
        for opt in ({"fp8": "delayed", "fp8_params": True}, {"fp8_params": True})
    ]
    got = js_call(
        "three_d",
        [("planTerms", [_js_model(m), cluster_config(cl), asdict(lay), o]) for lay, o in cases],
    )
    for (lay, o), (kind, value) in zip(cases, got):
        try:
            want = planner.terms(m, cl, lay, planner.Options(**o)).values["states"]
        except ValueError as e:
            assert kind == "error" and value == str(e)
            continue
        assert kind == "ok" and value["states"] == pytest.approx(want, rel=1e-12)
