"""The fair baseline beside every validation score, and the count by independent layout.

**The baseline** is the model with no model in it: every run at one constant MFU per precision,
the step time = model FLOPs per step / (GPUs × the precision's dense datasheet peak × MFU), one
MFU for BF16 runs (of the BF16 peak) and one for FP8 runs (of the FP8 peak, whatever their
scaling). Each MFU is fitted on calibration rows only, by least squares on the log of the
measured over the predicted step time: the geometric mean of the MFUs the rows imply
(:func:`fit`). The peak is the datasheet's (:data:`DATASHEET`): the baseline knows a part's
precision, not its power limit or its kernels. The FLOPs are the planner's own count
(:func:`minipar.cost.planner.three_d.model_flops`, no recomputation, Narayanan et al. 2021
Eq. 3), so the baseline and the model differ only in what the model adds.

**Independent layouts.** A weak-scaling table repeats one layout per model replica at growing
data parallelism, and a later container repeats it again; such rows are not independent
checks. :func:`layout_key` makes the rows that differ only in d (and the global batch and GPU
count that follow from it, or the container that ran them) one layout; :func:`score` counts a
layout as within the band when every one of its rows is."""

from __future__ import annotations

import math
import statistics

from ..kernels.hardware import GPUS

DATASHEET = {"H100-HBM2e-500W": "H100-SXM"}
"""The preset whose peaks are a part's datasheet peaks, where the planner's preset is not: the
500 W H100's preset scales the SXM's peaks by a fitted power factor, the baseline does not."""


def family(precision: str) -> str:
    """``"fp8"`` for every FP8 recipe (delayed, current, rowwise, block-scaled: ``fp8``,
    ``fp8-cs``, ``mxfp8``, ...), else ``"bf16"``."""
    return "fp8" if "fp8" in str(precision).lower() else "bf16"


def peak(gpu: str, precision: str) -> float:
    """The dense datasheet peak, FLOP/s, of preset ``gpu`` at ``precision``'s family."""
    return GPUS[DATASHEET.get(gpu, gpu)].peak_flops[family(precision)]


def implied_mfu(e: dict) -> float:
    """The MFU an evaluated row implies: its model FLOPs over (GPUs × peak × measured step).
    ``e`` carries ``model_flops``, ``gpus``, ``gpu``, ``precision`` and ``measured_s``."""
    return e["model_flops"] / (e["gpus"] * peak(e["gpu"], e["precision"]) * e["measured_s"])


def fit(calibration: list[dict]) -> dict[str, float]:
    """One MFU per precision family of the calibration rows, the geometric mean of
    :func:`implied_mfu` over that family's rows (the least-squares fit of the log error)."""
    out = {}
    for fam in ("bf16", "fp8"):
        xs = [implied_mfu(e) for e in calibration if family(e["precision"]) == fam]
        if xs:
            out[fam] = math.exp(statistics.fmean(math.log(x) for x in xs))
    return out


def seconds(e: dict, mfu: dict[str, float]) -> float:
    """The baseline's step time for an evaluated row at the fitted ``mfu``; ``ValueError``
    where no calibration row had the row's precision family."""
    fam = family(e["precision"])
    if fam not in mfu:
        raise ValueError(f"no calibration row of precision {fam} to fit its MFU on")
    return e["model_flops"] / (e["gpus"] * peak(e["gpu"], e["precision"]) * mfu[fam])


def layout_key(e: dict) -> tuple:
    """What makes rows one layout: everything an evaluated row carries in ``layout_key`` (model,
    sequence, precision, GPU, per-replica layout, switches), never d, the GPU count, the global
    batch or the container."""
    return e["layout_key"]


def score(rows: list[dict], mfu: dict[str, float], band: float = 15.0) -> dict:
    """The model's score and the baseline's side by side over evaluated ``rows`` (each with
    ``error`` in % and what :func:`seconds` and :func:`layout_key` read): rows and layouts
    within ±``band`` %, the median |error|, for both."""
    base = [100 * (seconds(e, mfu) / e["measured_s"] - 1) for e in rows]
    groups: dict[tuple, list[int]] = {}
    for i, e in enumerate(rows):
        groups.setdefault(layout_key(e), []).append(i)

    def within_layouts(errors):
        return sum(all(abs(errors[i]) <= band for i in idx) for idx in groups.values())

    model = [e["error"] for e in rows]
    return {
        "n": len(rows),
        "within": sum(abs(x) <= band for x in model),
        "median": statistics.median(abs(x) for x in model) if rows else float("nan"),
        "layouts": len(groups),
        "layouts_within": within_layouts(model),
        "baseline_mfu": mfu,
        "baseline_errors": base,
        "baseline_within": sum(abs(x) <= band for x in base),
        "baseline_median": statistics.median(abs(x) for x in base) if rows else float("nan"),
        "baseline_layouts_within": within_layouts(base),
        "band": band,
    }
