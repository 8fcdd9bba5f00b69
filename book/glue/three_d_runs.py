"""The numbers behind the chapter "Putting them together" (book/three_d.md): the hand
calculation, the planner's runs, its validation against published measurements, cost per token.

The book's glue, not the library's: every number comes from :mod:`minipar.cost` (the planner
:mod:`minipar.cost.planner.three_d`, the published runs :mod:`minipar.cost.validation.published`);
this module only chooses the chapter's inputs and collects the rows and values its notebook
glues (numbers, and the few phrases of the cost-per-token paragraph that follow them). The
notebook imports it with ``sys.path.insert(0, "../book/glue")``, beside ``three_d.py`` (the
sentences) and ``validation_tables.py`` (the plain-text tables).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from minipar.cost.chapters.memory_time import activation_bytes_per_layer
from minipar.cost.kernels.hardware import GPUS
from minipar.cost.planner import three_d as planner
from minipar.cost.validation import published as validation

GiB = 2**30

# The PCIe H100 has less compute and memory bandwidth than the SXM part, not only a slower
# link: 756 dense bf16 TFLOP/s (the datasheet's 1,513 is with 2:4 sparsity) on 114 SMs, 80 GB
# HBM2e at 2.0 TB/s (the SXM part: 989 TFLOP/s, 132 SMs, HBM3 at 3.35 TB/s).
H100_PCIE = GPUS["H100-PCIe"]

# Published layouts (t, p, d) and where they ran. A100 presets carry NVLink 3 and HDR 200 per
# GPU (DGX A100); BLOOM ran on Jean Zay: 4 × 100 Gb/s Omni-Path per 8-GPU node.
PUBLISHED = {
    # name: (model preset, override, gpus, global batch, published (t, p, d), inter link, source)
    "MT-NLG 530B": (
        "mt-nlg-530b",
        {},
        2240,
        1920,
        (8, 35, 8),
        None,
        "Smith et al. 2022, §3: 280 DGX A100 nodes",
    ),
    "BLOOM 176B": (
        "bloom-176b",
        {"layers": 72},
        384,
        2048,
        (4, 12, 8),
        "opa-jean-zay",
        "BigScience 2022, §3.4: 48 Jean Zay nodes of 8 A100 (70 layers + 2 embedding units)",
    ),
}


@dataclass(frozen=True)
class HandSetting:
    """The by-hand layout's inputs: GPT-3 175B (``psi`` parameters, ``L`` layers of width ``h``
    with ``a`` heads, sequences of ``s``) on ``gpus`` A100 of ``gpu_bytes``, ``gpus_per_node`` a
    node, a global ``batch`` of sequences, TP over ``t``; per-GPU links ``intra_bw`` (NVLink)
    and ``inter_bw`` (one NIC), B/s; ``x`` achieved FLOP/s per GPU."""

    psi: float = 175e9
    L: int = 96
    h: int = 12288
    a: int = 96
    s: int = 2048
    gpus: int = 1024
    batch: int = 1536
    t: int = 8
    gpu_bytes: float = 80 * GiB
    inter_bw: float = 25e9
    intra_bw: float = 300e9
    x: float = 140e12
    gpus_per_node: int = 8


def hand_calculation(setting: HandSetting = HandSetting()) -> dict:
    """The chapter's by-hand layout for GPT-3 175B on 1024 A100 (no ZeRO, full recomputation,
    no sequence parallelism, b = 1), step by step: the numbers the chapter prints, recomputed.

    ``tp_allreduces``: 6 per layer per micro-batch with full recomputation (2 forward, 2 in
    the recomputed forward, 2 backward; :func:`minipar.cost.planner.three_d.tp_collectives`).
    ``tp16_ratio``: TP over two nodes (t = 16) against t = 8 on NVLink, per layer, with NCCL's
    one ring per NIC (a node's ``gpus_per_node`` NICs share the inter-node bytes);
    ``tp16_one_nic_ratio``: the same through a single NIC."""
    psi, L, h, a, s, t = setting.psi, setting.L, setting.h, setting.a, setting.s, setting.t
    gpus, batch, inter_bw, intra_bw = (
        setting.gpus,
        setting.batch,
        setting.inter_bw,
        setting.intra_bw,
    )
    states = 16 * psi
    out = {
        "states_TB": states / 1e12,
        "tp_min": states / setting.gpu_bytes,
        "states_GiB": {tp: states / tp / GiB for tp in (32, 64, 128)},
        "acts_GiB": L * 2 * s * h / GiB,  # L·2sbh, b = 1
        # the layer being recomputed: Korthikanti Table 2 without SP, sbh(10 + 24/t) + 5as²b/t
        "layer_GiB": activation_bytes_per_layer(s, 1, h, a, t=t, sp=False) / GiB,
        "flops": 8 * psi * batch * s,
    }
    out["compute_s"] = out["flops"] / gpus / setting.x
    rows = {}
    for p in (8, 16):
        d = gpus // (t * p)
        m = batch // d
        dp_bytes = 2 * (d - 1) / d * 2 * psi / (t * p)
        rows[(d, t, p)] = {
            "m": m,
            "bubble": (p - 1) / (m + p - 1),
            "bubble_s": (p - 1) / m * out["compute_s"],
            "dp_GB": dp_bytes / 1e9,
            "dp_s": dp_bytes / inter_bw,
        }
    out["rows"] = rows
    n_ar = int(planner.tp_collectives(t, False, "full"))  # 6 with full recomputation
    tp_layer = n_ar * 2 * (t - 1) / t * 2 * s * h  # bytes per layer per mb
    out["tp_allreduces"] = n_ar
    out["tp_GB_per_layer"] = tp_layer / 1e9
    out["tp_s"] = tp_layer * (L // 8) * (batch // 16) / intra_bw  # 12 layers × 96 mb
    bytes16 = (2 * 15 / 16) / (2 * 7 / 8)  # ring bytes, t = 16 vs 8
    out["tp16_ratio"] = bytes16 * intra_bw / (setting.gpus_per_node * inter_bw)
    out["tp16_one_nic_ratio"] = bytes16 * intra_bw / inter_bw
    return out


def gpt3_plan(top: int = 3, gpus: int = 1024, batch: int = 1536) -> list:
    """The planner's best ``top`` layouts for GPT-3 175B on ``gpus`` A100 (its presets' links)."""
    m, cluster = planner.MODELS["gpt3-175b"], planner.cluster(gpus, 8, "A100-80GB")
    return [c for c in planner.search(m, cluster, batch) if c.fits][:top]


def published_rows(top: int = 3) -> dict:
    """For each published setting: the planner's best ``top`` layouts and the published one."""
    out = {}
    for name, (preset, override, gpus, batch, (t, p, d), inter, source) in PUBLISHED.items():
        m = replace(planner.MODELS[preset], **override)
        cluster = planner.cluster(gpus, 8, "A100-80GB", inter=inter)
        ranked = [c for c in planner.search(m, cluster, batch) if c.fits]
        rank = next((i for i, c in enumerate(ranked) if (c.tp, c.pp, c.dp) == (t, p, d)), None)
        best_pub = min(
            (c for c in ranked if (c.tp, c.pp, c.dp) == (t, p, d)),
            key=lambda c: c.step_seconds,
            default=None,
        )
        out[name] = {
            "best": ranked[:top],
            "published": (t, p, d),
            "published_best": best_pub,
            "published_rank": None if rank is None else rank + 1,
            "source": source,
            "gpus": gpus,
            "batch": batch,
            "inter": cluster.inter.name,
        }
    return out


