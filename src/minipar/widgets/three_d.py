"""Explorer for the putting-them-together chapter: one layout's memory, step time and cost, and
the same t at every other pipeline depth. ``widgets/three_d_model.js``'s ``planEvaluate`` and
``planCluster`` are the JavaScript twins of :func:`minipar.cost.planner.three_d.evaluate` and
:func:`~minipar.cost.planner.three_d.cluster` (parity-tested in tests/test_three_d_explorer.py).
"""

from __future__ import annotations

import json
import sys
import tomllib
from dataclasses import asdict, replace
from functools import cache
from pathlib import Path

from minipar.cost.kernels.hardware import GPUS, LINKS, gpu_profile, load_gpu_profile
from minipar.cost.planner.layout import Layout, Options
from minipar.cost.planner.three_d import MODELS, Space, search
from minipar.cost.planner.three_d import cluster as make_cluster
from minipar.widgets import Explorer

_PRESETS = tomllib.loads(Path(__file__).with_name("three_d_presets.toml").read_text("utf-8"))
#: The published layouts the explorer opens models on (sources in three_d_presets.toml).
PRESET_LAYOUTS = _PRESETS["published"]
#: The runs whose best layout the planner finds: (GPUs, global batch in sequences, GPU, the
#: largest ep searched), for models with no published layout.
PLANNER_PRESETS = {k: tuple(v) for k, v in _PRESETS["planner"].items()}


# the explorer's control -> the field of the planner's candidate that sets it
_SAME = ("cp", "ep", "recompute", "sp", "zero")  # controls named as the fields
_CONTROLS = {"b": "micro_batch", "v": "chunks"} | {k: k for k in _SAME}


@cache
def planner_preset(model: str) -> dict:
    """The planner's best fitting layout for ``model``'s run in :data:`PLANNER_PRESETS`, as a
    preset: the layout and every setting the search chose."""
    gpus, batch, gpu, max_ep = PLANNER_PRESETS[model]
    cluster = make_cluster(gpus, 8, gpu)
    # the explorer prices even stages (p divides the layers): a 94-layer model's best would
    # otherwise be an uneven split the explorer refuses
    space = Space(max_ep=max_ep, split="even")
    best = next(c for c in search(MODELS[model], cluster, batch, space) if c.fits)
    controls = {k: getattr(best, f) for k, f in _CONTROLS.items()} | {"gpu": gpu}
    return {"t": best.tp, "p": best.pp, "gpus": gpus, "batch": batch, "controls": controls}


#: :func:`planner_preset` of every run in :data:`PLANNER_PRESETS`, as stored: the explorer,
#: its notebooks and tests read them here rather than run fourteen searches (6 to 14 CPU-s) in
#: every process. ``python -m minipar.widgets.three_d`` rewrites the file after a change to the
#: planner; tests/test_three_d_presets.py fails while it is not the search's answer.
PLANNER_LAYOUTS = Path(__file__).with_name("three_d_planner_layouts.json")


@cache
def planner_layouts() -> dict:
    """{model: :func:`planner_preset`} as stored in :data:`PLANNER_LAYOUTS`."""
    return json.loads(PLANNER_LAYOUTS.read_text("utf-8"))["layouts"]


def write_planner_layouts(path: Path = PLANNER_LAYOUTS) -> None:
    """Search every run of :data:`PLANNER_PRESETS` and store the best layouts at ``path``."""
    about = (
        "The planner's best fitting layout for each run of three_d_presets.toml's [planner] "
        "table, as minipar.widgets.three_d.planner_preset finds it; written by "
        "`python -m minipar.widgets.three_d`, checked by tests/test_three_d_presets.py."
    )
    layouts = {k: planner_preset(k) for k in PLANNER_PRESETS}
    text = json.dumps({"about": about, "layouts": layouts}, indent=1, sort_keys=True)
    Path(path).write_text(text + "\n", "utf-8")


def preset_layout(model: str) -> dict | None:
    """The layout the explorer opens ``model`` on: published, else the planner's best
    (:data:`PLANNER_LAYOUTS`)."""
    if model in PRESET_LAYOUTS:
        return PRESET_LAYOUTS[model]
    return planner_layouts()[model] if model in PLANNER_PRESETS else None


