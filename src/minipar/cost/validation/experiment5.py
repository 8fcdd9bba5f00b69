"""Experiment 5: the frozen planner on published mixture-of-experts and Blackwell rows
(``measurements/published_moe.json``, its sources named there): every MoE row of NVIDIA's
Megatron-Bridge performance summaries and the measured rows of the DGX Cloud Benchmarking
recipes' DeepSeek-V3 and Qwen3 pages, on H100, B200 and GB200 NVL72 (the dense Blackwell rows
are experiment 4's). Inputs as published; each kept row's error in step time beside the fair
baseline of :mod:`.baseline` (one constant MFU per precision family of the datasheet peak,
fitted on calibration rows only: :func:`calibration`), counted by independent layout. This
mapping was written and committed before any row was read or evaluated; the model's form and
constants are those of the freeze (:data:`FREEZE`), not touched after.

The mapping, decided up front, per row:

- The model: the planner's preset of the published model name (:data:`PRESETS`); a model
  without one is left out, with its reason. The published sequence length replaces the
  preset's.
- The GPU: the preset of the published system (the rows' ``system``: DGX-H100 as ``H100-SXM``,
  DGX-B200 as ``B200``, GB200 NVL72 as ``GB200-NVL72``), GPUs per NVLink domain as ``minipar plan`` takes them (8 on a
  baseboard; on a rack the largest divisor of the GPU count up to 72).
- The layout as published: t, p, cp, ep, vp, micro- and global batch; d = GPUs/(t·p·cp);
  Megatron's distributed optimizer (ZeRO-1), FSDP where published (ZeRO-3); expert tensor
  parallelism above 1 is not priced (the planner folds ETP = 1): such a row is left out. The
  pipeline split: even where p·vp divides the layers, else the embedding and the head as
  units (Megatron-Core's ``account_for_embedding/loss_in_pipeline_split``); where neither
  split allows the published vp (DeepSeek-V3's 61 layers, which Megatron-Bridge lays out by
  hand), the largest v that one does, down to 1 (decided after reading the rows' layouts,
  before evaluating any).
- The switches of NVIDIA's Megatron-Core recipes, as experiment 3 prices them: Transformer
  Engine's fused kernels priced as compiled, the gradient reduction overlapped, context
  parallelism as a ring, TP communication overlap on for t > 1; the attention kernel cuDNN's
  fused one, priced as "fa3" on Hopper and as the GPU's own fused rate ("flash") on Blackwell.
- The precision as labelled: BF16; FP8 "cs" (current scaling) as ``current``, "mx" as
  ``mxfp8``, an FP8 row without a recipe as ``delayed`` on Hopper and ``mxfp8`` on Blackwell
  (the recipes' defaults); FP4 (NVFP4) is not priced: left out.
- MoE: dropless (no capacity factor unless published), imbalance 1 (NVIDIA's performance runs
  balance the router's load by construction; no imbalance is published), the all-to-alls not
  overlapped unless the table or its recipe says so (``ep_overlap``).
- The recomputation as published (Megatron-Core's ``--recompute-modules``: selective, with the
  modules the planner prices, ``mla_up_proj`` not among them), else the least that fits (none,
  selective, full), priced as run where published even if the memory model says it does not
  fit (reported as ``fits``).
- The measured step time: the published seconds per step where printed, else global batch ×
  sequence / (GPUs × published tokens/s/GPU).

Not priced by the planner, and so part of any error: multi-token prediction modules, MLA's
low-rank projections (priced as h/a-head QKV), the dense-first layers' own MLP width, DualPipe's
bubble, the router's load-balancing loss, FP8 all-to-alls (DeepEP dispatches FP8)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..kernels import hardware
from ..model import moe_flops_per_token
from ..planner import three_d as planner
from ..planner.three_d_terms import RECOMPUTE_MODULES, Options
from . import baseline, fair

DATA = Path(__file__).resolve().parent / "measurements" / "published_moe.json"
RECORD = Path(__file__).resolve().parent / "experiment5_as_evaluated.json"

PRESETS = {
    "DeepSeek-V3": "deepseek-v3",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Mixtral-8x22B": "mixtral-8x22b",
    "Mixtral-8x7B": "mixtral-8x7b",
}
"""The planner's preset of each published model name (as the rows file spells it)."""