def validation_summary() -> dict:
    """The planner against measured runs (:mod:`minipar.cost.validation.published`): the published rows
    as run, the largest |error|, the rows outside ±10 %, Spearman's rank correlation of
    predicted and published TFLOP/s over Table 1 of Narayanan et al. 2021 as run, Table 1 under
    each micro-batch choice (``modes``: as run, 1, the planner's; ``settled``: b = v = 1),
    the A100's constants fitted on half of Table 1 and checked on the other half (``fit``,
    :func:`minipar.cost.validation.published.split_check`), two negative controls settled the same way
    (``old``: the 2021 model, tile/wave GEMM rule and 20 bytes per score, η alone;
    ``waves_fit``: the tile rule with both constants fitted), the H200 GEMM evidence against
    the tile rule, the H200 validation set and the §5.2 ZeRO-3 comparison."""
    rows = validation.published_runs()
    table1 = [r for r in rows if r.where == "Table 1"]
    return {
        "rows": rows,
        "by_name": {r.name: r for r in rows},
        "worst": max(rows, key=lambda r: abs(r.error)),
        "outside_10": [r for r in rows if abs(r.error) > 10],
        "spearman_table1": validation.spearman(
            [r.published_tflops for r in table1], [r.predicted_tflops for r in table1]
        ),
        "modes": {m: validation.table1_summary(m) for m in validation.MICRO_BATCH_MODES},
        "settled": validation.table1_summary("1", interleaved=False),
        "evidence": validation.wave_quantisation_evidence(),
        "fit": validation.split_check("planner"),
        "old": validation.split_check("planner", "waves", 20, fit="eta"),
        "waves_fit": validation.split_check("planner", "waves"),
        "h200": validation.h200_summary(),
        "zero3": validation.zero3_comparison(),
        "zero3_effects": [validation.zero3_missing_effect(m) for m in validation.ZERO3_TABLE2],
    }


