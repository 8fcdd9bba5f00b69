"""Explorer for the putting-them-together chapter: one layout's memory, step time and cost, and
the same t at every other pipeline depth, from the planner's model.

The browser evaluates ``widgets/three_d.js``, whose ``planEvaluate`` is the JavaScript twin of
:func:`minipar.cost.planner.three_d.evaluate` and ``planCluster`` of :func:`minipar.cost.planner.three_d.cluster`
(parity-tested, invalid inputs included, in tests/test_three_d_explorer.py).
"""

from __future__ import annotations

from dataclasses import asdict
from functools import cache

from minipar.cost.kernels.hardware import GPUS, LINKS, gpu_profile, load_gpu_profile
from minipar.cost.planner.three_d import MODELS, cluster, search
from minipar.widgets import Explorer

# Each preset opens on a layout that satisfies the rules (t | a, p | L, t·cp·p | N), published where
# one was: GPT-3 175B t = 8, p = 16 on 1024 A100 (Narayanan et al. 2021 §5.1); MT-NLG 530B
# t = 8, p = 35 on 2240 (Smith et al. 2022); the 1T model t = 8, p = 64 on 3072 (Narayanan et al.
# 2021 Table 1); BLOOM 176B (d, t, p) = (8, 4, 12) on 384 A100 of Jean Zay with b = 2, full
# recomputation, ZeRO-1 (BigScience 2022 §3.4): its 70 layers and the embedding and head are 72
# pipeline units, 6 per stage, the last holding 5 layers and the head, so the preset prices 60
# layers (5 per stage, + the head), as minipar.cost.validation.published does; Llama 3 405B in
# its 128K-context stage t = 8, cp = 16, p = 16, d = 8 on 16384 H100 (Llama Team 2024 §3.3.4),
# full recomputation, the interleaved schedule with v = 4 (the chapter's notebook prices the same
# layout); its 8K pre-training stage t = 8, p = 16, d = 128 on 16384 H100, 2048 sequences (16 M
# tokens), priced with the same settings and, like the 128K stage, its 126 layers and the
# embedding and head as 128 pipeline units. ``controls`` are the run's other settings, shown on the page and greyed out;
# ``layers`` overrides the shape's for the pipeline split. Models without a published layout
# open on the planner's best (:data:`PLANNER_PRESETS`).
PRESET_LAYOUTS = {
    "gpt3-175b": {"t": 8, "p": 16, "gpus": 1024, "batch": 1536},
    "bloom-176b": {
        "t": 4,
        "p": 12,
        "gpus": 384,
        "batch": 2048,
        "layers": 60,
        "controls": {"b": 2, "recompute": "full", "sp": False, "zero": 1, "inter": "opa-jean-zay"},
    },
    "mt-nlg-530b": {"t": 8, "p": 35, "gpus": 2240, "batch": 1920},
    "megatron-1t": {"t": 8, "p": 64, "gpus": 3072, "batch": 3072},
    "llama3-405b": {"t": 8, "p": 16, "gpus": 16384, "batch": 2048, "layers": 128},
    "llama3-405b-128k": {"t": 8, "p": 16, "gpus": 16384, "batch": 128},
}
_LLAMA3 = {"b": 1, "v": 4, "recompute": "full", "sp": True, "zero": 1, "gpu": "H100-SXM"}
PRESET_LAYOUTS["llama3-405b"]["controls"] = {"cp": 1, **_LLAMA3}
PRESET_LAYOUTS["llama3-405b-128k"]["controls"] = {"cp": 16, **_LLAMA3}

#: Models with no published layout open on the planner's best for a stated run: (GPUs, global
#: batch in sequences, GPU, the largest ep searched). Llama 3 8B and 70B on H100 at their 8K
#: context, Llama 2 70B on A100 (its paper's GPU), Mixtral 8×7B on 64 H100 with ep up to 8,
#: and the shapes of NeMo 24.07's performance table on its GPUs and batches.
PLANNER_PRESETS = {
    "llama3-8b": (64, 512, "H100-SXM", 1),
    "llama3-70b": (512, 1024, "H100-SXM", 1),
    "llama2-70b": (256, 512, "A100-80GB", 1),
    "mixtral-8x7b": (64, 256, "H100-SXM", 8),
    # the GPUs and global batch of NeMo 24.07's published H100 runs (its layouts use FP8 and
    # fused kernels, which the explorer does not switch): the planner's best bf16 layout there
    "llama2-7b": (8, 128, "H100-SXM", 1),
    "llama2-13b": (16, 128, "H100-SXM", 1),
    "gpt3-5b": (64, 2048, "H100-SXM", 1),
    "gpt3-20b": (64, 256, "H100-SXM", 1),
    "nemotron-8b": (64, 256, "H100-SXM", 1),
    "nemotron-340b": (128, 32, "H100-SXM", 1),
}


@cache
def planner_preset(model: str) -> dict:
    """The planner's best fitting layout for ``model``'s run in :data:`PLANNER_PRESETS`, as a
    preset: the layout and every setting the search chose."""
    gpus, batch, gpu, max_ep = PLANNER_PRESETS[model]
    cl = cluster(gpus, 8, gpu)
    best = next(c for c in search(MODELS[model], cl, batch, max_ep=max_ep) if c.fits)
    return {
        "t": best.tp,
        "p": best.pp,
        "gpus": gpus,
        "batch": batch,
        "controls": {
            "cp": best.cp,
            "ep": best.ep,
            "b": best.micro_batch,
            "v": best.chunks,
            "recompute": best.recompute,
            "sp": best.sp,
            "zero": best.zero,
            "gpu": gpu,
        },
    }


def preset_layout(model: str) -> dict | None:
    """The layout the explorer opens ``model`` on: published, else the planner's best."""
    if model in PRESET_LAYOUTS:
        return PRESET_LAYOUTS[model]
    return planner_preset(model) if model in PLANNER_PRESETS else None


def _link(L) -> dict:
    return {f: getattr(L, f) for f in ("name", "alpha", "bandwidth", "bus_efficiency")}


def gpu_config(g) -> dict:
    """A :class:`minipar.cost.kernels.hardware.GPU` as the explorer's JavaScript takes it: its
    fields but the peaks (``peak``: dense bf16, ``peak_fp8``), its source and note."""
    out = {k: v for k, v in gpu_profile(g).items() if k not in ("peak_flops", "source", "note")}
    return out | {"peak": g.peak_flops["bf16"], "peak_fp8": g.peak_flops.get("fp8")}


def cluster_config(cl) -> dict:
    """A :class:`minipar.cost.planner.three_d.Cluster` as ``planEvaluate`` takes it (what
    ``planCluster`` builds from the controls; the parity tests pass it directly)."""
    return {
        "gpus": cl.gpus,
        "gpus_per_node": cl.gpus_per_node,
        "peak": cl.peak,
        "gpu": gpu_config(cl.gpu) | {"peak": cl.peak},
        "intra": _link(cl.intra),
        "inter": _link(cl.inter),
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
