"""The planner's form and constants as frozen before modern published tables were evaluated
(``frozen_model.json``): the term table, every GPU and link preset's constants, the kernel
model's module constants (FP8, FlashAttention-3, compiled steps) and the probe plans' step time
and memory. ``tests/test_cost_frozen.py`` holds the model to the file; after a
deliberate change to the model, ``python -m minipar.cost.planner.frozen`` rewrites it, to be committed
on its own and re-validated (:mod:`minipar.cost.validation.modern`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..kernels import compute
from ..kernels.hardware import GPUS, LINKS
from . import communication_terms
from . import three_d as planner
from .term_table import TERMS

PATH = Path(__file__).resolve().parent / "frozen_model.json"


def probe(p: dict) -> dict:
    """One probe plan (a ``probes`` entry of the file) on the model as it is now."""
    cluster = planner.cluster(p["gpus"], 8, p["gpu"])
    options = planner.Options(**p.get("options", {}))
    c = planner.evaluate(
        planner.MODELS[p["model"]], cluster, planner.Layout(**p["layout"]), options
    )
    return {"step_seconds": c.step_seconds, "bytes_per_gpu": c.bytes_per_gpu, "mfu": c.mfu}


CONSTANTS = (
    "FA3_EFFICIENCY",
    "FP8_GEMM_EFFICIENCY",
    "FP8_ROWWISE_GEMM_RATIO",
    "COMPILED_TRAFFIC",
    "FP8_CAST_BYTES",
    "FP8_RECAST_BYTES",
)
"""The kernel model's module constants the snapshot holds (:mod:`minipar.cost.kernels.compute`)."""

PLANNER_CONSTANTS = ("TP_OVERLAP_PIPELINE",)
"""The planner's own constants the snapshot holds
(:mod:`minipar.cost.planner.communication_terms`: what TP overlap costs the GEMMs)."""


def gpus_now() -> dict:
    return json.loads(json.dumps({k: dataclasses.asdict(g) for k, g in GPUS.items()}))


def links_now() -> dict:
    return json.loads(json.dumps({k: dataclasses.asdict(lk) for k, lk in LINKS.items()}))


def constants_now() -> dict:
    now = {k: getattr(compute, k) for k in CONSTANTS}
    now |= {k: getattr(communication_terms, k) for k in PLANNER_CONSTANTS}
    return json.loads(json.dumps(now))


def rewrite() -> None:
    """Recompute every probe of the file at its layout and write the file anew."""
    data = json.loads(PATH.read_text())
    data["terms"] = [t.name for t in TERMS]
    data["gpus"] = gpus_now()
    data["links"] = links_now()
    data["constants"] = constants_now()
    data["probes"] = [p | probe(p) for p in data["probes"]]
    PATH.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    rewrite()