def validation_glue(val: dict | None = None) -> dict:
    """The numbers the chapter's validation sentences quote, flat (name → number), from
    :func:`validation_summary`: glue each; the book writes the sentences around them."""
    val = validation_summary() if val is None else val
    named, modes = val["by_name"], val["modes"]
    mt, p530 = named["MT-NLG 530B"], named["PTD-P 529.6B"]
    h2 = val["h200"]
    e175, e530 = val["zero3_effects"]
    out = {
        "val_rows": len(val["rows"]),
        "val_within10": len(val["rows"]) - len(val["outside_10"]),
        "val_spearman": val["spearman_table1"],
        "val_mtnlg_err": mt.error,
        "val_ptdp530_err": abs(p530.error),
        "val_mtnlg_pub_tf": mt.published_tflops,
        "val_ptdp530_pub_tf": p530.published_tflops,
        "val_bloom_err": named["BLOOM 176B"].error,
        "val_gpt3_err": named["GPT-3 175B"].error,
        "q_model": val["evidence"]["q"],
        "q_measured": val["evidence"]["measured"],
        "q_n": val["evidence"]["n"],
        "fit_eta": val["fit"]["eta"],
        "fit_score_bytes": val["fit"]["score_bytes"],
        "fit_held_within10": val["fit"]["held_out_within10"],
        "fit_held_worst": val["fit"]["held_out_worst"],
        "fit_worst": val["fit"]["worst"],
        "fit_spearman": val["fit"]["spearman"],
        "old_eta": val["old"]["eta"],
        "old_held_within10": val["old"]["held_out_within10"],
        "old_worst": val["old"]["worst"],
        "old_spearman": val["old"]["spearman"],
        "waves_fit_spearman": val["waves_fit"]["spearman"],
        "waves_fit_score_bytes": val["waves_fit"]["score_bytes"],
        "h200_n": h2["n"],
        "h200_time_ok": h2["time_ok"],
        "h200_memory_ok": h2["memory_ok"],
        "h200_refused": len(h2["refused"]),
        "h200_time_worst": h2["worst_time"],
        "h200_memory_worst": h2["worst_memory"],
        "h200_2021_memory": validation.h200_runs(precision="2021")[0].memory_error,
        "z3_doubled_175": e175["ratios"][1],
        "z3_doubled_175_pub": e175["published"][1],
        "z3_doubled_530": e530["ratios"][1],
        "z3_doubled_530_pub": e530["published"][1],
        "z3_largest_175": e175["ratios"][-1],
        "z3_largest_175_pub": e175["published"][-1],
        "z3_largest_530": e530["ratios"][-1],
        "z3_largest_530_pub": e530["published"][-1],
        "z3_hier_max": max(max(e["hierarchical"]) for e in (e175, e530)),
        "z3_small_175": e175["ratios"][0],
        "z3_small_175_pub": e175["published"][0],
        "z3_small_175_gpus": e175["gpus"][0],
        "z3_small_175_step": e175["zero3_step"][0],
        "z3_small_175_step_pub": e175["zero3_step_published"][0],
        "z3_small_175_step_none": e175["zero3_step_no_overlap"][0],
        "z3_small_530_gpus": e530["gpus"][0],
        "z3_small_530_gib": e530["zero3_gib"][0],
        "z3_limit_gib": e530["limit_gib"],
    }
    out["t1_old_within10"] = val["settled"]["within10"]
    out["t1_old_spearman"] = val["settled"]["spearman"]
    for key, m in (("asrun", "as run"), ("b1", "1"), ("plan", "planner")):
        out[f"t1_{key}_within10"] = modes[m]["within10"]
        out[f"t1_{key}_spearman"] = modes[m]["spearman"]
        out[f"t1_{key}_worst"] = modes[m]["worst"]
    return out


