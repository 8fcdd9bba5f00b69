"""Numbers the expert-parallel page states in its worked answers and captions are the cost model's,
the router's and the planner's: if a shape, a preset or a formula changes, this names the answer
to rewrite. (The DeepSeek-V3 planner numbers are glued from the notebook, which asserts their
comparisons; here only the figure's runs and the claims its caption makes.)"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
from page_support import has, worked_problem

from minipar.cost.chapters import expert_parallel as cost
from minipar.cost.kernels.hardware import gpu, link
from minipar.cost.planner.three_d import MODELS

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "book" / "expert_parallel.md").read_text("utf-8")


def test_what_one_moe_layer_sends():
    text = worked_problem(PAGE, "what one MoE layer sends")
    S, off = cost.even_dispatch_bytes(4096, 2, 4096, 8, 2)
    has(text, f"{S / 1e6:.1f} MB", f"{off / 1e6:.1f} MB", f"= {4 * off / 1e6:.0f}$ MB")
    assert cost.off_node_fraction(16, 8) == 0.5 and "half the rows" in text


def test_stored_against_used():
    text = worked_problem(PAGE, "stored against used")
    v3 = MODELS["deepseek-v3"]
    h, f, k, routed, shared = v3.hidden, v3.ffn, v3.top_k, v3.experts, v3.shared_experts
    one = 3 * h * f
    has(text, f"= {one / 1e6:.1f} M", f"$h = {h}$", f"$f = {f}$", f"$K = {k}$")
    has(text, f"**{(routed + shared) * one / 1e9:.1f} B**", f"**{(k + shared) * one / 1e9:.3f} B**")
    has(text, f"{(routed + shared) / (k + shared):.1f} times fewer")
    has(text, f"**{2 * (k + shared) * one / 1e9:.2f} GFLOP**")
    assert v3.dense_ffn == (k + shared) * f and f"$9f = {v3.dense_ffn}$" in text
    moe_layers = v3.layers - v3.dense_layers
    layers = cost.moe_params(h, f, routed, k, layers=moe_layers, matrices=3, shared=shared)
    has(text, f"{moe_layers} MoE layers", f"{layers['total'] / 1e9:.0f} B")
    has(text, f"{layers['active'] / 1e9:.1f} B")


def test_gates_from_logits():
    torch = pytest.importorskip("torch")
    from minipar.expert_parallel.routing import top_k_gates

    text = worked_problem(PAGE, "gates from logits")
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]], dtype=torch.float64)
    probs, gates, experts = top_k_gates(logits, 2)
    has(text, "(" + ", ".join(f"{float(p):.3f}" for p in probs[0]) + ")")
    assert experts[0].tolist() == [0, 1] and "experts 0 and 1" in text
    has(text, *(f"**{float(g):.3f}**" for g in gates[0]))
    _, one, _ = top_k_gates(logits, 1)
    _, switch, _ = top_k_gates(logits, 1, renormalize=False)
    has(text, f"**{float(one[0, 0]):.3f}**", f"$p$ = **{float(switch[0, 0]):.3f}**")


def test_all_to_all_or_expert_gemm():
    text = worked_problem(PAGE, "all-to-all or expert GEMM, which sets the time?")
    flops = gpu("H100-SXM").peak_flops["bf16"]
    nv, ib = link("nvlink4-h100"), link("ib-ndr400")
    S, _ = cost.even_dispatch_bytes(4096, 2, 4096, 8, 2)
    gemm = 2 * 8192 * 3 * 4096 * 14336
    t_nv = cost.all_to_all_time(S, 8, nv.alpha, nv.bandwidth)
    has(text, f"**{t_nv * 1e3:.2f} ms**", f"{gemm:.3g}".replace("e+12", " \\times 10^{12}"))
    has(text, f"**{gemm / flops * 1e3:.2f} ms**", f"{100 * t_nv / (gemm / flops):.0f} %")
    S3, _ = cost.even_dispatch_bytes(4096, 8, 7168, 64, 2)
    off = S3 * cost.off_node_fraction(64, 8)
    has(text, f"{S3 / 1e6:.0f} MB", f"{off / 1e6:.0f} MB", f"**{off / ib.bandwidth * 1e3:.1f} ms**")
    has(text, f"**{off / ib.bandwidth / (gemm / flops):.1f} times**")
    assert 2 * 8 * 4096 * 3 * 7168 * 2048 == gemm  # the same FLOPs at DeepSeek-V3's shapes


def test_what_a_capacity_drops_and_the_balancing_loss():
    text = worked_problem(PAGE, "what a capacity drops")
    free = cost.skewed_loads(1024, 8, 2, 4, hot=0.2)
    has(text, f"= {free['routed'][0]:.0f}$", f"**{free['max rank'] / free['mean rank']:.2f}**")
    for cf in (1.25, 2):
        s = cost.skewed_loads(1024, 8, 2, 4, hot=0.2, capacity_factor=cf)
        has(text, f"**{s['capacity']}**", f"**{100 * s['dropped fraction']:.1f} %**")
        has(text, f"**{s['max rank'] / s['mean rank']:.2f}**")
    text = worked_problem(PAGE, "what the balancing loss sees")
    f = [x / sum(free["routed"]) for x in free["routed"]]
    has(
        text,
        f"**{8 * sum(x * x for x in f):.2f}**",
        f"**{free['max rank'] / free['mean rank']:.1f}**",
    )


def test_pad_drop_or_group():
    text = worked_problem(PAGE, "pad, drop or group")
    v3, ep, tokens = MODELS["deepseek-v3"], 64, 4096
    per_gpu = v3.experts // ep
    rows = [int(r) for r in re.search(r"receive (\d+), (\d+), (\d+) and (\d+) rows", text).groups()]
    assert len(rows) == per_gpu and sum(rows) == v3.top_k * tokens  # 32768 rows reach a GPU
    mean = ep * tokens * v3.top_k / v3.experts
    has(text, f"**{mean:.0f}**", f"{sum(rows)} per GPU")
    padded = per_gpu * max(rows)
    has(text, f"= {padded} rows", f"**{100 * (padded - sum(rows)) / padded:.1f} %**")
    C = cost.capacity(ep * tokens, v3.experts, v3.top_k, 1.0)
    over = [r - C for r in rows if r > C]
    has(text, f"= {C} drops", "$" + " + ".join(map(str, over)) + f"$ = {sum(over)}")
    has(text, f"**{100 * sum(over) / sum(rows):.1f} %**")


def test_deepseek_v3_expert_data_parallelism():
    text = worked_problem(PAGE, "DeepSeek-V3's expert data parallelism")
    d = 2048 // 16
    has(text, f"$d$ = **{d}**", f"EDP = ${d}/64$ = **{cost.folded_expert_dp(1, 1, d, 64)}**")
    assert (d // 8) % 64 != 0  # inside DP, x must divide d = 16: EP 64 cannot
    assert cost.folded_expert_dp(8, 1, d // 8, 64) == 2 and f"$d = {d}/8 = {d // 8}$" in text


def test_deepseek_v3_figure_prices_the_preset_and_shows_what_its_caption_says():
    sys.path.insert(0, str(ROOT / "book"))
    from figures.expert_parallel import deepseek_v3_runs

    from minipar.widgets.three_d import preset_run

    runs = [c for _, c in deepseek_v3_runs()]
    _, _, lay, opt = preset_run("deepseek-v3")
    assert runs[0].layout == lay and opt.ep_overlap and opt.dualpipe  # the explorer's preset
    assert [c.tp for c in runs] == [1, 1, 8, 1, 8] and [c.ep for c in runs] == [64] * 5
    for c in runs:
        parts = c.group_seconds()
        assert math.isclose(sum(parts.values()), c.step_seconds, rel_tol=1e-9)
        assert (parts["TP communication"] > 0) == (c.tp > 1)  # "TP 8 adds a part of its own"
    h800, exposed, _, nvl72, _ = runs
    a2a = "PP, CP and EP communication"
    assert exposed.seconds("ep") > 0 and h800.seconds("ep") < exposed.seconds("ep")
    assert h800.group_seconds()[a2a] < exposed.group_seconds()[a2a] / 2  # "hides most of it"
    assert nvl72.seconds("ep_overlap") < h800.seconds("ep_overlap")  # "shrinks on NVL72"
    cap = re.search(
        r"\{minipar-figure\} expert_parallel.deepseek_v3_step\n(.*?)^```$", PAGE, re.M | re.S
    )
    for claim in ("DualPipe hides most of the all-to-all", "TP 8 adds a part of its own on both"):
        assert claim in " ".join(cap[1].split()), claim


def test_why_no_tp_states_the_presets_links():
    """The question's link figures are the planner's presets (its answer is glued)."""
    text = worked_problem(PAGE, "why no tensor parallelism on H800, and what NVL72 changes")
    h800, nv5, ib = gpu("H800"), link("nvlink5-b200"), link("ib-ndr400")
    nv4 = link(h800.intra)
    assert h800.nvlink_domain == 8 and gpu("GB200-NVL72").nvlink_domain == 72
    has(text, f"{h800.nvlink_domain} GPUs by NVLink at {nv4.bandwidth / 1e9:.0f} GB/s")
    has(text, f"({nv4.bandwidth * nv4.bus_efficiency / 1e9:.0f} GB/s achieved")
    has(text, f"one {ib.bandwidth / 1e9:.0f} GB/s InfiniBand NIC")
    has(text, f"joins 72 GPUs by NVLink 5 at {nv5.bandwidth / 1e9:.0f} GB/s per direction")
    assert gpu("GB200-NVL72").intra == "nvlink5-b200" and h800.inter == "ib-ndr400"


def test_citations_resolve():
    bib = (ROOT / "book" / "references.bib").read_text("utf-8")
    appendix = (ROOT / "book" / "expert_parallel_appendix.md").read_text("utf-8")
    keys = {
        k.strip()
        for page in (PAGE, appendix)
        for g in re.findall(r"\{cite:[pt]\}`([^`]*)`", page)
        for k in g.split(",")
    }
    assert "nvidia2024gb200" in keys and "deepseek2024v3" in keys
    assert [k for k in keys if "{" + k + "," not in bib] == []
