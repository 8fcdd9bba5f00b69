"""The frozen planner on modern published throughputs (``measurements/published_modern.json``,
its sources named there): inputs as published, each row's error in step time, and beside it a
constant-MFU baseline (every run at :data:`BASELINE_MFU` of the dense bf16 peak of an H100 SXM,
the planner's own model FLOPs per step), which says how much the model's detail buys.

The rows are split before the model was changed (:data:`CALIBRATION`): three torchtitan rows of
December 2024 (Llama 3.1 8B on 8 GPUs: bf16 eager, bf16 compiled, Float8 compiled) set the three
constants :mod:`minipar.cost.validation.modern_fit` fits; every other row is a validation row,
evaluated only after the model's form and constants were frozen (``frozen_model.json``). The
rows had been read once before (two bf16 rows were evaluated on the model of the day, which
showed it too fast); the split and the row-to-layout mapping below were written before any
validation row was evaluated on the changed model. Every row the planner cannot price as
published is listed with the reason (:func:`why_not`).

Experiment 2 (:func:`summary_2`) is a second, separate one: the 15 rows the first freeze could
not price (torchtitan's async TP, and FP8 rowwise scaling; :func:`experiment`) were priced only
after the model gained two switches with no fitted constant (``Options.tp_overlap``, fp8
"rowwise") and was frozen again; experiment 1's rows, mapping and results stay as they were
(:func:`summary`). NVIDIA's rows with TP, seen in experiment 1, are re-evaluated with
``tp_overlap`` only as a post-hoc column, never counted."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..planner import three_d as planner
from ..planner.three_d_terms import Options

DATA = Path(__file__).resolve().parent / "measurements" / "published_modern.json"
BASELINE_MFU = 0.40
"""The constant-MFU baseline: 40 % of the dense bf16 peak, the middle of the 35-45 % such runs
are commonly quoted at (an assumed figure, chosen before these rows were read)."""
BASELINE_PEAK = 989.4e12
"""The baseline's peak: an H100 SXM's dense bf16 datasheet figure for every row (the baseline
knows nothing of a part's power limit or of FP8)."""

CALIBRATION = {
    "tt2412-1-8b-8gpu-fsdp": "POWER_500W",
    "tt2412-1-8b-8gpu-fsdp-torchcompile": "COMPILED_TRAFFIC",
    "tt2412-1-8b-8gpu-fsdp-torchcompile-float8": "FP8_GEMM_EFFICIENCY",
}
"""Calibration rows, each with the constant it sets (:mod:`minipar.cost.validation.modern_fit`):
one source, one shape, one GPU count, so that every other source stays wholly held out; the
three differ by one switch each (compile, then Float8), which is what makes each constant
identifiable from one row."""

PRESETS = {
    "llama3_8b": "llama3-8b",
    "llama3_70b": "llama3-70b",
    "llama3_405b": "llama3-405b",
    "LLAMA2-7B": "llama2-7b",
    "LLAMA2-13B": "llama2-13b",
    "LLAMA2-70B": "llama2-70b",
    "GPT3-5B": "gpt3-5b",
    "GPT3-20B": "gpt3-20b",
    "GPT3-175B": "gpt3-175b",
    "Nemotron-8B": "nemotron-8b",
    "Nemotron-340B": "nemotron-340b",
    "nemotron4_15b": "nemotron4-15b",
}
"""A row's ``model_key`` (or, where it has none, its ``model`` as printed) → the planner's
preset (:data:`minipar.cost.planner.three_d.MODELS`, each citing its configuration)."""


def load() -> dict:
    return json.loads(DATA.read_text())


def role(row: dict) -> str:
    """``"calibration"`` for a row of :data:`CALIBRATION`, else ``"validation"``."""
    return "calibration" if row["id"] in CALIBRATION else "validation"


def _measured(row: dict, quantity: str):
    return next((m["value"] for m in row["measured"] if m["quantity"] == quantity), None)


def _default(row: dict, field: str):
    return row.get(field) or (row.get("config_defaults") or {}).get(field, {}).get("value")


def _preset(row: dict) -> str | None:
    return PRESETS.get(row.get("model_key") or "") or PRESETS.get(row["model"])


def _torchtitan(row: dict) -> bool:
    return row["source"].startswith("torchtitan")


def _rowwise(row: dict) -> bool:
    return "rowwise" in str(row.get("precision_detail") or "")


def experiment(row: dict) -> int:
    """2 for a row the first freeze could not price (FP8 rowwise scaling, or async TP), priced
    in experiment 2 (:func:`summary_2`); else 1."""
    return 2 if _rowwise(row) or row.get("async_tp") else 1


EXPERIMENT_2 = {
    "rowwise": "FP8 rowwise scaling: experiment 2's row (the first freeze had tensorwise and "
    "delayed scaling only)",
    "async_tp": "async TP: experiment 2's row (the first freeze did not overlap TP collectives "
    "with GEMMs)",
}
"""Experiment 1's reason (:func:`summary`) for each row of experiment 2."""


def why_not(row: dict, exp: int = 1) -> str | None:
    """Why the planner cannot price ``row`` as published in experiment ``exp``, or ``None``;
    experiment 1 leaves out experiment 2's rows (:data:`EXPERIMENT_2`), experiment 2 every
    row of experiment 1 ("experiment 1's row")."""
    precision = str(row.get("precision") or "").lower()
    if not precision:
        return "precision not published"
    if exp == 1 and _rowwise(row):
        return EXPERIMENT_2["rowwise"]
    if exp == 1 and row.get("async_tp"):
        return EXPERIMENT_2["async_tp"]
    if exp == 2 and experiment(row) == 1:
        return "experiment 1's row"
    if _preset(row) is None:
        return "no preset for this shape (MoE, or an architecture the page does not give)"
    if row.get("tp") is None or row.get("pp") is None or row.get("dp") is None:
        return "layout (TP, PP, DP) not published"
    if _measured(row, "tokens_per_s_per_gpu") is None or not _default(row, "seq_len"):
        return "no throughput or sequence length published"
    if not _default(row, "micro_batch"):
        return "no micro-batch published or set by the run's configuration"
    return None


def options_for(row: dict) -> Options:
    """The switches a row ran with, as published, by its stack: torchtitan (PyTorch SDPA, i.e.
    FlashAttention-2: "flash"; torchao Float8's tensorwise dynamic scaling: fp8 "current",
    or "rowwise" where the row says rowwise; async TP: ``tp_overlap`` where the row says so;
    compiled only when the row says torch.compile; the checkpoint wrapper inside each FSDP
    unit; context parallelism by PyTorch's ``context_parallel``, whose default rotation then
    was the all-gather of K/V: "all-gather") or NVIDIA's Megatron-Core (Transformer Engine: cuDNN fused attention, "fa3"; FP8
    "delayed" unless the row says ``fp8-cs``; fused kernels, priced as compiled; the gradient
    reduction overlapped with the backward, ``--overlap-grad-reduce``)."""
    precision = str(row["precision"]).lower()
    tt = _torchtitan(row)
    fp8 = None if precision == "bf16" else ("current" if tt or precision == "fp8-cs" else "delayed")
    return Options(
        tp_overlap=bool(row.get("async_tp")),
        attention="flash" if tt else "fa3",
        fp8="rowwise" if fp8 and _rowwise(row) else fp8,
        compiled=bool(row.get("compile")) or not tt,
        overlap_grad_reduce=not tt,
        zero3_ac_inside_unit=tt,
        cp_algorithm="all-gather" if tt else "ring",
    )


def gpu_for(row: dict) -> str:
    """The GPU preset of a row's hardware."""
    if "HBM2e" in row["gpu"]:
        return "H100-HBM2e-500W"
    return "H200" if row["gpu"].startswith("H200") else "H100-SXM"


def layout_for(row: dict, recompute: str) -> planner.Layout:
    """A row's published layout: FSDP = ZeRO-3 over the data-parallel ranks, else Megatron's
    distributed optimizer (ZeRO-1); vp chunks per stage (interleaved 1F1B); the embedding and
    the head as pipeline units where the layers do not divide evenly (Megatron-Core's
    ``account_for_embedding/loss_in_pipeline_split``)."""
    m = planner.MODELS[_preset(row)]
    vp = _default(row, "vp") or 1
    return planner.Layout(
        row["global_batch"],
        row["tp"],
        row["pp"],
        row["dp"],
        _default(row, "micro_batch"),
        chunks=vp,
        recompute=recompute,
        sp=row["tp"] > 1,
        zero=3 if row.get("fsdp") else 1,
        cp=row["cp"] or 1,
        split="even" if m.layers % (row["pp"] * vp) == 0 else "units",
    )


def _config(row: dict, gpu=None, tp_overlap: bool | None = None):
    """The planner's :class:`Config` for ``row``: its recomputation as published, else the least
    one that fits (none, selective, full: what a tuned recipe picks; the NVIDIA pages do not
    publish it); ``tp_overlap``, where given, in place of the row's (the post-hoc column)."""
    m = planner.MODELS[_preset(row)]
    seq = _default(row, "seq_len")
    m = replace(m, seq=seq) if seq != m.seq else m
    cluster = planner.cluster(row["gpus"], min(8, row["gpus"]), gpu or gpu_for(row))
    options = options_for(row)
    if tp_overlap is not None:
        options = replace(options, tp_overlap=tp_overlap)
    tries = [row["recompute"]] if row.get("recompute") else ["none", "selective", "full"]
    for rc in tries:
        c = planner.evaluate(m, cluster, layout_for(row, rc), options)
        if c.fits:
            break
    return m, c


def evaluate_row(row: dict, gpu=None, tp_overlap: bool | None = None) -> dict:
    """One published row on the planner (:func:`layout_for`, :func:`options_for`,
    :func:`gpu_for` unless ``gpu`` is given, the row's TP overlap unless ``tp_overlap`` is):
    measured and predicted step time, the error and the baseline's."""
    m, c = _config(row, gpu, tp_overlap)
    seq = m.seq
    tps = _measured(row, "tokens_per_s_per_gpu")
    measured = row["global_batch"] * seq / (row["gpus"] * tps)
    baseline = planner.model_flops(m, row["global_batch"], "none")[0] / (
        row["gpus"] * BASELINE_PEAK * BASELINE_MFU
    )
    return {
        "id": row["id"],
        "role": role(row),
        "model": row["model"],
        "gpu": getattr(gpu, "name", gpu) or gpu_for(row),
        "gpus": row["gpus"],
        "precision": row["precision"],
        "recompute": c.layout.recompute,
        "measured_s": measured,
        "predicted_s": c.step_seconds,
        "error": 100 * (c.step_seconds / measured - 1),
        "baseline_error": 100 * (baseline / measured - 1),
        "predicted_gib": c.bytes_per_gpu / 2**30,
        "measured_gib": _measured(row, "peak_memory"),
        "fits": c.fits,
    }


def _evaluated(exp: int, band: float) -> dict:
    """Experiment ``exp``'s priceable rows evaluated, the counts within ±``band`` %, the
    calibration rows apart and every other row with its reason."""
    done, calibration, refused = [], [], {}
    for r in load()["rows"]:
        reason = why_not(r, exp)
        if reason is not None:
            refused[r["id"]] = reason
            continue
        try:
            e = evaluate_row(r)
        except ValueError as err:
            refused[r["id"]] = f"refused by the planner: {err}"
            continue
        (calibration if e["role"] == "calibration" else done).append(e)
    return {
        "rows": done,
        "calibration": calibration,
        "n": len(done),
        "within": sum(abs(r["error"]) <= band for r in done),
        "baseline_within": sum(abs(r["baseline_error"]) <= band for r in done),
        "band": band,
        "not_evaluated": refused,
    }


def summary(band: float = 15.0) -> dict:
    """Experiment 1: every priceable validation row evaluated, the number within ±``band`` % for
    the model and the baseline; the calibration rows apart (their errors are fits, not checks);
    every other row with its reason, a row the planner refuses with the planner's message."""
    return _evaluated(1, band)


def post_hoc(band: float = 15.0) -> dict:
    """Experiment 1's NVIDIA rows with TP (Megatron-Core's ``--tp-comm-overlap`` recipes)
    re-evaluated with ``tp_overlap``: POST HOC, these rows having been seen in experiment 1;
    never counted in either experiment."""
    rows = {r["id"]: r for r in load()["rows"]}
    out = []
    for e in summary(band)["rows"]:
        r = rows[e["id"]]
        if not _torchtitan(r) and (r["tp"] or 1) > 1:
            again = evaluate_row(r, tp_overlap=True)
            out.append(e | {"post_hoc_s": again["predicted_s"], "post_hoc_error": again["error"]})
    return {
        "rows": out,
        "n": len(out),
        "within": sum(abs(r["post_hoc_error"]) <= band for r in out),
        "band": band,
    }


def summary_2(band: float = 15.0) -> dict:
    """Experiment 2: the rows of :func:`experiment` 2 (async TP, FP8 rowwise), evaluated after
    the second freeze, as :func:`summary` does; and the post-hoc column (:func:`post_hoc`),
    apart."""
    return _evaluated(2, band) | {"post_hoc": post_hoc(band)}


RECORD = Path(__file__).resolve().parent / "modern_as_evaluated.json"


def as_evaluated(exp: int = 1, band: float = 15.0) -> dict:
    """Experiment ``exp`` (1 or 2) as it was evaluated once after its freeze (:data:`RECORD`),
    in :func:`summary`'s form, experiment 2 with its post-hoc column: the record of what the
    frozen model predicted, not the planner of today (changed since, with experiment 3 as its
    calibration set)."""
    rec = json.loads(RECORD.read_text())
    part = rec[f"experiment_{exp}"]
    done = part["rows"]
    out = {
        "rows": done,
        "calibration": part["calibration"],
        "n": len(done),
        "within": sum(abs(r["error"]) <= band for r in done),
        "baseline_within": sum(abs(r["baseline_error"]) <= band for r in done),
        "band": band,
        "not_evaluated": part["not_evaluated"],
    }
    if exp == 2:
        post = rec["post_hoc"]
        out["post_hoc"] = {
            "rows": post,
            "n": len(post),
            "within": sum(abs(r["post_hoc_error"]) <= band for r in post),
            "band": band,
        }
    return out