def table1_misses(val: dict | None = None) -> list[str]:
    """What contradicts the chapter's account of Table 1 at the planner's micro-batch (empty
    when it holds): every row within ±10 % of its measured step."""
    val = validation_summary() if val is None else val
    return [
        f"{r.name}: {r.error:+.1f} % ({'too slow' if r.error > 0 else 'too fast'})"
        for r in val["modes"]["planner"]["rows"]
        if abs(r.error) > 10
    ]


def worked_layouts(
    model: str = "llama2-70b", gpus: int = 256, batch: int = 512, gpu: str = "H100-SXM"
) -> dict:
    """The best 3D layout with ZeRO-1 (p > 1), the best FSDP-only (t = p = 1, ZeRO-3) and the
    best FSDP + TP (p = 1, ZeRO-3, t > 1) for one model on one cluster."""
    m, cluster = planner.MODELS[model], planner.cluster(gpus, 8, gpu)

    def best(configs):
        fitting = [c for c in configs if c.fits]
        return min(fitting, key=lambda c: c.step_seconds) if fitting else None

    three_d = best(c for c in planner.search(m, cluster, batch, planner.Space(zero=1)) if c.pp > 1)
    fsdp = best(planner.search(m, cluster, batch, planner.Space(tp=1, pp=1, zero=3)))
    fsdp_tp = best(
        c for c in planner.search(m, cluster, batch, planner.Space(pp=1, zero=3)) if c.tp > 1
    )
    return {"3D (ZeRO-1)": three_d, "FSDP only": fsdp, "FSDP + TP": fsdp_tp}


def cost_per_token(
    model: str = "llama2-70b",
    gpus: int = 64,
    batch: int = 256,
    price_nvlink: float = 2.69,
    price_pcie: float = 1.99,
    zero3_collectives: str | None = None,
) -> dict:
    """Best layout and $ per million tokens on H100 SXM (NVLink) and H100 PCIe servers, same
    InfiniBand between nodes, at the given $/GPU-hour; a third row keeps the SXM compute and
    price but puts a PCIe link between the GPUs, to separate the link from the chip.
    ``zero3_collectives``: as :func:`minipar.cost.planner.three_d.evaluate` (``None``: the planner's
    default, NCCL's hierarchical algorithm; ``"flat-ring"``: DeepSpeed's 2021 rate)."""
    z3 = {} if zero3_collectives is None else {"zero3_collectives": zero3_collectives}
    options = planner.Options(**z3)
    m = planner.MODELS[model]
    out = {}
    rows = (
        ("NVLink (H100 SXM)", GPUS["H100-SXM"], "nvlink4-h100", price_nvlink),
        ("PCIe (H100 PCIe)", H100_PCIE, "pcie5-x16", price_pcie),
        # what the link alone costs: SXM compute behind a PCIe link, at the SXM price
        ("SXM compute, PCIe link", GPUS["H100-SXM"], "pcie5-x16", price_nvlink),
    )
    for name, gpu, intra, price in rows:
        cluster = replace(planner.cluster(gpus, 8, "H100-SXM", intra=intra), gpu=gpu)
        c = next(c for c in planner.search(m, cluster, batch, options=options) if c.fits)
        tokens = batch * m.seq
        out[name] = {
            "config": c,
            "price": price,
            "usd_per_million_tokens": planner.dollars_per_million_tokens(
                c.step_seconds, gpus, tokens, price
            ),
            "tokens_per_gpu_second": tokens / c.step_seconds / gpus,
        }
    return out


