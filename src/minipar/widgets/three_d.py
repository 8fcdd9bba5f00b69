"""Explorer for the putting-them-together chapter: one layout's memory, step time and cost, and
the same t at every other pipeline depth, from the planner's model.

The browser evaluates ``widgets/three_d.js``, whose ``planEvaluate`` is the JavaScript twin of
:func:`minipar.cost.three_d.evaluate` (parity-tested in tests/test_three_d_explorer.py).
"""
from __future__ import annotations

from dataclasses import asdict

from minipar.cost.hardware import GPUS, LINKS
from minipar.cost.three_d import MODELS


def plan_config() -> dict:
    """The explorer's data: model shapes, GPUs (memory, dense bf16 peak) and link presets."""
    return {"models": {k: {f: v for f, v in asdict(m).items() if f != "note"}
                       for k, m in MODELS.items()},
            "gpus": {k: {"memory_bytes": g.memory_bytes, "peak": g.peak_flops["bf16"]}
                     for k, g in GPUS.items()},
            "links": {k: {"name": L.name, "alpha": L.alpha, "bandwidth": L.bandwidth}
                      for k, L in LINKS.items()}}


def plan_explorer(**values):
    """The live layout explorer; ``values`` override the default controls."""
    from minipar.widgets import Explorer

    return Explorer("three_d", "plan", config=plan_config(), values=values)
