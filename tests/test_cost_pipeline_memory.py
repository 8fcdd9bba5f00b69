"""Activations in flight under the pipeline schedules the planner searches: a Llama layer's bytes
counted tensor by tensor, the interleaved schedule's micro-batch group (Llama 3's flexible N), what
the MLP keeps for its backward, and Llama 3 405B's 8K layout (Llama Team 2024, §3.3.2 and
Table 4: t = 8, cp = 1, p = 16, d = 128 on 16,384 H100, 2048 sequences of 8192 tokens, trained
without activation checkpointing)."""

import json
from dataclasses import asdict

import pytest
from explorer_parity_support import js_call, mismatch, node_available

from minipar.cli import main
from minipar.cost.chapters.memory_time import activation_bytes_per_layer
from minipar.cost.planner import three_d as planner
from minipar.cost.planner.compute_terms import module_recompute_seconds
from minipar.cost.planner.memory_terms import (
    chunks_in_flight,
    layers_in_flight,
    module_activation_bytes,
    shape_activation_bytes,
)
from minipar.widgets.three_d import cluster_config

LLAMA405 = planner.MODELS["llama3-405b"]
H100 = planner.cluster(16384, 8, "H100-SXM")
PUBLISHED = planner.Layout(2048, 8, 16, 128, 1, 8, "none", True, 1, split="units")
"""The 8K layout of Table 4 at v = 8, one layer (or the embedding, or the head) per chunk."""


def llama_layer_bytes_per_token(m, t: int, product: bool = True) -> float:
    """One Llama layer's saved tensors per token with TP t and SP, in bytes, listed one by one
    (Korthikanti et al. 2022 §4.1's method on the Llama architecture: RMSNorm, GQA, RoPE, SwiGLU,
    flash attention, no dropout, no biases)."""
    h, kv, a, f = m.hidden, m.kv_width, m.heads, m.ffn_width
    saved = {
        "attention norm input": 2 * h,  # RMSNorm's backward reads x (and a per-token rstd)
        "QKV GEMM input (norm output)": 2 * h,  # sharded along s by SP, gathered again
        "Q after RoPE": 2 * h,  # flash attention's saved q (a fused RoPE keeps nothing)
        "K and V": 2 * 2 * kv,  # GQA: kv_width wide
        "attention output": 2 * h,  # flash's saved out, also the projection's input
        "logsumexp": 4 * a,  # fp32, one per row and head
        "MLP norm input": 2 * h,
        "gate/up GEMM input (norm output)": 2 * h,
        "gate and up outputs": 2 * 2 * f,  # the SwiGLU's inputs
        "product, the down projection's input": 2 * f if product else 0,
    }
    return sum(saved.values()) / t  # every tensor split over t (heads, f) or along s (SP)


def test_the_planners_llama_layer_is_its_tensors_one_by_one():
    """The planner's per-layer count for Llama 3 405B at t = 8 with SP and flash attention
    (Korthikanti et al.'s 34/t plus the shape's corrections) equals the saved tensors listed
    one by one: 65,088 bytes per token, 0.497 GiB per 8K micro-batch. Keeping the dropout
    masks of Korthikanti et al.'s GPT layer, or SwiGLU's product under "inputs", fails here."""
    m, t, s = LLAMA405, 8, LLAMA405.seq
    per_layer = activation_bytes_per_layer(
        s, 1, m.hidden, m.heads, t=t, sp=True, recompute="none", attention="flash"
    )
    planned = per_layer + shape_activation_bytes(m, PUBLISHED)
    assert planned == pytest.approx(s * llama_layer_bytes_per_token(m, t), rel=1e-12)
    assert llama_layer_bytes_per_token(m, t) == 65_088
    assert planned / 2**30 == pytest.approx(0.4966, abs=1e-4)
    lean = per_layer + shape_activation_bytes(m, PUBLISHED, "inputs")
    assert lean == pytest.approx(s * llama_layer_bytes_per_token(m, t, product=False), rel=1e-12)