def cost_comparison(
    price_nvlink: float = 2.69,
    price_pcie: float = 1.99,
    model: str = "llama2-70b",
    gpus: int = 64,
    batch: int = 256,
) -> dict:
    """:func:`cost_per_token` and what the chapter reads from it: ``rows`` (the three servers),
    ``usd`` per million tokens (NVLink, PCIe, SXM compute behind a PCIe link), the link's own
    penalty and the price gap in %, ``facts`` (which is cheaper; the PCIe part beats the third
    row; the link's penalty is below the price gap), the sentence saying which server buys the
    cheaper token, what the PCIe part's token says about its chip, and ``usd_flat`` (NVLink,
    PCIe) with ZeRO-3's collectives across nodes as DeepSpeed's 2021 flat ring (one NIC's rate
    per GPU, Narayanan et al. 2021 §5.2) and whether the NVLink server's best layout is then
    still a ZeRO-3 one (``flat_nvlink_zero3``; ``flat_best`` says it in the page's words)."""
    rows = cost_per_token(model, gpus, batch, price_nvlink, price_pcie)
    flat = cost_per_token(
        model, gpus, batch, price_nvlink, price_pcie, zero3_collectives="flat-ring"
    )
    nv, pc, link_only = (r["usd_per_million_tokens"] for r in rows.values())
    penalty, gap = 100 * (link_only / nv - 1), 100 * (price_nvlink / price_pcie - 1)
    cheap, dear, cheaper = (nv, pc, "NVLink") if nv < pc else (pc, nv, "PCIe")
    first = next(iter(flat.values()))
    return {
        "rows": rows,
        "usd": (nv, pc, link_only),
        "link_penalty": penalty,
        "price_gap": gap,
        "facts": {
            "nvlink_cheapest": nv < pc,
            "pcie_part_beats_link_only": pc < link_only,
            "link_penalty_below_price_gap": penalty < gap,
        },
        "cheaper_token": (
            f"the {cheaper} server buys the cheaper token ({cheap:.3f} "
            f"against {dear:.3f} dollars per million tokens, "
            f"{100 * (dear / cheap - 1):.0f} % apart)"
        ),
        "pcie_part": (
            f"buys its token at {pc:.3f}, "
            + (
                "less than that third row: its lower price more than makes up for the slower chip"
                if pc < link_only
                else "more than that third row: the slower chip costs more than its "
                "lower price saves"
            )
        ),
        "nvlink_zero3": rows["NVLink (H100 SXM)"]["config"].zero == 3,
        "usd_flat": tuple(r["usd_per_million_tokens"] for r in list(flat.values())[:2]),
        "flat_nvlink_zero3": first["config"].zero == 3,
        "flat_best": "still a ZeRO-3 one" if first["config"].zero == 3 else "another",
    }


def smallest_cluster_that_fits(
    model: str = "llama2-70b",
    batch: int = 64,
    seq: int = 4096,
    gpu: str = "A100-80GB",
    max_gpus: int = 512,
) -> "planner.Config":
    """The fewest GPUs (a multiple of 8) on which some layout of full fine-tuning with
    mixed-precision Adam fits; the best layout there. Model states alone need 16Ψ bytes."""
    m = replace(planner.MODELS[model], seq=seq)
    for n in range(8, max_gpus + 1, 8):
        if batch % n and n % batch:
            continue
        fitting = [c for c in planner.search(m, planner.cluster(n, 8, gpu), batch) if c.fits]
        if fitting:
            return fitting[0]
    raise ValueError(f"nothing fits on up to {max_gpus} GPUs")


def tp_share(model: str = "mt-nlg-530b", gpus: int = 2240, batch: int = 1920) -> dict:
    """Share of the step spent in TP collectives for t = 8 (in a node) and t = 16 (across two
    nodes), same p, on the A100 preset's links."""
    m, cluster = planner.MODELS[model], planner.cluster(gpus, 8, "A100-80GB")
    return {
        t: planner.evaluate(
            m,
            cluster,
            planner.Layout(
                batch,
                tp=t,
                pp=35,
                dp=gpus // (35 * t),
                micro_batch=1,
                recompute="selective",
                sp=True,
                zero=1,
            ),
        )
        for t in (8, 16)
    }
