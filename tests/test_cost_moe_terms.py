"""The planner's mixture-of-experts terms (minipar.cost.planner.moe_terms and term_ep) and
today's GPUs: router and permute as memory-bound kernels, grouped GEMMs at few rows per expert,
node-limited all-to-alls, the overlap's price, capacity against dropless, Blackwell's kernel
constants and DeepSeek-V3 planned on H800, B200 and GB200 NVL72. Each test names the bug it
catches."""

import dataclasses

import pytest

from minipar.cost.chapters.expert_parallel import all_to_all_time
from minipar.cost.kernels import hardware
from minipar.cost.planner import moe_terms
from minipar.cost.planner import three_d as planner
from minipar.cost.planner.communication_terms import ep_all_to_all_seconds

DSV3 = planner.MODELS["deepseek-v3"]


def _h800(gpus=2048):
    return planner.cluster(gpus, 8, "H800")


def _lay(**kw):
    base = dict(global_batch=16384, tp=1, pp=1, dp=2048, micro_batch=1, zero=1, ep=64)
    return planner.Layout(**(base | kw))


def _terms(m=DSV3, cl=None, lay=None, **opt):
    return planner.terms(m, cl or _h800(), lay or _lay(), planner.Options(**opt))


def test_grouped_gemm_half_rows_and_efficiency_curve():
    """r₀ = b·P·η/(2W): on the H800 in bf16 about 260 rows; an expert GEMM at r₀ rows runs at
    half a large GEMM's rate, at DeepSeek-V3's 8192 rows per expert (b = 1, s = 4096, K = 8,
    ep = 64 over 256 experts) at 97 %. FP8 halves the bytes and doubles the rate: the same r₀.
    Catches: the weight read charged per row instead of once per expert (no fall at few rows),
    or FP8's bytes left at 2 (r₀ doubled)."""
    g = _h800().gpu
    r0 = moe_terms.grouped_gemm_half_rows(g)
    assert r0 == pytest.approx(2 * 989.4e12 * 0.78 / (2 * g.hbm_bandwidth)) and 240 < r0 < 280
    assert moe_terms.grouped_gemm_half_rows(g, fp8=True) == pytest.approx(
        r0 * 0.5 * g.peak_flops["fp8"] / g.peak_flops["bf16"]
    )
    assert moe_terms.grouped_gemm_efficiency(r0, g) == pytest.approx(0.5)
    c = _terms(lay=_lay(ep=8))
    rows = 8 * 4096 * 8 / 256
    assert moe_terms.grouped_gemm_efficiency(rows, g) < 0.81
    assert moe_terms.grouped_gemm_efficiency(8192, g) > 0.96
    assert c.values["grouped_gemm"] > 0


def test_grouped_gemm_charges_the_local_experts_weights_beyond_k():
    """ep = 8: a rank holds 32 experts, the dense pricing read 8 experts' weights: the term is
    (passes + 2)·2 bytes·(32 − 8)·3hf/W per MoE layer, 58 of them (the first 3 dense). ep = 64:
    4 local experts, fewer than K, nothing added. Catches: the dense-first layers priced as MoE
    (61 × ...), or the backward's two weight reads forgotten."""
    g = _h800().gpu
    m = DSV3
    one = 3 * m.hidden * m.ffn_width
    want = 58 * 3 * 2 * (32 - 8) * one / g.hbm_bandwidth
    assert _terms(lay=_lay(ep=8)).values["grouped_gemm"] == pytest.approx(want, rel=1e-12)
    assert _terms().values["grouped_gemm"] == 0
    assert moe_terms.moe_layers(m, _lay()) == 58


def test_router_and_permute_are_memory_bound_kernels():
    """Permute and unpermute move 2(1 + K)·T·h·2 bytes a pass on the sender and 4K·T·h·2 on the
    receiver (ep > 1); at the H800's element-wise rate, forward and backward, 58 MoE layers.
    The router's element-wise bytes grow with the experts, a dense model has neither term.
    Catches: the receiver's sort left out, or the permute charged per expert instead of per
    routed row."""
    g, T, K, h = _h800().gpu, 4096, 8, DSV3.hidden
    moved = 2 * (1 + K) * T * h * 2 + 4 * K * T * h * 2
    want = 58 * 2 * moved / g.elementwise_bandwidth
    br = _terms()
    assert br.values["permute"] == pytest.approx(want, rel=1e-12)
    assert br.values["router"] > 0
    fewer = dataclasses.replace(DSV3, experts=64)
    assert _terms(m=fewer).values["router"] < br.values["router"]
    llama = planner.MODELS["llama3-70b"]
    dense = planner.terms(
        llama, planner.cluster(64, 8, "H100-SXM"), _lay(dp=64, global_batch=64, ep=1)
    )
    assert dense.values["router"] == dense.values["permute"] == dense.values["grouped_gemm"] == 0