def test_with_m_equal_to_p_the_early_stages_hold_the_whole_batch():
    """Llama 3 405B's 8K layout has m = 2048/128 = 16 = p micro-batches. Interleaved, stage r's
    warm-up is 2·(p − r − 1) + (v − 1)·N chunks (+ the one running) with N ≥ p, which reaches
    m·v for every r ≤ (p − 1)/2 whatever v > 1: stages 0 to 7 hold all 16 micro-batches
    (N above p only holds more; below p the schedule idles). 1F1B holds p − r. On the units
    split the second stage's 8 layers are then the fullest: 128 layers' worth against 1F1B's
    8 · 15 = 120. Dropping the 2·(p − r − 1) term of the warm-up fails here."""
    for v in (2, 4, 8):
        lay = planner.Layout(2048, 8, 16, 128, 1, v, split="units")
        assert [chunks_in_flight(lay, r) == 16 * v for r in range(16)] == [True] * 8 + [False] * 8
        assert layers_in_flight(126, lay) == 128
    one = planner.Layout(2048, 8, 16, 128, 1, 1, split="units")
    assert [chunks_in_flight(one, r) for r in (0, 1, 15)] == [16, 15, 1]
    assert layers_in_flight(126, one) == 120


def test_the_micro_batch_group_sets_the_chunks_in_flight():
    """At 8,192 GPUs (d = 64, m = 32 = 2p, Table 4's first row) the default group N = p holds
    2·14 + 7·16 + 1 = 141 chunks on the second stage; breadth-first (N = m) 253 of 256; a group
    below p or above m is refused, in the search too (the interleaved layouts are left out).
    Ignoring the group (always p) fails here."""
    lay = planner.Layout(2048, 8, 16, 64, 1, 8, split="units")
    assert chunks_in_flight(lay, 1) == chunks_in_flight(lay, 1, 16) == 141
    assert chunks_in_flight(lay, 1, 32) == 253 and chunks_in_flight(lay, 1, 24) == 28 + 7 * 24 + 1
    for n in (8, 33):
        with pytest.raises(ValueError, match=rf"microbatch group N \({n}\) must be at least p"):
            chunks_in_flight(lay, 1, n)
    assert chunks_in_flight(planner.Layout(2048, 8, 16, 64, 1, 1, split="units"), 1, 8) == 15
    cl = planner.cluster(8192, 8, "H100-SXM")
    default, bfs = (
        planner.evaluate(LLAMA405, cl, lay, planner.Options(microbatch_group=n)) for n in (None, 32)
    )
    assert bfs.activation_bytes > default.activation_bytes
    assert bfs.step_seconds == default.step_seconds  # N from p to m adds no bubble
    with pytest.raises(ValueError, match=r"microbatch group \(0\) must be a positive integer"):
        planner.Options(microbatch_group=0)
    space = planner.Space(tp=8, pp=16, dp=64, cp=1)
    left = planner.search(LLAMA405, cl, 2048, space, planner.Options(microbatch_group=8))
    assert {c.chunks for c in left} == {1}


def test_what_the_mlp_keeps():
    """ "inputs" (xFormers' fused SwiGLU) keeps SwiGLU's gate and up but not their product:
    2·f/t bytes per token and layer fewer, 0.102 GiB per 8K micro-batch of Llama 3 405B; the
    backward writes the product again (2·f/t bytes per token at the HBM rate, under a
    millisecond per layer and micro-batch); selective recomputation of "act" then drops
    nothing more. Subtracting the product again under "act" fails here."""
    m, sb, t, f = LLAMA405, LLAMA405.seq, 8, LLAMA405.ffn_width
    keep, lean = planner.Options(), planner.Options(mlp_saves="inputs")
    drop = shape_activation_bytes(m, PUBLISHED) - shape_activation_bytes(m, PUBLISHED, "inputs")
    assert drop == 2 * f * sb / t
    product, inputs = (planner.evaluate(LLAMA405, H100, PUBLISHED, o) for o in (keep, lean))
    assert product.activation_bytes - inputs.activation_bytes == pytest.approx(128 * drop)
    rewrite = 2 * f * sb / t / H100.gpu.hbm_bandwidth
    assert 0 < rewrite < 1e-3
    assert module_recompute_seconds(m, H100, PUBLISHED, lean, 0.0) == pytest.approx(rewrite)
    assert module_recompute_seconds(m, H100, PUBLISHED, keep, 0.0) == 0
    assert 0 < inputs.step_seconds - product.step_seconds < 0.01
    sel = planner.Layout(**{**asdict(PUBLISHED), "recompute": "selective"})
    act = planner.Options(mlp_saves="inputs", recompute_modules=("act",))
    assert module_activation_bytes(m, sel, act) == 0
    with pytest.raises(ValueError, match=r"mlp_saves \('all'\) must be one of product, inputs"):
        planner.Options(mlp_saves="all")


