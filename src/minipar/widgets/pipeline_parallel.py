"""Explorer for the pipeline-parallel chapter: any schedule's timeline, bubble and peak
activations for p, m, v and the F/B/W times. ``widgets/pipeline_parallel.js``'s ``schedule``,
``simulate`` and ``ppModel`` are the JavaScript twins of
:func:`minipar.pipeline_parallel.schedules.schedule`,
:func:`minipar.pipeline_parallel.simulate.simulate` and :func:`pp_model`
(tests/test_pipeline_parallel_explorer.py): the pipeline's cost model is the schedule itself,
run on paper by those two pure modules.
"""

from __future__ import annotations

import math

from minipar.pipeline_parallel.schedules import schedule
from minipar.pipeline_parallel.simulate import simulate
from minipar.widgets import Explorer
from minipar.widgets.inputs import NONNEGATIVE, check_numbers, check_values


def pp_model(
    name: str, p: int, m: int, v: int = 1, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0
) -> dict:
    """Simulated bubble (mean idle fraction), step time and peak micro-batches held per rank
    (also in stage-equivalents, chunks / v) of schedule ``name``. Times are in any one unit;
    each must be a finite number >= 0 and at least one > 0. Inputs are checked first by the
    explorers' input contract (:mod:`minipar.widgets.inputs`), as the explorer's boxes are."""
    check_numbers(p=p, m=m, v=v)
    check_numbers(NONNEGATIVE, t_F=t_f, t_B=t_b, t_W=t_w)
    check_times(t_f, t_b, t_w)

    sim = simulate(schedule(name, p, m, v), m, t_f, t_b, t_w)
    return {
        "bubble": sim.bubble,
        "makespan": sim.makespan,
        "peak_in_flight": sim.peak_in_flight,
        "peak_stages": sim.peak_in_flight_stages,
    }


def check_times(t_f: float, t_b: float, t_w: float) -> None:
    """t_F, t_B, t_W: finite numbers >= 0, not all zero (a step must take time)."""
    for k, x in (("t_F", t_f), ("t_B", t_b), ("t_W", t_w)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
            raise ValueError(f"{k} ({x}) must be a number >= 0")
    if t_f + t_b + t_w <= 0:
        raise ValueError(f"t_F + t_B + t_W ({t_f + t_b + t_w}) must be > 0")


def pp_explorer(**values):
    """The live schedule explorer; ``values`` override the default controls."""
    check_values("pipeline_parallel", "pp-schedule", values)  # the page's input rules
    return Explorer("pipeline_parallel", "pp-schedule", config={}, values=values)