def test_node_limited_all_to_all_halves_the_nic_bytes():
    """ep = 64 on 8-GPU nodes: with node-limited routing (M = 4 of K = 8) each token crosses
    the NIC once per destination node, so the NIC carries half the off-node bytes, and NVLink
    forwards 7/8 of them. Catches: the node limit ignored (NIC bytes of K copies)."""
    cl, S = _h800(), 64e6
    plain = ep_all_to_all_seconds(S, 64, cl)
    limited = ep_all_to_all_seconds(S, 64, cl, node_limit=4, top_k=8)
    far = 56 * cl.inter.alpha + 4 / 8 * 56 / 64 * S / cl.inter.bandwidth
    near = 7 * cl.intra.alpha + 7 / 8 * S / cl.intra.bandwidth
    assert limited == pytest.approx(max(near, far)) and limited < 0.6 * plain
    assert ep_all_to_all_seconds(S, 8, cl, 4, 8) == ep_all_to_all_seconds(S, 8, cl)


def test_overlap_hides_the_all_to_alls_at_the_price_of_the_sms():
    """With ep_overlap the all-to-alls hide under another micro-batch's compute, and the compute
    loses EP_COMM_SMS/SMs (20 of 132) of the GPU while they run: the step falls, but by less
    than the hidden seconds. Catches: the overlap priced as free (EP_COMM_SMS = 0), or hidden
    beyond the compute there is."""
    plain, over = _terms(), _terms(ep_overlap=True)
    hidden = plain.values["ep"] - over.values["ep"]
    assert hidden > 0 and over.values["ep_overlap"] == pytest.approx(hidden * 20 / 132)
    assert hidden <= over.values["compute"]
    m = plain.microbatches  # per micro-batch terms, m of them a step (p = 1: no bubble)
    assert plain.step_seconds - m * hidden < over.step_seconds < plain.step_seconds
    one = _terms(lay=_lay(global_batch=2048), ep_overlap=True)  # m = 1: nothing to overlap with
    assert one.values["ep_overlap"] == 0 and one.values["ep"] > 0


def test_capacity_caps_the_busiest_rank_and_dropless_does_not():
    """Imbalance 1.7: dropless, the busiest EP rank carries 1.7 × the mean; a capacity factor
    of 1.25 drops the rest, so its compute and all-to-alls are those of 1.25. Catches: the
    capacity ignored, or applied to a dense (ep = 1) layout."""
    assert moe_terms.moe_load(DSV3, _lay(), planner.Options(moe_imbalance=1.7)) == 1.7
    capped = planner.Options(moe_imbalance=1.7, moe_capacity=1.25)
    assert moe_terms.moe_load(DSV3, _lay(), capped) == 1.25
    assert moe_terms.moe_load(DSV3, _lay(ep=1), capped) == 1.0
    a, b = _terms(moe_imbalance=1.7), _terms(moe_imbalance=1.7, moe_capacity=1.25)
    assert b.values["compute"] < a.values["compute"] and b.values["ep"] < a.values["ep"]
    c = _terms(moe_imbalance=1.25)
    assert b.values["ep"] == pytest.approx(c.values["ep"])
    with pytest.raises(ValueError, match=r"moe capacity \(0\) must be > 0"):
        planner.Options(moe_capacity=0)


def test_todays_gpus_get_todays_recipe_and_blackwell_its_own_constants():
    """H800, B200 and GB200 NVL72 get the modern recipe and fused attention (not the 2021 A100
    defaults); the Blackwell presets carry their own η, HBM rate and attention rate, not the
    H200's. Catches: a Blackwell preset left on the H200's constants, or a modern GPU left out
    of the era's list."""
    for name in ("H800", "B200", "GB200-NVL72"):
        assert planner.precision_for(name) == "megatron"
        assert planner.attention_for(DSV3, name) == "flash"
    b200, gb200, h200 = (hardware.gpu(n) for n in ("B200", "GB200-NVL72", "H200"))
    assert b200.gemm_efficiency == gb200.gemm_efficiency == 0.63 != h200.gemm_efficiency
    assert b200.hbm_bandwidth == pytest.approx(6.72e12)
    assert gb200.hbm_bandwidth == pytest.approx(6.72e12 * 8.0 / 7.7)
    assert b200.flash_efficiency == 0.44 != h200.flash_efficiency