def plan(capsys, *extra):
    argv = ["plan", "--model", "llama3-405b", "--gpu", "H100-SXM", "--gpus", "16384"]
    argv += ["--global-batch", "2048", "--tp", "8", "--pp", "16", "--dp", "128", "--cp", "1"]
    assert main([*argv, "--json", "--top", "0", *extra]) == 0
    return json.loads(capsys.readouterr().out)["configs"]


def test_llama3_405b_8k_without_recomputation_needs_the_lean_mlp(capsys):
    """Searched at its published (t, cp, p, d): with the MLP keeping SwiGLU's product
    (Megatron-Core's and Transformer Engine's kernels, the default) no interleaved layout fits
    without recomputation (81.7 GiB: 16 micro-batches of 8 layers on the second stage and
    18.1 GiB of states), and the first choice recomputes selectively; with the product
    rewritten in the backward (--mlp-saves inputs) the first choice is interleaved at v = 8
    without recomputation, within the allocator margin (68.7 GiB), at 5.47 s. Either flag
    parsed but not passed on fails here."""
    product = plan(capsys)
    assert (product[0]["chunks"], product[0]["recompute"]) == (8, "selective")
    none = [c for c in product if c["recompute"] == "none" and c["fits"]]
    assert {c["chunks"] for c in none} == {1}
    lean = plan(capsys, "--mlp-saves", "inputs")
    best = lean[0]
    assert (best["chunks"], best["recompute"], best["zero"], best["fits"]) == (8, "none", 1, True)
    assert best["bytes_per_gpu"] < best["margin_limit"]  # not even tight
    assert best["bytes_per_gpu"] / 2**30 == pytest.approx(68.65, abs=0.01)
    assert best["step_seconds"] == pytest.approx(5.466, abs=0.001)
    grouped = plan(capsys, "--mlp-saves", "inputs", "--microbatch-group", "8")
    assert {c["chunks"] for c in grouped} == {1}  # N < p: interleaving refused


@pytest.mark.skipif(not node_available(), reason="Node.js (/usr/bin/node) not installed")
def test_the_explorer_prices_the_group_and_the_mlp_alike():
    """The JavaScript twin (planTerms) gives the same terms under both new options, and the same
    refusals word for word."""
    m = {k: v for k, v in asdict(LLAMA405).items() if k != "note"}
    cl = planner.cluster(8192, 8, "H100-SXM")
    cases = [
        (planner.Layout(2048, 8, 16, 64, 1, v, rc, True, 1, split="units"), opt)
        for v in (1, 8)
        for rc in ("none", "selective", "full")
        for opt in (
            {},
            {"mlp_saves": "inputs"},
            {"microbatch_group": 32},
            {"microbatch_group": 8, "mlp_saves": "inputs"},
            {"mlp_saves": "inputs", "recompute_modules": ["core_attn", "mlp"]},
            {"mlp_saves": "everything"},
            {"microbatch_group": 0},
        )
    ]
    got = js_call(
        "three_d",
        [("planTerms", [m, cluster_config(cl), asdict(lay), o]) for lay, o in cases],
    )
    ok = 0
    for (lay, o), (kind, value) in zip(cases, got, strict=True):
        py = (
            {**o, "recompute_modules": tuple(o["recompute_modules"])}
            if "recompute_modules" in o
            else o
        )
        try:
            want = planner.terms(LLAMA405, cl, lay, planner.Options(**py)).as_dict()
        except ValueError as e:
            assert (kind, value) == ("error", str(e)), (lay, o)
            continue
        assert kind == "ok", (lay, o, value)
        bad = [k for k, x in want.items() if mismatch(x, value.get(k), 1e-12, k)]
        assert not bad, (bad, lay, o)
        ok += 1
    assert ok >= 18