def preset_run(model: str) -> tuple:
    """(shape, cluster, layout, options) of the run the explorer opens ``model`` on
    (:func:`preset_layout`), as :func:`minipar.cost.planner.three_d.evaluate` takes them: the
    Python side of what the explorer's chart prices (the controls a preset leaves unset at the
    explorer's defaults: A100-80GB, b = 1, v = 1, selective recomputation, SP, ZeRO-1, no FP8,
    all-to-alls not overlapped, no DualPipe)."""
    pre = preset_layout(model)
    c = pre.get("controls", {})
    model_shape = MODELS[model]
    if "layers" in pre:
        model_shape = replace(model_shape, layers=pre["layers"])
    cluster = make_cluster(
        pre["gpus"], 8, c.get("gpu", "A100-80GB"), c.get("intra"), c.get("inter")
    )
    t, p, cp = pre["t"], pre["p"], c.get("cp", 1)
    layout = Layout(
        pre["batch"],
        t,
        p,
        pre["gpus"] // (t * cp * p),
        c.get("b", 1),
        c.get("v", 1),
        c.get("recompute", "selective"),
        c.get("sp", True),
        c.get("zero", 1),
        cp,
        c.get("ep", 1),
        pre.get("split", "even"),
    )
    overlap = c.get("ep_overlap", False)
    dualpipe = c.get("dualpipe", False) and overlap  # as the chart: DualPipe needs the overlap
    return (
        model_shape,
        cluster,
        layout,
        Options(fp8=c.get("fp8"), ep_overlap=overlap, dualpipe=dualpipe),
    )


def deepseek_v3_what_ifs() -> tuple:
    """(shape, {name: (cluster, layout, options)}) of DeepSeek-V3's run as the explorer opens it
    (:func:`preset_run`: PP 16 × EP 64 over 8 nodes of H800, ZeRO-1, no TP, FP8, DualPipe with
    the all-to-alls overlapped) and its what-ifs: ``h800`` as published, ``h800_exposed`` under
    1F1B with the all-to-alls exposed, ``h800_tp8`` with TP 8 inside each node; ``nvl72``,
    ``nvl72_exposed`` and ``nvl72_tp8`` the same on GB200 NVL72 (64 GPUs of each rack in use,
    so an EP group of 64 is one NVLink domain). The chapter's figure and notebook price these."""
    model_shape, h800, layout, options = preset_run("deepseek-v3")
    nvl72 = make_cluster(layout.tp * layout.pp * layout.dp, 64, "GB200-NVL72")
    tp8 = replace(layout, tp=8, dp=layout.dp // 8, sp=True)
    exposed = replace(options, ep_overlap=False, dualpipe=False)
    runs = {}
    for name, cluster in (("h800", h800), ("nvl72", nvl72)):
        runs |= {name: (cluster, layout, options), f"{name}_exposed": (cluster, layout, exposed)}
        runs[f"{name}_tp8"] = (cluster, tp8, options)
    return model_shape, runs


def _link(L) -> dict:
    return {f: getattr(L, f) for f in ("name", "alpha", "bandwidth", "bus_efficiency")}


def gpu_config(g) -> dict:
    """A :class:`minipar.cost.kernels.hardware.GPU` as the explorer's JavaScript takes it: its
    fields but the peaks (``peak``: dense bf16, ``peak_fp8``), its source and note."""
    out = {k: v for k, v in gpu_profile(g).items() if k not in ("peak_flops", "source", "note")}
    return out | {"peak": g.peak_flops["bf16"], "peak_fp8": g.peak_flops.get("fp8")}


def cluster_config(cluster) -> dict:
    """A :class:`minipar.cost.planner.three_d.Cluster` as ``planEvaluate`` takes it (what
    ``planCluster`` builds from the controls; the parity tests pass it directly)."""
    return {
        "gpus": cluster.gpus,
        "gpus_per_node": cluster.gpus_per_node,
        "peak": cluster.peak,
        "gpu": gpu_config(cluster.gpu) | {"peak": cluster.peak},
        "intra": _link(cluster.intra),
        "inter": _link(cluster.inter),
    }


def plan_config(gpu_profile=None) -> dict:
    """The explorer's data: model shapes with a valid default layout each, GPUs (memory, dense
    bf16 peak, HBM bandwidth, SMs, η, their generation's links) and link presets; with
    ``gpu_profile`` (a path to what ``minipar calibrate gpu`` writes) that GPU too, under its
    own name (:func:`minipar.cost.kernels.hardware.load_gpu_profile`)."""
    gpus = dict(GPUS)
    if gpu_profile is not None:
        g = load_gpu_profile(gpu_profile)
        gpus[g.name] = g
    links = {k: _link(L) for k, L in LINKS.items()}
    choice = {"GPU's own": None, **{k: None for k in LINKS}}
    return {
        "models": {
            k: {
                **{f: v for f, v in asdict(m).items() if f != "note"},
                "layout": preset_layout(k),
            }
            for k, m in MODELS.items()
        },
        "gpus": {k: gpu_config(g) for k, g in gpus.items()},
        "links": links,
        "intra_links": choice,
        "inter_links": choice,
    }


def plan_explorer(gpu_profile=None, **values):
    """The live layout explorer; ``values`` override the default controls; ``gpu_profile``
    adds a measured GPU (:func:`plan_config`)."""
    return Explorer("three_d", "plan", config=plan_config(gpu_profile), values=values)


if __name__ == "__main__":  # python -m minipar.widgets.three_d [PATH]
    write_planner_layouts(*(Path(a) for a in sys.argv[1:2]))
