"""The planner as frozen for experiment 4 (``frozen_experiment4.json``), before any of its rows
was read (:mod:`minipar.cost.validation.experiment4`): the term table, every GPU and link
preset, every module-level constant of the cost model (:func:`constants_now`: the kernel
model's and each planner module's), and probe plans, each with its step time, memory, MFU and
every term of its breakdown, including one search's first choice.

Unlike ``frozen_model.json``, which a deliberate change to the model rewrites
(:mod:`minipar.cost.planner.frozen`), this file is never rewritten: it is the record of the
model experiments 4 and 5 evaluated. The freeze held until the pipeline schedules' memory was
changed (the in-flight micro-batches of the flexible schedule); since then the planner is a new
model, to be validated by a new experiment on rows it has not seen, the two experiments' results
are read from their records (``experiment4_as_evaluated.json``, ``experiment5_as_evaluated.json``),
and ``tests/test_cost_frozen_experiment4.py`` holds this file to the bytes of the freeze."""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
from pathlib import Path

from .. import kernels
from . import frozen
from . import three_d as planner
from .term_table import TERMS

PATH = Path(__file__).resolve().parent / "frozen_experiment4.json"

_ROOTS = (kernels, importlib.import_module(__package__))


def _modules() -> list:
    """Every module of :mod:`minipar.cost.kernels` and :mod:`minipar.cost.planner` but the two
    that snapshot them."""
    out = []
    for root in _ROOTS:
        for info in pkgutil.iter_modules(root.__path__):
            name = f"{root.__name__}.{info.name}"
            if info.name not in ("frozen", "frozen_experiment4"):
                out.append(importlib.import_module(name))
    return out


def _plain(x):
    """``x`` as JSON (tuples as lists, dataclasses and named tuples as objects), or ``None``
    where it holds anything else (a function, a class, a path)."""
    if isinstance(x, bool | int | float | str) or x is None:
        return x
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _plain(dataclasses.asdict(x))
    if hasattr(x, "_asdict"):
        return _plain(x._asdict())
    if isinstance(x, list | tuple):
        items = [_plain(v) for v in x]
        return None if any(i is None and v is not None for i, v in zip(items, x)) else items
    if isinstance(x, dict):
        items = {str(k): _plain(v) for k, v in x.items()}
        return None if any(items[str(k)] is None and v is not None for k, v in x.items()) else items
    return None


def constants_now() -> dict:
    """Every UPPER_CASE module attribute of the cost model that is plain data, by module."""
    out = {}
    for mod in _modules():
        values = {}
        for k, v in vars(mod).items():
            if k.isupper() and not k.startswith("_"):
                p = _plain(v)
                if p is not None:
                    values[k] = p
        if values:
            out[mod.__name__.rsplit(".", 1)[-1]] = values
    return json.loads(json.dumps(out))


def _cluster(p: dict) -> planner.Cluster:
    return planner.cluster(p["gpus"], p.get("gpus_per_node", min(8, p["gpus"])), p["gpu"])


def _model(p: dict) -> planner.ModelShape:
    m = planner.MODELS[p["model"]]
    return dataclasses.replace(m, seq=p["seq"]) if p.get("seq", m.seq) != m.seq else m


def probe(p: dict) -> dict:
    """One probe of the file on the model as it is now: a layout (``layout``) evaluated, or a
    search (``search``: the global batch) whose first choice is kept."""
    options = planner.Options(**p.get("options", {}))
    if "search" in p:
        c = planner.search(_model(p), _cluster(p), p["search"], options=options)[0]
        chosen = {k: getattr(c.layout, k) for k in planner.LAYOUT_FIELDS}
    else:
        c = planner.evaluate(_model(p), _cluster(p), planner.Layout(**p["layout"]), options)
        chosen = None
    out = {
        "step_seconds": c.step_seconds,
        "bytes_per_gpu": c.bytes_per_gpu,
        "mfu": c.mfu,
        "fits": c.fits,
        "terms": {k: float(v) for k, v in c.breakdown.values.items()},
    }
    return out | ({"chosen": json.loads(json.dumps(chosen))} if chosen else {})