TABLE4 = {16384: (128, 400e12), 8192: (64, 430e12)}
"""Llama Team 2024 Table 4's 8K rows: GPUs → (d, published TFLOP/s per GPU)."""


def test_the_appendix_sets_the_plans_beside_table_4():
    """book/three_d_appendix.md: every number of its account of Llama 3 405B's 8K pipeline is the
    planner's (searched at the published t, cp, p, d) or Table 4's, and the model change it
    names is the commit that made it."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "book" / "three_d_appendix.md").read_text()
    flat = " ".join(text.split())
    sec = flat[flat.index("## Llama 3 405B's pipeline") : flat.index("## The source articles")]

    def pct(x):
        return f"{x:+.1f} %".replace("-", "−")

    def first(gpus, **o):
        d, _ = TABLE4[gpus]
        cl = planner.cluster(gpus, 8, "H100-SXM")
        space = planner.Space(tp=8, pp=16, dp=d, cp=1)
        return planner.search(LLAMA405, cl, 2048, space, planner.Options(**o))

    def published(gpus):
        d, rate = TABLE4[gpus]
        return planner.model_flops(LLAMA405, 2048, "none")[0] / (gpus * rate)

    pub = published(16384)
    assert f"steps of {pub:.2f} s and {published(8192):.2f} s" in sec
    sel = first(16384)[0]
    assert (sel.chunks, sel.recompute) == (8, "selective")
    assert (
        f"v = 8, {sel.bytes_per_gpu / 2**30:.1f} GiB, {sel.step_seconds:.2f} s "
        f"(MFU {100 * sel.mfu:.1f} %, {pct(100 * (sel.step_seconds / pub - 1))}" in sec
    )
    one = next(c for c in first(16384) if c.recompute == "none" and c.fits)
    assert one.chunks == 1 and one.tight
    assert f"{one.bytes_per_gpu / 2**30:.1f} GiB and {one.step_seconds:.2f} s" in sec
    assert pct(100 * (one.step_seconds / pub - 1)) in sec
    lean = first(16384, mlp_saves="inputs")[0]
    assert (lean.chunks, lean.recompute, lean.tight) == (8, "none", False)
    assert f"at {lean.bytes_per_gpu / 2**30:.1f} GiB (within the allocator margin)" in sec
    assert f"and {lean.step_seconds:.2f} s (MFU {100 * lean.mfu:.1f} %," in sec
    assert pct(100 * (lean.step_seconds / pub - 1)) in sec
    exposed = first(16384, mlp_saves="inputs", tp_overlap=False, overlap_grad_reduce=False)[0]
    assert (
        f"{exposed.step_seconds:.2f} s (MFU {100 * exposed.mfu:.1f} %, "
        f"{pct(100 * (exposed.step_seconds / pub - 1))})" in sec
    )
    small = first(8192, mlp_saves="inputs")[0]
    assert (small.chunks, small.recompute, small.tight) == (8, "none", True)
    assert (
        f"{small.bytes_per_gpu / 2**30:.1f} GiB, tight, at {small.step_seconds:.2f} s "
        f"({pct(100 * (small.step_seconds / published(8192) - 1))})" in sec
    )
    bf16 = planner.evaluate(
        LLAMA405, H100, PUBLISHED, planner.Options(main_grad_bytes=2)
    ).bytes_per_gpu
    assert f"tight, at {bf16 / 2**30:.1f} GiB" in sec
    product = planner.evaluate(LLAMA405, H100, PUBLISHED)
    assert not product.fits and f"needs {product.bytes_per_gpu / 2**30:.1f} GiB" in sec
    assert f"{product.model_state_bytes / 2**30:.1f} GiB" in sec
    assert f"{product.activation_bytes / 2**30:.1f} GiB" in sec
    assert "65,088 bytes per token" in sec and "commit `7c1dc02`" in sec
    assert "in commit `7c1dc02`" in flat  # the experiments' note names the change
