"""The frozen planner on modern published throughputs (``measurements/published_modern.json``,
its sources named there), evaluated only after ``frozen_model.json`` was committed: inputs as
published, each row's error in step time, and beside it a constant-MFU baseline (every run at
:data:`BASELINE_MFU` of the dense bf16 peak, the planner's own model FLOPs per step), which says
how much the model's detail buys. Every row the planner cannot price as published is listed
with the reason (:func:`why_not`). Kept apart from every calibration set: nothing here was
fitted."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..planner import three_d as planner

DATA = Path(__file__).resolve().parent / "measurements" / "published_modern.json"
BASELINE_MFU = 0.40
"""The constant-MFU baseline: 40 % of the dense bf16 peak, the middle of the 35-45 % such runs
are commonly quoted at (an assumed figure, chosen before these rows were read)."""

PRESETS = {"llama3_8b": "llama3-8b", "llama3_70b": "llama3-70b", "llama3_405b": "llama3-405b"}


def load() -> dict:
    return json.loads(DATA.read_text())


def _measured(row: dict, quantity: str):
    return next((m["value"] for m in row["measured"] if m["quantity"] == quantity), None)


def _seq(row: dict) -> int | None:
    return row.get("seq_len") or (row.get("config_defaults") or {}).get("seq_len", {}).get("value")


def why_not(row: dict) -> str | None:
    """Why the frozen planner cannot price ``row`` as published, or ``None``."""
    if str(row.get("precision") or "").lower() != "bf16":
        return "not BF16 (FP8 or unstated): the frozen model has no FP8 recipe"
    if row.get("compile"):
        return "torch.compile: the frozen model prices eager kernels one by one"
    if row.get("model_key") not in PRESETS:
        return "no preset for this shape"
    if _measured(row, "tokens_per_s_per_gpu") is None or not _seq(row):
        return "no throughput or sequence length published"
    return None


def evaluate_row(row: dict, gpu: str = "H100-SXM") -> dict:
    """One published row on the frozen planner: the published layout (FSDP = ZeRO-3 over the
    data-parallel ranks, else Megatron's distributed optimizer, ZeRO-1), the shape's preset,
    the era's defaults otherwise, on the ``gpu`` preset."""
    m = planner.MODELS[PRESETS[row["model_key"]]]
    seq = _seq(row)
    m = replace(m, seq=seq) if seq != m.seq else m
    cl = planner.cluster(row["gpus"], min(8, row["gpus"]), gpu)
    lay = planner.Layout(
        row["global_batch"],
        row["tp"],
        row["pp"],
        row["dp"],
        row["micro_batch"],
        recompute=row["recompute"] or "selective",
        sp=row["tp"] > 1,
        zero=3 if row.get("fsdp") else 1,
        cp=row["cp"],
    )
    c = planner.evaluate(m, cl, lay)
    tps = _measured(row, "tokens_per_s_per_gpu")
    measured = row["global_batch"] * seq / (row["gpus"] * tps)
    baseline = planner.model_flops(m, row["global_batch"], "none")[0] / (
        row["gpus"] * cl.peak * BASELINE_MFU
    )
    return {
        "id": row["id"],
        "gpu": row["gpu"],
        "measured_s": measured,
        "predicted_s": c.step_seconds,
        "error": 100 * (c.step_seconds / measured - 1),
        "baseline_error": 100 * (baseline / measured - 1),
        "predicted_gib": c.bytes_per_gpu / 2**30,
        "measured_gib": _measured(row, "peak_memory"),
        "fits": c.fits,
    }


def summary() -> dict:
    """Every priceable row evaluated on the frozen H100-SXM preset, the share within ±15 % for
    the model and the baseline, and every other row's reason; ``post_hoc``: the torchtitan rows
    again on the ``H100-HBM2e-500W`` preset, which was added after they were read (its error
    is not a validation)."""
    rows = load()["rows"]
    done = [evaluate_row(r) for r in rows if why_not(r) is None]
    hbm2e = [r for r in rows if why_not(r) is None and "HBM2e" in r["gpu"]]
    return {
        "rows": done,
        "post_hoc": [evaluate_row(r, "H100-HBM2e-500W") for r in hbm2e],
        "n": len(done),
        "within15": sum(abs(r["error"]) <= 15 for r in done),
        "baseline_within15": sum(abs(r["baseline_error"]) <= 15 for r in done),
        "not_evaluated": {r["id"]: why_not(r) for r in rows if why_not(r) is not None},
    }
