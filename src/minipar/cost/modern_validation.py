"""The frozen planner on modern published throughputs (``measurements/modern_published.json``),
evaluated only after ``frozen_model.json`` was committed: inputs as published, each row's error
in step time, and beside it a constant-MFU baseline (every run at :data:`BASELINE_MFU` of the
dense bf16 peak, 6·N·D FLOPs per token as Kaplan et al. 2020 count them), which says how much the
model's detail buys. Kept apart from every calibration set: nothing here was fitted."""

from __future__ import annotations

import json
from pathlib import Path

from . import three_d as planner

DATA = Path(__file__).resolve().parent / "measurements" / "modern_published.json"
BASELINE_MFU = 0.40
"""The constant-MFU baseline: 40 % of the dense bf16 peak, the middle of the 35-45 % such runs
are commonly quoted at (an assumed figure, chosen before these rows were read)."""


def load() -> dict:
    return json.loads(DATA.read_text())


def evaluate_row(row: dict, gpu: str = "H100-SXM") -> dict:
    """One published row on the frozen planner: the published layout (FSDP = ZeRO-3 over the
    data-parallel ranks), the shape's preset, the era's defaults otherwise."""
    m = planner.MODELS[row["model"]]
    cl = planner.cluster(row["gpus"], row["gpus_per_node"], gpu)
    d = row["gpus"] // (row["tp"] * row["pp"] * row["cp"])
    lay = planner.Layout(
        row["global_batch"],
        row["tp"],
        row["pp"],
        d,
        row["micro_batch"],
        recompute=row["recompute"],
        zero=3 if row["fsdp"] else 1,
        cp=row["cp"],
    )
    c = planner.evaluate(m, cl, lay)
    tokens = row["global_batch"] * row["seq"]
    measured = tokens / (row["gpus"] * row["tokens_per_s_per_gpu"])
    flops = planner.model_flops(m, row["global_batch"], "none")[0]
    baseline = flops / (row["gpus"] * cl.peak * BASELINE_MFU)
    return {
        "row": f"{row['source']} {row['table']}",
        "measured_s": measured,
        "predicted_s": c.step_seconds,
        "error": 100 * (c.step_seconds / measured - 1),
        "baseline_error": 100 * (baseline / measured - 1),
        "predicted_gib": c.bytes_per_gpu / 2**30,
        "measured_gib": row["memory_gib"],
        "fits": c.fits,
    }


def summary() -> dict:
    """Every evaluated row, and the share within ±15 % for the model and for the baseline."""
    data = load()
    rows = [evaluate_row(r) for r in data["rows"]]
    n = len(rows)
    return {
        "rows": rows,
        "n": n,
        "within15": sum(abs(r["error"]) <= 15 for r in rows),
        "baseline_within15": sum(abs(r["baseline_error"]) <= 15 for r in rows),
        "not_evaluated": data["not_evaluated"],
    }