BLACKWELL = ("B200", "GB200-NVL72")


def load() -> dict:
    return json.loads(DATA.read_text())


def kept_rows() -> list[dict]:
    """The rows experiment 5 prices (``kept``); every other row says why not
    (``excluded_because``)."""
    return [r for r in load()["rows"] if r["kept"]]


def gpus_per_node(gpu: str, gpus: int) -> int:
    """GPUs per NVLink domain as ``minipar plan`` takes them: the preset's domain, of a rack's
    domain the largest share that divides the GPU count."""
    domain = hardware.gpu(gpu).nvlink_domain
    top = min(domain, gpus)
    if domain > 8 and gpus % top:
        top = max(k for k in range(1, top + 1) if gpus % k == 0)
    return top


def fp8_for(row: dict, gpu: str) -> str | None:
    """The FP8 recipe of a row's precision label (module docstring); ``None`` for BF16."""
    p = str(row["precision"]).lower()
    if p == "bf16":
        return None
    if "cs" in p:
        return "current"
    if "mx" in p:
        return "mxfp8"
    return "mxfp8" if gpu in BLACKWELL else "delayed"


def options_for(row: dict, gpu: str) -> Options:
    """The switches of the module docstring for ``row`` on ``gpu``."""
    return Options(
        tp_overlap=row["tp"] > 1,
        attention="flash" if gpu in BLACKWELL else "fa3",
        fp8=fp8_for(row, gpu),
        compiled=True,
        overlap_grad_reduce=True,
        cp_algorithm="ring",
        moe_capacity=row.get("capacity_factor"),
        ep_overlap=bool(row.get("ep_overlap")),
        recompute_modules=recompute_modules(row),
    )


def recompute_modules(row: dict) -> tuple[str, ...] | None:
    """The published ``--recompute-modules`` the planner prices (None: not published)."""
    mods = row.get("recompute_modules")
    return None if mods is None else tuple(m for m in mods if m in RECOMPUTE_MODULES)


def chunks_for(row: dict, m) -> int:
    """The published vp, else the largest v below it that the even or the "units" split allows
    (module docstring)."""
    p = row["pp"]
    for v in range(row.get("vp") or 1, 0, -1):
        if v == 1 or m.layers % (p * v) == 0 or (m.layers + 2) % (p * v) == 0:
            return v
    return 1


def layout_for(row: dict, m, recompute: str) -> planner.Layout:
    """The published layout (module docstring)."""
    vp = chunks_for(row, m)
    cp = row.get("cp") or 1
    dp = row["gpus"] // (row["tp"] * row["pp"] * cp)
    return planner.Layout(
        row["global_batch"],
        row["tp"],
        row["pp"],
        dp,
        row["micro_batch"],
        chunks=vp,
        recompute=recompute,
        sp=row["tp"] > 1,
        zero=3 if row.get("fsdp") else 1,
        cp=cp,
        ep=row.get("ep") or 1,
        split="even" if m.layers % (row["pp"] * vp) == 0 else "units",
    )


def config_for(row: dict):
    """(shape, GPU preset, :class:`Config`) of ``row``: the published recomputation, else the
    least that fits."""
    m = planner.MODELS[PRESETS[row["model"]]]
    if row["seq_len"] != m.seq:
        m = replace(m, seq=row["seq_len"])
    gpu = row["system"]
    cluster = planner.cluster(row["gpus"], gpus_per_node(gpu, row["gpus"]), gpu)
    tries = [row["recompute"]] if row.get("recompute") else ["none", "selective", "full"]
    for rc in tries:
        c = planner.evaluate(m, cluster, layout_for(row, m, rc), options_for(row, gpu))
        if c.fits:
            break
    return m, gpu, c


