"""Experiment 4: the planner frozen in ``planner/frozen_experiment4.json`` (the freeze commit
:data:`FREEZE_COMMIT`) on dense pre-training rows read only after that commit
(``measurements/published_current.json``): torchtitan's current benchmark tables and
Megatron-Bridge's current performance summary, inputs as published, every row read recorded,
each exclusion with its reason. Evaluated once, reported whatever it gives: the median |error|
in step time, the share of independent layouts within ±15 % (target ≥ 80 %), and beside them
the constant-MFU baseline fitted on experiment 3's rows only (:func:`fair.calibration`; target:
the model's median at most half the baseline's). No constant is fitted on these rows.

This mapping was written and committed before the freeze and before any of the rows was read:

- **Which rows.** Pre-training of a dense model with a planner preset
  (:data:`minipar.cost.validation.modern.PRESETS`) on a GPU with a preset (:data:`GPU_PRESETS`),
  its layout (t, p, d or the GPU count, the global batch, the sequence) and a throughput
  published. Left out, each with its reason: mixtures of experts (this experiment is the dense
  one), fine-tuning, a model or GPU without a preset, an unpublished layout or throughput, and a
  row already priced by experiments 1 to 3 (the same source's release, model, GPU count and
  layout).
- **The stack** decides the switches, as experiments 1 and 3 did. torchtitan:
  :func:`minipar.cost.validation.modern.options_for` (PyTorch SDPA as "flash", torchao's
  tensorwise scaling as fp8 "current", "rowwise" where the row says rowwise, async TP where it
  says so, compiled only where it says torch.compile, the checkpoint inside each FSDP unit, CP as
  an all-gather of K/V). Megatron-Bridge: the NVIDIA branch of the same function (Transformer
  Engine's fused kernels, priced as compiled; the gradient reduction overlapped; FP8 "current"
  for FP8-CS, "mxfp8" for MXFP8, else "delayed"), with TP communication overlap on for TP > 1
  (Megatron-Bridge's ``scripts/performance/utils/overrides.py``: ``tp_comm_overlap =
  tensor_model_parallel_size > 1``), as experiment 3 did; on a Blackwell part the attention
  kernel is the planner's choice for the part (``attention=None``), cuDNN's Hopper kernel
  ("fa3") being Hopper's.
- **The cluster**: the GPU's NVLink domain as ``minipar plan`` takes it (:func:`per_node`).
- **The layout**: :func:`minipar.cost.validation.modern.layout_for` (FSDP as ZeRO-3, else the
  distributed optimizer; v chunks; the "units" split where the layers do not divide), the
  recomputation as published, else the least that fits (none, selective, full), priced as run.
- **The measured step**: the published seconds per step where printed, else global batch ×
  sequence / (GPUs × published tokens/s/GPU).
- **Counts**: every kept row one row; rows that differ only in d, the GPU count or the container
  one independent layout (:func:`minipar.cost.validation.fair.layout_key`), within the band when
  every one of its rows is."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

from ..kernels import hardware
from ..planner import three_d as planner
from ..planner.three_d_terms import Options
from . import baseline, fair, modern

DATA = Path(__file__).resolve().parent / "measurements" / "published_current.json"
SNAPSHOT = Path(__file__).resolve().parents[1] / "planner" / "frozen_experiment4.json"
RECORD = Path(__file__).resolve().parent / "experiment4_as_evaluated.json"
"""The evaluation as it came out (:func:`summary` on the frozen model), kept when the freeze
ended: what the appendix and the tests read (:func:`as_evaluated`)."""
FREEZE_COMMIT = "62885ed"
"""The commit that holds :data:`SNAPSHOT` alone; set after it, before any row is read."""
BAND = 15.0
TARGETS = {"layouts_within_share": 0.80, "median_vs_baseline": 0.5}
"""Set before the freeze: ≥ 80 % of the independent layouts within ±15 %, and the model's median
|error| at most half the baseline's."""

GPU_PRESETS = {
    "H100-HBM2e": "H100-HBM2e-500W",
    "H100": "H100-SXM",
    "H200": "H200",
    "GB200": "GB200-NVL72",
    "B200": "B200",
}
"""A row's GPU as published (the first key its ``gpu`` starts with, in this order) → the
planner's preset; a GPU with none here is left out ("no preset for this GPU")."""

BLACKWELL = ("B200", "GB200-NVL72")


def load() -> dict:
    return json.loads(DATA.read_text())


def kept_rows() -> list[dict]:
    return [r for r in load()["rows"] if r["kept"]]


def gpu_for(row: dict) -> str | None:
    """The planner's preset for the row's GPU (:data:`GPU_PRESETS`), else ``None``."""
    g = str(row["gpu"])
    if "HBM2e" in g:
        return "H100-HBM2e-500W"
    name = g.upper().replace(" ", "")
    return next((v for k, v in GPU_PRESETS.items() if name.startswith(k)), None)


def _torchtitan(row: dict) -> bool:
    return row["source"].startswith("torchtitan")


def _fp8(row: dict) -> str | None:
    p = str(row["precision"]).lower()
    if p == "bf16":
        return None
    if _torchtitan(row):
        return "rowwise" if "rowwise" in str(row.get("precision_detail") or "") else "current"
    if p == "mxfp8":
        return "mxfp8"
    return "current" if p in ("fp8-cs", "fp8-current") else "delayed"