@pytest.mark.parametrize("gpu", ["H800", "B200", "GB200-NVL72"])
def test_plan_deepseek_v3_on_2048_gpus_ranks_layouts(capsys, gpu):
    """`minipar plan --model deepseek-v3 --gpu G --gpus 2048` ranks layouts with expert
    parallelism on H800, B200 and GB200 NVL72 (64 of each rack's 72 GPUs: 2048 = 32 × 64), the
    new MoE terms in every row. Catches: GB200 refused because 72 does not divide 2048."""
    from test_cli_cost import run_json

    argv = ["plan", "--model", "deepseek-v3", "--gpu", gpu, "--gpus", "2048"]
    out = run_json(capsys, *argv, "--global-batch", "15360", "--max-ep", "64")
    fits = [c for c in out["configs"] if c["fits"]]
    assert len(fits) > 1 and any(c["ep"] > 1 for c in fits)
    steps = [c["step_seconds"] for c in fits]
    assert steps == sorted(steps)
    assert all(c["router_seconds"] > 0 and c["permute_seconds"] > 0 for c in fits)


def test_nvl72_keeps_ep_64_and_tp8_ep8_inside_the_nvlink_domain():
    """On GB200 NVL72 (64 GPUs of a rack per 2048-GPU job) an EP group of 64, and TP 8 × EP 8,
    all-to-all over NVLink; on 8-GPU B200 nodes the same EP 64 crosses the NIC, 4 × slower or
    more. Catches: the rack priced as 8-GPU nodes."""
    nvl = planner.cluster(2048, 64, "GB200-NVL72")
    hgx = planner.cluster(2048, 8, "B200")
    S = 64e6
    assert ep_all_to_all_seconds(S, 64, nvl, 4, 8) < ep_all_to_all_seconds(S, 64, hgx, 4, 8) / 4
    for t, ep in ((1, 64), (8, 8)):
        lay = _lay(tp=t, dp=2048 // t, ep=ep, sp=t > 1)
        a2a = planner.terms(DSV3, nvl, lay).values["ep"]
        rows = 8 * 4096 * DSV3.hidden * 2 / t
        one = all_to_all_time(rows, ep, nvl.intra.alpha, nvl.intra.bandwidth)
        assert a2a == pytest.approx(58 * 4 * one, rel=1e-12)


def test_shared_experts_and_mla_attention_core_are_computed():
    """DeepSeek-V3's shared expert runs on every token: one more expert's MLP per layer, at
    (3f/8h) of the kernel model's MLP; MLA's heads (d_qk 192, d_v 128 against h/a = 56) make
    each attention-core block 2.86 × as long, forward twice (recomputed) and backward, on all 61
    layers. Catches: the shared expert counted in parameters only, or MLA priced as h/a heads."""
    from minipar.cost.kernels.compute import attention_core_and_mlp_seconds
    from minipar.cost.planner.compute_terms import mla_core_scale

    lay = _lay(ep=1, dp=2048)
    cl, h, f = _h800(), DSV3.hidden, DSV3.ffn_width
    parts = attention_core_and_mlp_seconds(1, 4096, h, DSV3.heads, cl.gpu, 1, attention="flash")
    base = _terms(lay=lay).values["compute"]
    no_shared = _terms(m=dataclasses.replace(DSV3, shared_experts=0), lay=lay).values["compute"]
    want = 61 * 3 * f / (8 * h) * (parts["mlp_f"] + parts["mlp_b"])
    assert base - no_shared == pytest.approx(want, rel=1e-9)
    assert mla_core_scale(DSV3) == pytest.approx(128 * 320 / (2 * 7168))
    mla = dict(q_lora=0, kv_lora=0, qk_rope_dim=0, qk_nope_dim=0, v_head_dim=0)
    mha = _terms(m=dataclasses.replace(DSV3, **mla), lay=lay).values["compute"]
    core = 2 * parts["core_f"] + parts["core_b"]
    assert base - mha == pytest.approx(61 * (mla_core_scale(DSV3) - 1) * core, rel=1e-9)


def test_plan_flags_reach_the_overlap_and_capacity_options(capsys):
    """`minipar plan --ep-overlap` prices the all-to-alls hidden at the SMs they take and
    `--moe-capacity` caps the busiest rank's load. Catches: a flag parsed and dropped."""
    from test_cli_cost import run_json

    argv = ["plan", "--model", "deepseek-v3", "--gpu", "H800", "--gpus", "2048"]
    fixed = ["--global-batch", "16384", "--tp", "1", "--pp", "1", "--ep", "64", "--zero", "3"]
    fixed += ["--micro-batch", "1", "--recompute", "selective"]
    plain = run_json(capsys, *argv, *fixed)["configs"][0]
    over = run_json(capsys, *argv, *fixed, "--ep-overlap")["configs"][0]
    assert plain["ep_overlap_seconds"] == 0 < over["ep_overlap_seconds"]
    assert over["ep_seconds"] < plain["ep_seconds"] and over["step_seconds"] < plain["step_seconds"]
    skew = ["--moe-imbalance", "1.5"]
    loose = run_json(capsys, *argv, *fixed, *skew)["configs"][0]
    capped = run_json(capsys, *argv, *fixed, *skew, "--moe-capacity", "1.2")["configs"][0]
    assert capped["ep_seconds"] < loose["ep_seconds"]