def measured_seconds(row: dict) -> float:
    """The published step time, else global batch × sequence / (GPUs × tokens/s/GPU)."""
    if row.get("step_seconds"):
        return row["step_seconds"]
    return row["global_batch"] * row["seq_len"] / (row["gpus"] * row["tokens_per_s_per_gpu"])


def model_flops(m, global_batch: int) -> float:
    """Model FLOPs of one step for the baseline: the published per-token count of the MoE shapes
    (:func:`minipar.cost.model.moe_flops_per_token`, without the MTP module, which the planner
    does not price either), else the planner's (:func:`minipar.cost.planner.three_d.model_flops`)."""
    if m.extended:
        return moe_flops_per_token(m, mtp=False) * global_batch * m.seq
    return planner.model_flops(m, global_batch, "none")[0]


def layout_key(row: dict, gpu: str) -> tuple:
    """One independent layout: everything but d, the GPU count and the global batch."""
    keys = ("tp", "pp", "cp", "ep", "vp", "micro_batch", "fsdp", "recompute_modules")
    values = (tuple(v) if isinstance(v, list) else v for v in (row.get(k) for k in keys))
    return (row["model"], row["seq_len"], row["precision"], gpu, *values)


def evaluate_row(row: dict) -> dict:
    """One kept row: measured and predicted step time, the error, and what
    :mod:`.baseline` reads (model FLOPs, GPUs, GPU, precision family, layout key)."""
    m, gpu, c = config_for(row)
    measured = measured_seconds(row)
    fam = "fp8" if fp8_for(row, gpu) else "bf16"
    return {
        "id": row["id"],
        "model": row["model"],
        "gpu": gpu,
        "gpus": row["gpus"],
        "precision": fam if fam == "bf16" else f"fp8-{fp8_for(row, gpu)}",
        "layout": [row["tp"], row["pp"], row.get("cp") or 1, row.get("ep") or 1, row.get("vp")]
        + [c.layout.chunks, c.layout.dp, row["micro_batch"]],
        "recompute": c.layout.recompute,
        "measured_s": measured,
        "predicted_s": c.step_seconds,
        "error": 100 * (c.step_seconds / measured - 1),
        "fits": c.fits,
        "model_flops": model_flops(m, row["global_batch"]),
        "layout_key": list(layout_key(row, gpu)),
    }


def calibration() -> list[dict]:
    """The rows the baseline's MFUs are fitted on: rows of earlier experiments only, none of
    this one (:func:`minipar.cost.validation.fair.calibration` for the experiment after the
    third freeze: experiment 3's dense DGX-H100 rows)."""
    return fair.calibration("4")


def summary(band: float = 15.0) -> dict:
    """Every kept row evaluated, scored beside the baseline (:func:`baseline.score`, its MFUs
    fitted on :func:`calibration`), by rows and by independent layout; the rows left out with
    their reasons."""
    rows = [evaluate_row(r) for r in kept_rows()]
    for e in rows:
        e["layout_key"] = tuple(e["layout_key"])
    s = baseline.score(rows, baseline.fit(calibration()), band)
    return s | {
        "rows": rows,
        "not_evaluated": {r["id"]: r["excluded_because"] for r in load()["rows"] if not r["kept"]},
    }


def as_evaluated() -> dict:
    """The record of the one evaluation (``experiment5_as_evaluated.json``: :func:`summary` at
    the commit it names), each row with its baseline error; what the appendix and the tests
    read, never recomputed."""
    rec = json.loads(RECORD.read_text())
    for e, b in zip(rec["rows"], rec["baseline_errors"], strict=True):
        e["layout_key"] = tuple(tuple(v) if isinstance(v, list) else v for v in e["layout_key"])
        e["baseline_error"] = b
    return rec
