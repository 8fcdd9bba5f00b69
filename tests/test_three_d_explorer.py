"""The layout explorer's JavaScript equals minipar.cost.three_d.evaluate, run under Node.js."""
import itertools

import pytest

from minipar.cost import three_d as planner
from minipar.widgets.parity import assert_parity, js_call, node_available
from minipar.widgets.three_d import plan_config

pytestmark = pytest.mark.skipif(not node_available(), reason="Node.js (/usr/bin/node) not installed")


def _js_cluster(cl):
    link = lambda L: {"name": L.name, "alpha": L.alpha, "bandwidth": L.bandwidth}
    return {"gpus": cl.gpus, "gpus_per_node": cl.gpus_per_node, "peak": cl.peak,
            "memory_bytes": cl.gpu.memory_bytes, "intra": link(cl.intra), "inter": link(cl.inter)}


def _js_model(m):
    return {"layers": m.layers, "hidden": m.hidden, "heads": m.heads, "seq": m.seq,
            "vocab": m.vocab}


def _evaluate(m, cl, global_batch, tp, pp, dp, micro_batch, chunks, recompute, sp, zero, eff):
    return planner.evaluate(m, cl, global_batch, tp=tp, pp=pp, dp=dp, micro_batch=micro_batch,
                            chunks=chunks, recompute=recompute, sp=sp, zero=zero,
                            gemm_efficiency=eff).as_dict()


def _cases():
    small = planner.ModelShape(12, 768, 12, 1024, 50304)       # non-powers of two: t = 3, p = 3
    gpt3 = planner.MODELS["gpt3-175b"]
    clusters = [planner.cluster(24, 8), planner.cluster(24, 6, "H100-SXM", intra="pcie5-x16"),
                planner.cluster(1024, 8), planner.cluster(96, 8, inter="eth-100g")]
    out = []
    for cl in clusters:
        for m in (small, gpt3):
            for t, p in itertools.product((1, 2, 3, 4, 8, 16), (1, 2, 3, 4, 6, 8)):
                d = max(1, cl.gpus // (t * p))
                for b, v, rc, sp, z in ((1, 1, "selective", True, 1), (2, 2, "none", False, 0),
                                        (1, 1, "full", False, 3), (4, 4, "selective", True, 2)):
                    out.append(dict(m=m, cl=cl, global_batch=48 if cl.gpus < 100 else 1536,
                                    tp=t, pp=p, dp=d, micro_batch=b, chunks=v, recompute=rc,
                                    sp=sp, zero=z, eff=0.6))
    return out


def test_plan_evaluate_parity():
    cases = _cases()
    counts = assert_parity("three_d", "planEvaluate", _evaluate, cases,
                           js_args=lambda c: [_js_model(c["m"]), _js_cluster(c["cl"]),
                                              *[c[k] for k in ("global_batch", "tp", "pp", "dp",
                                                               "micro_batch", "chunks",
                                                               "recompute", "sp", "zero",
                                                               "eff")]])
    assert counts["cases"] > 500 and 0 < counts["errors"] < counts["cases"] - 100


def test_dp_allreduce_and_bubble_parity():
    from minipar.cost.pipeline_parallel import bubble_fraction_of_total, bubble_relative_to_ideal
    cases = [dict(schedule=s, p=p, m=m, v=v) for s in ("gpipe", "1f1b", "interleaved", "x")
             for p in (1, 2, 3, 5) for m in (1, 3, 6, 10) for v in (1, 2, 3)]
    assert_parity("three_d", "bubbleRelativeToIdeal", bubble_relative_to_ideal, cases)
    assert_parity("three_d", "bubbleFractionOfTotal", bubble_fraction_of_total, cases)
    cl = planner.cluster(96, 8)
    assert_parity("three_d", "dpAllreduceSeconds",
                  lambda nbytes, d, t: planner.dp_allreduce_seconds(nbytes, d, t, cl),
                  [dict(nbytes=s, d=d, t=t) for s in (1e6, 3e9) for d in (1, 2, 3, 4, 12, 24)
                   for t in (1, 2, 4, 8)],
                  js_args=lambda c: [c["nbytes"], c["d"], c["t"], _js_cluster(cl)])


def test_default_view_draws_and_bad_input_says_why():
    cfg = plan_config()
    (kind, html), (kind2, msg) = js_call("three_d", [
        ("drawExplorer", ["plan", {}, cfg]),
        ("drawExplorer", ["plan", {"t": 5}, cfg]),
    ])
    assert kind == "ok" and "<svg" in html["html"] and "MFU" in html["html"]
    assert kind2 == "ok" and msg["error"] == "gpus (1024) must be divisible by t·p (5·8)"
    assert "minipar-explorer-message" in msg["html"]
