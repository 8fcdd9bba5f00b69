"""Memory calculator: per-GPU bytes of a d × t × p training layout against a GPU's capacity,
every number from :func:`minipar.cost.planner.breakdown.per_gpu_memory` (model states under
ZeRO plus the first pipeline stage's 1F1B activations). The live explorer
(``widgets/memory_time.js``, parity-tested) shows the selected ZeRO stage next to the other
three, so what each stage shards is visible at a glance.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from minipar.cost.kernels.hardware import GPUS
from minipar.cost.model import param_count, param_count_llama
from minipar.widgets import Explorer
from minipar.widgets.inputs import check_values

_DATA = tomllib.loads(Path(__file__).with_name("memory_time_presets.toml").read_text("utf-8"))
#: name -> (L, h, a, V), and "custom" (sources in memory_time_presets.toml)
PRESETS = {k: tuple(v) for k, v in _DATA["shapes"].items()} | {"custom": None}
#: name -> the published Llama 2 architecture (L, h, V, a, a_kv, f) of param_count_llama
LLAMA_SHAPES = {k: tuple(v) for k, v in _DATA["llama"].items()}


def preset_params(name: str, s: int = 2048) -> dict:
    """Ψ of a preset: ``eq2`` what the calculator uses (:func:`minipar.cost.model.param_count`,
    sequence length ``s``), and for a Llama preset ``llama`` the published architecture's count
    (:func:`minipar.cost.model.param_count_llama`), else None."""
    if PRESETS.get(name) is None:
        raise ValueError(
            f"preset ({name!r}) must be one of {', '.join(k for k, v in PRESETS.items() if v)}"
        )
    L, h, _, V = PRESETS[name]
    llama = LLAMA_SHAPES.get(name)
    return {"eq2": param_count(L, h, V, s), "llama": param_count_llama(*llama) if llama else None}


def check_inputs(s, b, V) -> None:
    """The calculator's own inputs besides the layout (:func:`check_layout` covers L, h, a, d,
    t, p): positive integers, as the CLI's ``--seq``, ``--batch`` and ``--vocab`` require."""
    for k, v in (("s", s), ("b", b), ("V", V)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < 1:
            raise ValueError(f"{k} ({v}) must be a positive integer")


def memory_config() -> dict:
    """The JavaScript explorer's data: model presets (L, h, a, V), GPU memory in bytes, and the
    published parameter count of each Llama preset (``llama_params``)."""
    return {
        "presets": {k: list(v) if v else None for k, v in PRESETS.items()},
        "gpus": {k: g.memory_bytes for k, g in GPUS.items()},
        "llama_params": {k: param_count_llama(*v) for k, v in LLAMA_SHAPES.items()},
    }


def memory_time_explorer(**values):
    """The live memory calculator; ``values`` override the default controls."""
    check_values("memory_time", "memory", values)  # the page's own input rules
    return Explorer("memory_time", "memory", config=memory_config(), values=values)
