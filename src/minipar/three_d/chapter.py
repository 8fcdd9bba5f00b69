"""Pure-Python helpers behind the chapter's notebook (no torch): the worked layout, cost per token,
and the published settings the planner is checked against. Everything comes from
:mod:`minipar.cost.three_d`; this module only chooses inputs and collects rows.
"""
from __future__ import annotations

from dataclasses import replace

from minipar.cost import three_d as planner
from minipar.cost.hardware import GPU, GPUS

# The PCIe H100 has less compute than the SXM part, not only a slower link: 756 dense bf16
# TFLOP/s (the datasheet's 1,513 is with 2:4 sparsity), 80 GB HBM2e.
H100_PCIE = GPU("H100-PCIe", 80 * 2**30, {"bf16": 756e12},
                source="NVIDIA H100 Tensor Core GPU datasheet (PCIe, dense)",
                note="1,513 TFLOP/s bf16 'with sparsity' halved")

# A100 clusters of 2020-2022 (DGX A100): NVLink 3 = 300 GB/s per direction per GPU, HDR
# InfiniBand 200 Gb/s = 25 GB/s per GPU (one NIC per GPU).
A100_LINKS = dict(intra_bandwidth=300e9, inter_bandwidth=25e9)

PUBLISHED = {
    # name: (model preset or shape override, gpus, global batch, published (t, p, d), source)
    "MT-NLG 530B": ("mt-nlg-530b", {}, 2240, 1920, (8, 35, 8),
                    "Smith et al. 2022, §3: 280 DGX A100 nodes"),
    "BLOOM 176B": ("bloom-176b", {"layers": 72}, 384, 2048, (4, 12, 8),
                   "BigScience 2022, §3.4: 48 nodes of 8 A100 (70 layers + 2 embedding units)"),
}


def published_rows(top: int = 3) -> dict:
    """For each published setting: the planner's best ``top`` layouts and the published one."""
    out = {}
    for name, (preset, override, gpus, batch, (t, p, d), source) in PUBLISHED.items():
        m = replace(planner.MODELS[preset], **override)
        cl = planner.cluster(gpus, 8, "A100-80GB", **A100_LINKS)
        ranked = [c for c in planner.search(m, cl, batch) if c.fits]
        pub = [c for c in ranked if (c.tp, c.pp, c.dp) == (t, p, d)]
        out[name] = {"best": ranked[:top], "published": (t, p, d),
                     "published_rank": next(i for i, c in enumerate(ranked)
                                            if (c.tp, c.pp, c.dp) == (t, p, d)) + 1,
                     "published_best": pub[0], "source": source, "gpus": gpus, "batch": batch}
    return out


def worked_layouts(model: str = "llama2-70b", gpus: int = 256, batch: int = 512,
                   gpu: str = "H100-SXM") -> dict:
    """The best 3D layout (ZeRO ≤ 1), the best FSDP-only (t = p = 1, ZeRO-3) and the best
    FSDP + TP (p = 1, ZeRO-3, t > 1) for one model on one cluster."""
    m, cl = planner.MODELS[model], planner.cluster(gpus, 8, gpu)
    def best(configs):
        fitting = [c for c in configs if c.fits]
        return fitting[0] if fitting else None
    three_d = best(c for z in (0, 1) for c in planner.search(m, cl, batch, zero=z))
    fsdp = best(planner.search(m, cl, batch, tp=1, pp=1, zero=3))
    fsdp_tp = best(c for c in planner.search(m, cl, batch, pp=1, zero=3) if c.tp > 1)
    return {"3D (ZeRO-1)": three_d, "FSDP only": fsdp, "FSDP + TP": fsdp_tp}


def cost_per_token(model: str = "llama2-70b", gpus: int = 64, batch: int = 256,
                   price_nvlink: float = 2.69, price_pcie: float = 1.99) -> dict:
    """Best layout and $ per million tokens on H100 SXM (NVLink) and H100 PCIe servers, same
    InfiniBand between nodes, at the given $/GPU-hour; a third row keeps the SXM compute and
    price but puts a PCIe link between the GPUs, to separate the link from the chip."""
    m = planner.MODELS[model]
    out = {}
    rows = (("NVLink (H100 SXM)", GPUS["H100-SXM"], "nvlink4-h100", price_nvlink),
            ("PCIe (H100 PCIe)", H100_PCIE, "pcie5-x16", price_pcie),
            # what the link alone costs: SXM compute behind a PCIe link, at the SXM price
            ("SXM compute, PCIe link", GPUS["H100-SXM"], "pcie5-x16", price_nvlink))
    for name, gpu, intra, price in rows:
        cl = replace(planner.cluster(gpus, 8, "H100-SXM", intra=intra), gpu=gpu)
        c = next(c for c in planner.search(m, cl, batch) if c.fits)
        tokens = batch * m.seq
        out[name] = {"config": c, "price": price,
                     "usd_per_million_tokens": planner.dollars_per_million_tokens(
                         c.step_seconds, gpus, tokens, price),
                     "tokens_per_gpu_second": tokens / c.step_seconds / gpus}
    return out


def smallest_cluster_that_fits(model: str = "llama2-70b", batch: int = 64, seq: int = 4096,
                               gpu: str = "A100-80GB", max_gpus: int = 512) -> "planner.Config":
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
    """Share of the step spent in TP all-reduces for t = 8 (in a node) and t = 16 (across two
    nodes), same p, on A100 links."""
    m, cl = planner.MODELS[model], planner.cluster(gpus, 8, "A100-80GB", **A100_LINKS)
    out = {}
    for t in (8, 16):
        c = planner.evaluate(m, cl, batch, tp=t, pp=35, dp=gpus // (35 * t), micro_batch=1,
                             recompute="selective", sp=True, zero=1)
        out[t] = c
    return out