def options_for(row: dict) -> Options:
    """The switches of the module docstring, by stack."""
    o = modern.options_for(row | {"precision": "bf16" if _fp8(row) is None else "fp8"})
    o = replace(o, fp8=_fp8(row))
    if not _torchtitan(row):
        published = (row.get("config_defaults") or {}).get("tp_comm_overlap", {}).get("value")
        o = replace(o, tp_overlap=bool(published) if published is not None else row["tp"] > 1)
        if gpu_for(row) in BLACKWELL:
            o = replace(o, attention=None)
    return o


def _seq(row: dict) -> int:
    return fair._seq(row)


def per_node(row: dict) -> int:
    """GPUs per NVLink domain, as ``minipar plan`` takes it: the GPU's domain (8 on a baseboard,
    72 on a GB200 NVL72 rack), of which a job holds the largest share that divides its GPUs."""
    domain = hardware.gpu(gpu_for(row)).nvlink_domain
    n = min(domain, row["gpus"])
    return n if row["gpus"] % n == 0 else max(k for k in range(1, n + 1) if row["gpus"] % k == 0)


def config_for(row: dict):
    """The planner's shape and :class:`Config` for ``row``: the published recomputation, else
    the least that fits."""
    m = planner.MODELS[modern._preset(row)]
    m = replace(m, seq=_seq(row)) if _seq(row) != m.seq else m
    cluster = planner.cluster(row["gpus"], per_node(row), gpu_for(row))
    tries = [row["recompute"]] if row.get("recompute") else ["none", "selective", "full"]
    for rc in tries:
        c = planner.evaluate(m, cluster, modern.layout_for(row, rc), options_for(row))
        if c.fits:
            break
    return m, c


def measured_seconds(row: dict) -> float:
    return fair.measured_seconds(row)


def evaluate_row(row: dict) -> dict:
    """One kept row: measured and predicted step, the error, and what :mod:`.baseline` reads."""
    _, c = config_for(row)
    measured = measured_seconds(row)
    e = {
        "id": row["id"],
        "source": row["source"],
        "model": row["model"],
        "gpu": gpu_for(row),
        "gpus": row["gpus"],
        "precision": row["precision"],
        "layout": (row["tp"], row["pp"], row["cp"] or 1, row.get("vp") or 1, row["dp"]),
        "micro_batch": row.get("micro_batch"),
        "recompute": c.layout.recompute,
        "measured_s": measured,
        "predicted_s": c.step_seconds,
        "error": 100 * (c.step_seconds / measured - 1),
        "fits": c.fits,
        "predicted_gib": c.bytes_per_gpu / 2**30,
    }
    m = planner.MODELS[modern._preset(row)]
    m = replace(m, seq=_seq(row)) if _seq(row) != m.seq else m
    e["model_flops"] = planner.model_flops(m, row["global_batch"], "none")[0]
    e["layout_key"] = fair.layout_key(row, gpu_for(row))
    return e


def summary(band: float = BAND) -> dict:
    """Experiment 4: every kept row evaluated, scored beside the baseline fitted on experiment
    3's rows (:func:`fair.score`), the targets checked, and every row read and not kept with its
    reason."""
    done = [evaluate_row(r) for r in kept_rows()]
    s = fair.score("4", done, band)
    base = baseline.fit(fair.calibration("4"))
    for e, x in zip(done, s["baseline_errors"], strict=True):
        e["baseline_error"] = x
    share = s["layouts_within"] / s["layouts"] if s["layouts"] else float("nan")
    return s | {
        "rows": done,
        "baseline_mfu": base,
        "layouts_within_share": share,
        "median_ratio": s["median"] / s["baseline_median"],
        "meets_layouts_target": share >= TARGETS["layouts_within_share"],
        "meets_median_target": s["median"] <= TARGETS["median_vs_baseline"] * s["baseline_median"],
        "by_source": {
            src: (
                sum(e["source"] == src for e in done),
                sum(e["source"] == src and abs(e["error"]) <= band for e in done),
                statistics.median(abs(e["error"]) for e in done if e["source"] == src),
            )
            for src in dict.fromkeys(e["source"] for e in done)
        },
        "not_evaluated": {r["id"]: r["excluded_because"] for r in load()["rows"] if not r["kept"]},
    }


def _record(s: dict) -> dict:
    """:func:`summary`'s result as the record keeps it (JSON; the rows not kept are read from
    the rows file)."""
    keep = {k: v for k, v in s.items() if k != "not_evaluated"}
    return json.loads(json.dumps(keep))


def as_evaluated() -> dict:
    """Experiment 4 as it was evaluated, once, on the planner of the freeze :data:`FREEZE_COMMIT`
    (:data:`RECORD`), in :func:`summary`'s form: the record, not the planner of today, which
    changed after the freeze ended."""
    rec = json.loads(RECORD.read_text())
    for e in rec["rows"]:
        e["layout"] = tuple(e["layout"])
        e["layout_key"] = tuple(tuple(v) if isinstance(v, list) else v for v in e["layout_key"])
    rec["by_source"] = {k: tuple(v) for k, v in rec["by_source"].items()}
    rec["not_evaluated"] = {r["id"]: r["excluded_because"] for r in load()["rows"] if not r["kept"]}
    return rec