PROBES = [
    # experiment 3's DGX Cloud recipes as mapped: FP8 parameters, bf16 main gradients, TP overlap
    dict(
        model="llama3-405b",
        gpu="H100-SXM",
        gpus=576,
        seq=8192,
        layout=dict(global_batch=252, tp=8, pp=9, dp=4, micro_batch=1, chunks=7, recompute="none")
        | dict(sp=True, zero=1, cp=2),
        options=dict(fp8="delayed", attention="fa3", compiled=True, tp_overlap=True)
        | dict(overlap_grad_reduce=True, fp8_params=True, main_grad_bytes=2),
    ),
    dict(
        model="gpt3-175b",
        gpu="H100-SXM",
        gpus=128,
        layout=dict(global_batch=256, tp=4, pp=8, dp=4, micro_batch=1, chunks=12)
        | dict(recompute="none", sp=True, zero=1),
        options=dict(fp8="delayed", attention="fa3", compiled=True, tp_overlap=True)
        | dict(overlap_grad_reduce=True, fp8_params=True, main_grad_bytes=2),
    ),
    dict(
        model="nemotron4-15b",
        gpu="H100-SXM",
        gpus=16,
        layout=dict(global_batch=64, tp=4, pp=1, dp=4, micro_batch=4, recompute="none", sp=True)
        | dict(zero=1),
        options=dict(attention="fa3", compiled=True, tp_overlap=True, overlap_grad_reduce=True),
    ),
    dict(
        model="llama3-8b",
        gpu="H100-SXM",
        gpus=8,
        seq=8192,
        layout=dict(global_batch=128, tp=1, pp=1, dp=4, micro_batch=1, recompute="none", zero=1)
        | dict(cp=2),
        options=dict(fp8="current", attention="fa3", compiled=True, overlap_grad_reduce=True),
    ),
    # torchtitan's stack: FSDP with the checkpoint inside the unit, async TP, rowwise FP8, CP
    dict(
        model="llama3-70b",
        gpu="H100-HBM2e-500W",
        gpus=256,
        layout=dict(global_batch=512, tp=8, pp=1, dp=32, micro_batch=16, recompute="full")
        | dict(sp=True, zero=3),
        options=dict(fp8="rowwise", attention="flash", compiled=True, tp_overlap=True)
        | dict(overlap_grad_reduce=False, zero3_ac_inside_unit=True, cp_algorithm="all-gather"),
    ),
    dict(
        model="llama3-8b",
        gpu="H100-HBM2e-500W",
        gpus=8,
        seq=131072,
        layout=dict(global_batch=1, tp=1, pp=1, dp=1, micro_batch=1, recompute="full", zero=0)
        | dict(cp=8),
        options=dict(fp8="current", attention="flash", compiled=True, tp_overlap=False)
        | dict(overlap_grad_reduce=False, zero3_ac_inside_unit=True, cp_algorithm="all-gather"),
    ),
    # Blackwell, MXFP8; an NVL72 rack's domain
    dict(
        model="llama3-70b",
        gpu="B200",
        gpus=64,
        seq=8192,
        layout=dict(global_batch=128, tp=2, pp=4, dp=8, micro_batch=1, chunks=5)
        | dict(recompute="none", sp=True, zero=1),
        options=dict(fp8="mxfp8", compiled=True, tp_overlap=True, overlap_grad_reduce=True),
    ),
    dict(
        model="llama3-405b",
        gpu="GB200-NVL72",
        gpus=256,
        gpus_per_node=64,
        seq=8192,
        layout=dict(global_batch=256, tp=4, pp=8, dp=8, micro_batch=1, chunks=4)
        | dict(recompute="none", sp=True, zero=1, split="units"),
        options=dict(fp8="mxfp8", compiled=True, overlap_grad_reduce=True),
    ),
    # every default decided by the planner (the era's recipe on Hopper)
    dict(
        model="llama3-70b",
        gpu="H100-SXM",
        gpus=64,
        layout=dict(global_batch=128, tp=4, pp=4, dp=4, micro_batch=1, chunks=5)
        | dict(recompute="selective", sp=True, zero=1),
    ),
    # a search: the space, its ordering and the defaults together
    dict(model="llama3-8b", gpu="H100-SXM", gpus=64, search=256),
]
"""The probes added to ``frozen_model.json``'s at the freeze (each the plan of a row kind the
experiment prices: NVIDIA's recipes, torchtitan's stack, Blackwell, the defaults, a search)."""


def snapshot() -> dict:
    """The whole record of the model as it is now."""
    probes = [
        {k: v for k, v in p.items() if k in ("model", "gpu", "gpus", "layout", "options")}
        for p in json.loads(frozen.PATH.read_text())["probes"]
    ] + PROBES
    return {
        "about": __doc__.split("\n\n")[0].replace("\n", " "),
        "terms": [t.name for t in TERMS],
        "gpus": frozen.gpus_now(),
        "links": frozen.links_now(),
        "constants": constants_now(),
        "probes": [p | probe(p) for p in probes],
    }


def write() -> None:
    """Write the freeze's record (once, at the freeze)."""
    PATH.write_text(json.dumps(snapshot(), indent=1) + "\n")


if __name__ == "__main__":
    write()
